package flows

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

func isIPv6Flow(f *of.Flow) bool {
	switch f.Protocol {
	case of.ProtoIPv6, of.ProtoTCP6, of.ProtoUDP6, of.ProtoICMP6:
		return true
	}
	return false
}

// A policy with IPv4 egress IPs only: the dual-stack pod it selects keeps its IPv4 egress flows,
// and no IPv6 flow of any flow set but br-int's base (whose IPv6 egress path only carries
// connections a pod flow pinned) sends to the egress tables or loads an egress mark: its IPv6
// traffic takes the host path (IntL3Forwarding's ipv6 prioLow flow to
// IntGatewayOut), never half-translated.
func TestEgressNoIPv6(t *testing.T) {
	st := GoldenStates()["node1-dual-stack-egress"]
	d, err := Build(st)
	require.NoError(t, err)
	var v4Egress, v6Host int
	for _, fs := range d {
		for i := range fs.Flows {
			f := &fs.Flows[i]
			text := f.String()
			toEgress := strings.Contains(text, "goto_table:"+IntEgressOut.String()) ||
				strings.Contains(text, "resubmit(,"+IntEgressOut.String()+")")
			if isIPv6Flow(f) {
				if fs.Key.Kind == KindIntBase {
					// br-int's base carries the IPv6 egress path on every IPv6 node (egress6):
					// it acts only on connections pinned by a pod flow (EgressPath), and no
					// pod flow pins an IPv6 connection here.
					continue
				}
				assert.False(t, toEgress, "an IPv6 flow leads to IntEgressOut: %s: %s", fs.Key, text)
				assert.False(t, Table(f.Table) >= IntEgressOut && Table(f.Table) <= IntEgressReply || Table(f.Table) == IntEgressReplyCT,
					"an IPv6 flow in an egress table: %s: %s", fs.Key, text)
				assert.NotContains(t, text, CTLabelEgressIP.ref().String(), "%s: %s", fs.Key, text)
				if Table(f.Table) == IntL3Forwarding && int(f.Priority) == prioLow && strings.Contains(text, "goto_table:"+IntGatewayOut.String()) {
					v6Host++
				}
				continue
			}
			if fs.Key.Kind == KindPod && toEgress {
				v4Egress++
			}
		}
	}
	assert.Equal(t, 1, v4Egress, "the pod's IPv4 egress flow (198.51.100.0/24)")
	assert.Equal(t, 1, v6Host, "the IPv6 host path of a local pod")
	pod := d[Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}]
	for _, l := range pod.FlowLines() {
		assert.NotContains(t, l, "2001:db8:100::", "the IPv6 destination of the policy is not programmed: %s", l)
	}
}

// An IPv4-only node has no IPv6 flow and no ND table (its goldens are those of before issue 22).
func TestIPv4OnlyNoIPv6(t *testing.T) {
	for name, st := range GoldenStates() {
		if st.selfHasIPv6() {
			continue
		}
		d, err := Build(st)
		require.NoError(t, err)
		for _, fs := range d {
			for i := range fs.Flows {
				f := &fs.Flows[i]
				assert.False(t, isIPv6Flow(f), "%s: %s: %s", name, fs.Key, f.String())
				assert.NotContains(t, []Table{IntNDResponder, IntNDAdvert}, Table(f.Table), "%s: %s", name, f.String())
			}
		}
	}
}

// Every family-neutral IPv4 flow of br-int on a dual-stack node has its ipv6 (tcp6) twin: same
// table, priority, matches and actions. The exceptions are the ones named in twin6's callers:
// the egress path (IPv4 egress IPs) and flows that match IPv4 addresses (their twins are written
// per IPv6 address or prefix: OriginNode's commit per IPv6 InternalIP, node6Flows).
func TestDualStackTwins(t *testing.T) {
	d, err := Build(GoldenStates()["node1-dual-stack-gateway"])
	require.NoError(t, err)
	checked := 0
	for _, fs := range d {
		if fs.Bridge != BrInt {
			continue
		}
		have := map[string]bool{}
		for _, l := range fs.FlowLines() {
			have[l] = true
		}
		for i := range fs.Flows {
			f := fs.Flows[i]
			if f.Protocol != of.ProtoIP && f.Protocol != of.ProtoTCP {
				continue
			}
			text := f.String()
			if strings.Contains(text, "nw_src=") || strings.Contains(text, "nw_dst=") ||
				strings.Contains(text, string(EgressPath.Match().AppendText(nil))) ||
				(Table(f.Table) >= IntEgressOut && Table(f.Table) <= IntEgressReply) || Table(f.Table) == IntEgressReplyCT ||
				strings.Contains(text, "tun_id=0x4") || strings.Contains(text, "tun_id=0x5") {
				continue
			}
			tw := twin6([]of.Flow{f})
			require.Len(t, tw, 1, text)
			assert.True(t, have[tw[0].String()], "%s: no IPv6 twin of %s", fs.Key, text)
			checked++
		}
	}
	assert.Equal(t, 42, checked, "twins checked (int-base, gateway with OriginNode's replies, node2, node3)")
}
