package flows

import (
	"net"
	"net/netip"
)

// Test fixtures shared by the golden files and the tests of other packages that must write the
// same flow sets (ofctl's TestNativeEquivalence): one definition, here. Test IP conventions
// (topology T3, docs/field-cases.md#t3): nodes 192.0.2.11-13 with pod CIDRs
// 10.244.{1,2,3}.0/24, external client 198.51.100.10, LB IPs / externalIPs 203.0.113.100/101.

func goldenMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func goldenPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func goldenIP(s string) netip.Addr       { return netip.MustParseAddr(s) }

// GoldenState is node1 of topology T3 (docs/field-cases.md#t3) with one local pod and the
// given Service ports (their group ids assigned).
func GoldenState(svcs ...ServicePort) *State {
	gids := NewGroupIDs()
	for i := range svcs {
		svcs[i].GroupID = gids.ID(svcs[i].Key())
	}
	return NewState("node1", Ports{ExUplink: 1, ExPatch: 2, IntPatch: 1, IntTunnel: 2, ExMAC: goldenMAC("02:00:c0:00:02:0b")},
		[]netip.Addr{goldenIP("192.0.2.11")},
		[]Node{
			{Name: "node1", InternalIP: goldenIP("192.0.2.11"), PodCIDRs: []netip.Prefix{goldenPrefix("10.244.1.0/24")}},
			{Name: "node2", InternalIP: goldenIP("192.0.2.12"), PodCIDRs: []netip.Prefix{goldenPrefix("10.244.2.0/24")}},
			{Name: "node3", InternalIP: goldenIP("192.0.2.13"), PodCIDRs: []netip.Prefix{goldenPrefix("10.244.3.0/24")}},
		},
		[]Pod{{Namespace: "demo", Name: "echo-c", IPs: []netip.Addr{goldenIP("10.244.1.5")},
			MAC: goldenMAC("0a:58:0a:f4:01:05"), OFPort: 3}},
		svcs)
}

// GoldenWebTCP is the TCP port of Service demo/web: NodePort, LoadBalancer IP, externalIP and an
// endpoint on each node.
func GoldenWebTCP() ServicePort {
	return ServicePort{Namespace: "demo", Name: "web", PortName: "http", Protocol: TCP, Port: 80, NodePort: 30080,
		LoadBalancerIPs: []netip.Addr{goldenIP("203.0.113.100")}, ExternalIPs: []netip.Addr{goldenIP("203.0.113.101")},
		Endpoints: []Endpoint{
			{IP: goldenIP("10.244.1.5"), Port: 8080, NodeName: "node1"},
			{IP: goldenIP("10.244.2.5"), Port: 8080, NodeName: "node2"},
			{IP: goldenIP("10.244.3.5"), Port: 8080, NodeName: "node3"},
		}}
}

// GoldenWebUDP is the UDP port of Service demo/web with one remote endpoint.
func GoldenWebUDP() ServicePort {
	return ServicePort{Namespace: "demo", Name: "web", PortName: "dns", Protocol: UDP, Port: 53, NodePort: 30053,
		Endpoints: []Endpoint{{IP: goldenIP("10.244.2.5"), Port: 8080, NodeName: "node2"}}}
}

// GoldenStates are the golden scenarios by name: the states whose bundles are
// flows/testdata/NAME.br-ex.golden and NAME.br-int.golden (TestGolden), whose wire encodings
// TestWireOracle pins and which ofctl's TestNativeEquivalence writes into a real Open vSwitch.
func GoldenStates() map[string]*State {
	cases := map[string]*State{
		"node1-no-services":  GoldenState(),
		"node1-web-tcp-udp":  GoldenState(GoldenWebTCP(), GoldenWebUDP()),
		"node1-no-endpoints": GoldenState(ServicePort{Namespace: "demo", Name: "empty", Protocol: TCP, Port: 80, NodePort: 30090}),
		// IPv6 Service ports on br-ex (golden_services6.go).
		"node1-dual-stack-services": GoldenDualStackServices(),
		// A Service must not capture the Geneve tunnel: its externalIP is node1's address and its
		// UDP port the tunnel port; that entry point is refused with a warning.
		"node1-tunnel-hijack": GoldenState(ServicePort{Namespace: "evil", Name: "tunnel", PortName: "gnv", Protocol: UDP, Port: 6081,
			ExternalIPs: []netip.Addr{goldenIP("192.0.2.11"), goldenIP("203.0.113.7")},
			Endpoints:   []Endpoint{{IP: goldenIP("10.244.2.5"), Port: 8080}}}),
	}
	// C32: new connections to the LB IP and externalIP only from the listed ranges (the /32
	// inside the /24 is folded into it); the NodePort is not filtered.
	ranges := GoldenWebTCP()
	ranges.FilterSources = true
	ranges.SourceRanges = []netip.Prefix{goldenPrefix("198.51.100.10/32"), goldenPrefix("198.51.100.0/24"), goldenPrefix("100.64.0.0/10")}
	cases["node1-source-ranges"] = GoldenState(ranges)
	// C32: every range malformed (or IPv6): nobody may open a connection to the LB IP/externalIP.
	denyAll := GoldenWebTCP()
	denyAll.FilterSources = true
	cases["node1-source-ranges-deny-all"] = GoldenState(denyAll)
	// C34: a hostNetwork endpoint (node2's address) next to pod endpoints: the port is declined,
	// no flow, no group, a warning.
	host := GoldenWebTCP()
	host.Endpoints = append(host.Endpoints, Endpoint{IP: goldenIP("192.0.2.12"), Port: 8080, NodeName: "node2"})
	cases["node1-hostnetwork-endpoint"] = GoldenState(host)
	// sessionAffinity: ClientIP: the TCP port with the default timeout (10800 s), the UDP port
	// with one above an OpenFlow idle timeout (capped at 65535 s, a warning), and a port without
	// endpoints (no affinity flows: its new connections go to the host, which rejects them).
	affTCP, affUDP := GoldenWebTCP(), GoldenWebUDP()
	affTCP.AffinitySeconds, affUDP.AffinitySeconds = 10800, 86400
	// The periods of 2026-12-01 (floor(unix seconds / timeoutSeconds)): the group's hash basis.
	affTCP.AffinityPeriod, affUDP.AffinityPeriod = 166312, 20789
	affEmpty := ServicePort{Namespace: "demo", Name: "empty", Protocol: TCP, Port: 80, NodePort: 30090, AffinitySeconds: 10800}
	cases["node1-affinity"] = GoldenState(affTCP, affUDP, affEmpty)
	// Host connectivity: the node has its gateway port srcip-gw0 (ofport 4).
	withGW := func(st *State) *State {
		st.Ports.IntGateway = 4
		st.Ports.GatewayMAC = goldenMAC("02:00:0a:f4:01:01")
		return st
	}
	cases["node1-gateway"] = withGW(GoldenState())
	cases["node1-gateway-web-tcp-udp"] = withGW(GoldenState(GoldenWebTCP(), GoldenWebUDP()))
	// P4: echo-c is selected by an EgressGateway; egress IP 192.0.2.50 has its gateway on
	// node3 (node1 tunnels to it), 192.0.2.51 on node1 itself (SNAT and br-ex announce here),
	// 192.0.2.52 has none (fail closed).
	egress := func(gwOf50 string) *State {
		st := withGW(GoldenState())
		st.EgressClusterCIDRs = []netip.Prefix{goldenPrefix("10.96.0.0/12")}
		st.Egress = map[netip.Addr]EgressIP{
			goldenIP("192.0.2.50"): {IP: goldenIP("192.0.2.50"), Policy: "job", Gateway: gwOf50},
			goldenIP("192.0.2.51"): {IP: goldenIP("192.0.2.51"), Policy: "local", Gateway: "node1"},
			goldenIP("192.0.2.52"): {IP: goldenIP("192.0.2.52"), Policy: "none"},
		}
		pod := st.Pods[Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}]
		pod.Egress = &PodEgress{IP: goldenIP("192.0.2.50"), Policy: "job", Destinations: []netip.Prefix{goldenPrefix("198.51.100.0/24")},
			Excluded: []netip.Prefix{goldenPrefix("198.51.100.128/25")}, PortFirst: 1536, PortLast: 2047}
		st.Pods[pod.Key()] = pod
		return st
	}
	cases["node1-egress"] = egress("node3")
	// Issue 23: node1 is 192.0.2.50's active gateway and has its port blocks (the stateless
	// reply path): echo-c's block on node1 itself, one of a pod on node2 (tunnelled there, VNI
	// VNIEgressReplyPorts), one not a power of two and one of an unknown node (both left out).
	replies := egress("node1")
	e50 := replies.Egress[goldenIP("192.0.2.50")]
	e50.ReplyBlocks = []EgressReplyBlock{{First: 1536, Size: 512, Node: "node1"}, {First: 2048, Size: 512, Node: "node2"},
		{First: 4096, Size: 100, Node: "node2"}, {First: 8192, Size: 512, Node: "node9"}}
	replies.Egress[e50.IP] = e50
	cases["node1-egress-reply-blocks"] = replies
	// C38: node1 has a secondary uplink eth1 (ofport 5, 203.0.113.0/24); egress IP 203.0.113.50
	// (gateway node1) is announced and intercepted on eth1 only, 192.0.2.51 on the primary
	// uplink; LOCAL's packets and ARP of 203.0.113.0/24 go to eth1.
	sec := egress("node3")
	sec.Ports.Secondary = []SecondaryUplink{{Name: "eth1", OFPort: 5, Subnets: []netip.Prefix{goldenPrefix("203.0.113.0/24")}}}
	sec.Egress[goldenIP("203.0.113.50")] = EgressIP{IP: goldenIP("203.0.113.50"), Policy: "sec", Gateway: "node1"}
	cases["node1-egress-secondary-nic"] = sec
	addDualStackGoldens(cases)
	return cases
}
