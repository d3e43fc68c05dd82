package flows

import "net/netip"

// Dual-stack golden scenarios (issue 22): IPv6 documentation prefixes, node N's IPv6 pod CIDR
// 2001:db8:244:N::/64 next to its IPv4 10.244.N.0/24; the underlay stays IPv4 (192.0.2.1N).

// goldenDualStackGateway is GoldenState with IPv6 pod CIDRs and IPv6 InternalIPs 2001:db8::1N on
// node1 and node2 (node3 stays IPv4-only), echo-c holding 2001:db8:244:1::5 as well, and the
// gateway port srcip-gw0 (ofport 4).
func goldenDualStackGateway() *State {
	st := GoldenState()
	for _, n := range []string{"node1", "node2"} {
		node := st.Nodes[n]
		node.PodCIDRs = append(node.PodCIDRs, goldenPrefix("2001:db8:244:"+n[4:]+"::/64"))
		node.InternalIPv6 = goldenIP("2001:db8::1" + n[4:])
		st.Nodes[n] = node
	}
	k := Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}
	pod := st.Pods[k]
	pod.IPs = append(pod.IPs, goldenIP("2001:db8:244:1::5"))
	st.Pods[k] = pod
	st.Ports.IntGateway = 4
	st.Ports.GatewayMAC = goldenMAC("02:00:0a:f4:01:01")
	return st
}

// addDualStackGoldens adds the dual-stack scenarios to the golden cases.
func addDualStackGoldens(cases map[string]*State) {
	cases["node1-dual-stack-gateway"] = goldenDualStackGateway()
	// Routed pods (routed.go): hosts in 198.51.100.0/24 and 2001:db8:0:100::/64 reach pods by
	// their IP through any node (with 169.254.0.0/16, ip-masq-agent's link-local default).
	routed := goldenDualStackGateway()
	routed.NonMasqueradeCIDRs = NonMasqueradeSet([]netip.Prefix{goldenPrefix("198.51.100.0/24"), goldenPrefix("2001:db8:0:100::/64")}, false)
	cases["node1-routed-pods"] = routed
	// The IPv6 underlay (golden_underlay6.go).
	cases["node1-ipv6-underlay"] = goldenIPv6Underlay()
	cases["node1-ipv6-underlay-egress"] = goldenIPv6UnderlayEgress()
	// The dual-stack pod selected by an EgressGateway (egress IPs are IPv4): its IPv4 traffic
	// to 198.51.100.0/24 takes the egress path, its IPv6 traffic the host path; no ipv6 flow
	// leads to IntEgressOut (TestEgressNoIPv6). Its egress IP's port pool is exhausted (no
	// block): its TCP and UDP to the destinations are dropped (egress-no-port-block).
	eg := goldenDualStackGateway()
	eg.EgressClusterCIDRs = []netip.Prefix{goldenPrefix("10.96.0.0/12"), goldenPrefix("2001:db8:96::/108")}
	eg.Egress = map[netip.Addr]EgressIP{goldenIP("192.0.2.50"): {IP: goldenIP("192.0.2.50"), Policy: "job", Gateway: "node3"}}
	k := Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}
	pod := eg.Pods[k]
	pod.Egress = &PodEgress{IP: goldenIP("192.0.2.50"), Policy: "job",
		Destinations: []netip.Prefix{goldenPrefix("198.51.100.0/24"), goldenPrefix("2001:db8:100::/48")}, PortsExhausted: true}
	eg.Pods[k] = pod
	cases["node1-dual-stack-egress"] = eg
	cases["node1-dual-stack-egress6"] = goldenDualStackEgress6()
	cases["node1-dual-stack-chained"] = goldenDualStackChained()
}

// goldenDualStackChained is goldenDualStackEgress6 with a chained dual-stack pod on node1
// (docs/egress.md#chained-mode): demo/job's egress interface (ofport 9) holds its main CNI's
// addresses 10.88.1.7 and 2001:db8:88:1::7, outside every pod CIDR; its IPv4 traffic to
// 198.51.100.0/24 follows 192.0.2.50, its IPv6 traffic to 2001:db8:100::/48 follows
// 2001:db8::50. No ARP or ND flow for its port.
func goldenDualStackChained() *State {
	st := goldenDualStackEgress6()
	dsts := []netip.Prefix{goldenPrefix("198.51.100.0/24"), goldenPrefix("2001:db8:100::/48")}
	job := Pod{Namespace: "demo", Name: "job", IPs: []netip.Addr{goldenIP("10.88.1.7"), goldenIP("2001:db8:88:1::7")},
		MAC: goldenMAC("0a:58:0a:58:01:07"), OFPort: 9, Chained: true,
		Egress:  &PodEgress{IP: goldenIP("192.0.2.50"), Policy: "job", Destinations: dsts, PortFirst: 2560, PortLast: 3071},
		Egress6: &PodEgress{IP: goldenIP("2001:db8::50"), Policy: "job", Destinations: dsts, PortFirst: 1024, PortLast: 1535}}
	st.Pods[job.Key()] = job
	return st
}

// goldenDualStackEgress6 is the dual-stack pod echo-c (node1) selected per family: its IPv4
// traffic to 198.51.100.0/24 follows 192.0.2.50 (gateway node3), its IPv6 traffic to
// 2001:db8:100::/48 follows 2001:db8::50 (gateway node2, over Geneve); node1 is the active
// gateway of a third egress IP, 2001:db8::51 (the SNAT in ZoneEgress6, the Neighbor
// Advertisement on br-ex).
func goldenDualStackEgress6() *State {
	st := goldenDualStackGateway()
	st.EgressClusterCIDRs = []netip.Prefix{goldenPrefix("10.96.0.0/12"), goldenPrefix("2001:db8:96::/108")}
	st.Egress = map[netip.Addr]EgressIP{
		goldenIP("192.0.2.50"):   {IP: goldenIP("192.0.2.50"), Policy: "job", Gateway: "node3"},
		goldenIP("2001:db8::50"): {IP: goldenIP("2001:db8::50"), Policy: "job", Gateway: "node2"},
		goldenIP("2001:db8::51"): {IP: goldenIP("2001:db8::51"), Policy: "other", Gateway: "node1"},
	}
	dsts := []netip.Prefix{goldenPrefix("198.51.100.0/24"), goldenPrefix("2001:db8:100::/48")}
	k := Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}
	pod := st.Pods[k]
	pod.Egress = &PodEgress{IP: goldenIP("192.0.2.50"), Policy: "job", Destinations: dsts, PortFirst: 1024, PortLast: 1535}
	pod.Egress6 = &PodEgress{IP: goldenIP("2001:db8::50"), Policy: "job", Destinations: dsts,
		Excluded: []netip.Prefix{goldenPrefix("2001:db8:100:ff::/64")}, PortFirst: 2048, PortLast: 2559}
	st.Pods[k] = pod
	return st
}
