package flows

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// Test IP conventions (topology T3, docs/field-cases.md#t3): nodes 192.0.2.11-13 with pod CIDRs
// 10.244.{1,2,3}.0/24, external client 198.51.100.10, LB IPs / externalIPs 203.0.113.100/101.

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

// testState is node1 of T3 with one local pod and the given Service ports.
func testState(svcs ...ServicePort) *State {
	gids := NewGroupIDs()
	for i := range svcs {
		svcs[i].GroupID = gids.ID(svcs[i].Key())
	}
	return NewState("node1", Ports{ExUplink: 1, ExPatch: 2, IntPatch: 1, IntTunnel: 2, ExMAC: mustMAC("02:00:c0:00:02:0b")},
		[]netip.Addr{ip("192.0.2.11")},
		[]Node{
			{Name: "node1", InternalIP: ip("192.0.2.11"), PodCIDRs: []netip.Prefix{pfx("10.244.1.0/24")}},
			{Name: "node2", InternalIP: ip("192.0.2.12"), PodCIDRs: []netip.Prefix{pfx("10.244.2.0/24")}},
			{Name: "node3", InternalIP: ip("192.0.2.13"), PodCIDRs: []netip.Prefix{pfx("10.244.3.0/24")}},
		},
		[]Pod{{Namespace: "demo", Name: "echo-c", IPs: []netip.Addr{ip("10.244.1.5")},
			MAC: mustMAC("0a:58:0a:f4:01:05"), OFPort: 3}},
		svcs)
}

func webTCP() ServicePort {
	return ServicePort{Namespace: "demo", Name: "web", PortName: "http", Protocol: TCP, Port: 80, NodePort: 30080,
		LoadBalancerIPs: []netip.Addr{ip("203.0.113.100")}, ExternalIPs: []netip.Addr{ip("203.0.113.101")},
		Endpoints: []Endpoint{
			{IP: ip("10.244.1.5"), Port: 8080, NodeName: "node1"},
			{IP: ip("10.244.2.5"), Port: 8080, NodeName: "node2"},
			{IP: ip("10.244.3.5"), Port: 8080, NodeName: "node3"},
		}}
}

func webUDP() ServicePort {
	return ServicePort{Namespace: "demo", Name: "web", PortName: "dns", Protocol: UDP, Port: 53, NodePort: 30053,
		Endpoints: []Endpoint{{IP: ip("10.244.2.5"), Port: 8080, NodeName: "node2"}}}
}

// render returns the desired state as the bundle a fresh bridge would receive, per bridge.
func render(t *testing.T, d Desired) map[Bridge]string {
	out := map[Bridge]string{}
	byBridge := map[Bridge][]*FlowSet{}
	for _, fs := range d {
		byBridge[fs.Bridge] = append(byBridge[fs.Bridge], fs)
	}
	for b, sets := range byBridge {
		sort.Slice(sets, func(i, j int) bool { return sets[i].Key.String() < sets[j].Key.String() })
		var lines []string
		for _, fs := range sets {
			lines = append(lines, "# "+fs.Key.String()+" cookie="+fs.Cookie().String())
			for _, w := range fs.Warnings {
				lines = append(lines, "# warning: "+w)
			}
			p := Plan{Bridge: b, Add: []*FlowSet{fs}}
			lines = append(lines, p.Lines()...)
		}
		out[b] = strings.Join(lines, "\n") + "\n"
	}
	return out
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./flows -update")
	require.Equal(t, string(want), got, "golden %s differs; review and run go test ./flows -update", path)
}

// goldenCases are the golden scenarios by name (testdata/NAME.br-ex.golden, NAME.br-int.golden).
func goldenCases() map[string]*State {
	cases := map[string]*State{
		"node1-no-services":  testState(),
		"node1-web-tcp-udp":  testState(webTCP(), webUDP()),
		"node1-no-endpoints": testState(ServicePort{Namespace: "demo", Name: "empty", Protocol: TCP, Port: 80, NodePort: 30090}),
		// A Service must not capture the Geneve tunnel: its externalIP is node1's address and its
		// UDP port the tunnel port; that entry point is refused with a warning.
		"node1-tunnel-hijack": testState(ServicePort{Namespace: "evil", Name: "tunnel", PortName: "gnv", Protocol: UDP, Port: 6081,
			ExternalIPs: []netip.Addr{ip("192.0.2.11"), ip("203.0.113.7")},
			Endpoints:   []Endpoint{{IP: ip("10.244.2.5"), Port: 8080}}}),
	}
	// C32: new connections to the LB IP and externalIP only from the listed ranges (the /32
	// inside the /24 is folded into it); the NodePort is not filtered.
	ranges := webTCP()
	ranges.FilterSources = true
	ranges.SourceRanges = []netip.Prefix{pfx("198.51.100.10/32"), pfx("198.51.100.0/24"), pfx("100.64.0.0/10")}
	cases["node1-source-ranges"] = testState(ranges)
	// C32: every range malformed (or IPv6): nobody may open a connection to the LB IP/externalIP.
	denyAll := webTCP()
	denyAll.FilterSources = true
	cases["node1-source-ranges-deny-all"] = testState(denyAll)
	// C34: a hostNetwork endpoint (node2's address) next to pod endpoints: the port is declined,
	// no flow, no group, a warning.
	host := webTCP()
	host.Endpoints = append(host.Endpoints, Endpoint{IP: ip("192.0.2.12"), Port: 8080, NodeName: "node2"})
	cases["node1-hostnetwork-endpoint"] = testState(host)
	// Host connectivity: the node has its gateway port srcip-gw0 (ofport 4).
	withGW := func(st *State) *State {
		st.Ports.IntGateway = 4
		st.Ports.GatewayMAC = mustMAC("02:00:0a:f4:01:01")
		return st
	}
	cases["node1-gateway"] = withGW(testState())
	cases["node1-gateway-web-tcp-udp"] = withGW(testState(webTCP(), webUDP()))
	// P4: echo-c is selected by an EgressGateway; egress IP 192.0.2.50 has its gateway on
	// node3 (node1 tunnels to it), 192.0.2.51 on node1 itself (SNAT and br-ex announce here),
	// 192.0.2.52 has none (fail closed).
	egress := func(gwOf50 string) *State {
		st := withGW(testState())
		st.EgressClusterCIDRs = []netip.Prefix{pfx("10.96.0.0/12")}
		st.Egress = map[netip.Addr]EgressIP{
			ip("192.0.2.50"): {IP: ip("192.0.2.50"), Policy: "job", Gateway: gwOf50},
			ip("192.0.2.51"): {IP: ip("192.0.2.51"), Policy: "local", Gateway: "node1"},
			ip("192.0.2.52"): {IP: ip("192.0.2.52"), Policy: "none"},
		}
		pod := st.Pods[Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}]
		pod.Egress = &PodEgress{IP: ip("192.0.2.50"), Policy: "job", Destinations: []netip.Prefix{pfx("198.51.100.0/24")},
			Excluded: []netip.Prefix{pfx("198.51.100.128/25")}}
		st.Pods[pod.Key()] = pod
		return st
	}
	cases["node1-egress"] = egress("node3")
	// C38: node1 has a secondary uplink eth1 (ofport 5, 203.0.113.0/24); egress IP 203.0.113.50
	// (gateway node1) is announced and intercepted on eth1 only, 192.0.2.51 on the primary
	// uplink; LOCAL's packets and ARP of 203.0.113.0/24 go to eth1.
	sec := egress("node3")
	sec.Ports.Secondary = []SecondaryUplink{{Name: "eth1", OFPort: 5, Subnets: []netip.Prefix{pfx("203.0.113.0/24")}}}
	sec.Egress[ip("203.0.113.50")] = EgressIP{IP: ip("203.0.113.50"), Policy: "sec", Gateway: "node1"}
	cases["node1-egress-secondary-nic"] = sec
	return cases
}

func TestGolden(t *testing.T) {
	cases := goldenCases()
	for name, st := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := Build(st)
			require.NoError(t, err)
			r := render(t, d)
			checkRenderedOnce(t, d)
			checkGolden(t, name+".br-ex", r[BrEx])
			checkGolden(t, name+".br-int", r[BrInt])
		})
	}
}

// servicePort returns st's only Service port (tests with one).
func servicePort(t testing.TB, st *State) *ServicePort {
	t.Helper()
	require.Len(t, st.Services, 1)
	for _, sp := range st.Services {
		return &sp
	}
	return nil
}
func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// checkRenderedOnce checks Finish's single rendering against a second one done the plain way:
// each line is the flow's own MarshalText (cookie included) and each MatchKey is matchKeyOf's.
func checkRenderedOnce(t *testing.T, d Desired) {
	t.Helper()
	for _, fs := range d {
		require.Len(t, fs.FlowLines(), len(fs.Flows), fs.Key.String())
		require.Len(t, fs.MatchKeys(), len(fs.Flows), fs.Key.String())
		for i := range fs.Flows {
			line := fs.Flows[i].String()
			require.Equal(t, line, fs.FlowLines()[i], fs.Key.String())
			k := fs.MatchKeys()[i]
			// The MatchKey is the line's text between "priority=N," and ",table=".
			want := strings.TrimPrefix(line[:strings.Index(line, ",table=")], fmt.Sprintf("priority=%d", k.Priority))
			require.Equal(t, strings.TrimPrefix(want, ","), k.Match, fs.Key.String())
		}
	}
}
