package flows

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryDropHasAReason builds the golden states and checks that every flow that renders a drop
// carries a DropReason (DropFor), that DropAt finds that reason at the flow's (bridge, table,
// priority, kind), and that every declared spot is written by some state.
func TestEveryDropHasAReason(t *testing.T) {
	withGW := testState(webTCP(), webUDP())
	withGW.Ports.IntGateway, withGW.Ports.GatewayMAC = 4, mustMAC("02:00:0a:f4:01:01")
	ranges := webTCP()
	ranges.FilterSources = true
	// Egress without a gateway port: an excluded destination has no host path; 192.0.2.52 has
	// no active gateway, and its port pool is exhausted (echo-c has no block).
	egress := testState()
	egress.Egress = map[netip.Addr]EgressIP{ip("192.0.2.52"): {IP: ip("192.0.2.52"), Policy: "none"}}
	pod := egress.Pods[Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}]
	pod.Egress = &PodEgress{IP: ip("192.0.2.52"), Policy: "none", Excluded: []netip.Prefix{pfx("198.51.100.128/25")}, PortsExhausted: true}
	egress.Pods[pod.Key()] = pod
	chained := Pod{Namespace: "demo", Name: "chained", IPs: []netip.Addr{ip("10.88.1.7")}, MAC: mustMAC("0a:58:0a:58:01:07"),
		OFPort: 9, Chained: true, Egress: &PodEgress{IP: ip("192.0.2.52"), Policy: "none"}}
	egress.Pods[chained.Key()] = chained
	seen := map[DropSpot]bool{}
	// A dual-stack node (IPv6 twins, neighbour discovery).
	dual := GoldenStates()["node1-dual-stack-gateway"]
	// IPv6 egress IPs, node1 the active gateway of one (br-ex's neighbour discovery for it).
	egress6 := GoldenStates()["node1-dual-stack-egress6"]
	// Routed pods (the br-ex guard of pod addresses).
	routed := GoldenStates()["node1-routed-pods"]
	for _, st := range []*State{testState(webTCP(), webUDP()), withGW, testState(ranges), egress, dual, egress6, routed} {
		d, err := Build(st)
		require.NoError(t, err)
		for _, fs := range d {
			for i := range fs.Flows {
				f := &fs.Flows[i]
				text := f.String()
				r, ok := FlowDropReason(f)
				renders := false
				for _, a := range f.Actions {
					if string(a.AppendText(nil)) == "drop" {
						renders = true
					}
				}
				if !renders {
					assert.False(t, ok, "%s", text)
					continue
				}
				require.True(t, ok, "drop without a reason (use DropFor): %s: %s", fs.Key, text)
				spot := DropSpot{fs.Bridge, Table(f.Table), int(f.Priority), fs.Key.Kind}
				info, ok := DropAt(spot.Bridge, spot.Table, spot.Priority, spot.Kind)
				require.True(t, ok, "drop flow not declared in dropInfos: %+v %s", spot, text)
				assert.Equal(t, r, info.Reason, "%s", text)
				seen[spot] = true
			}
		}
	}
	for _, info := range DropInfos() {
		assert.NotEmpty(t, info.Doc)
		for _, s := range info.Spots {
			assert.True(t, seen[s], "declared spot of %s never built: %+v", info.Reason, s)
		}
	}
	_, ok := DropInfoOf(DropNoEndpoints)
	assert.True(t, ok)
}
