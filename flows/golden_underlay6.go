package flows

import "net/netip"

// goldenIPv6Underlay is node1 of a cluster whose Geneve underlay is IPv6 (issue 22): every node's
// InternalIP is in 2001:db8:0:2::/64 (node N: 2001:db8:0:2::1N), node1 and node2 dual-stack pod
// CIDRs, node3 IPv4 pod CIDR only (IPv4 inner packets over the IPv6 underlay); the NodePort
// addresses are node1's IPv6 InternalIP and an IPv4 ExternalIP; the gateway port srcip-gw0
// (ofport 4); an IPv4 and an IPv6 Service port with endpoints on node1 and node2.
func goldenIPv6Underlay() *State {
	web := GoldenWebTCP()
	web.Endpoints = web.Endpoints[:2]
	web6 := ServicePort{Namespace: "demo", Name: "web", PortName: "http", Protocol: TCP, Family: IPv6, Port: 80, NodePort: 30080,
		LoadBalancerIPs: []netip.Addr{goldenIP("2001:db8:113::100")},
		Endpoints: []Endpoint{
			{IP: goldenIP("2001:db8:244:1::5"), Port: 8080, NodeName: "node1"},
			{IP: goldenIP("2001:db8:244:2::5"), Port: 8080, NodeName: "node2"},
		}}
	st := GoldenState(web, web6)
	st.NodePortAddresses = []netip.Addr{goldenIP("192.0.2.11"), goldenIP("2001:db8:0:2::11")}
	for name, n := range st.Nodes {
		i := name[len("node"):]
		n.InternalIP = goldenIP("2001:db8:0:2::1" + i)
		if name != "node3" {
			n.PodCIDRs = append(n.PodCIDRs, goldenPrefix("2001:db8:244:"+i+"::/64"))
		}
		st.Nodes[name] = n
	}
	k := Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}
	pod := st.Pods[k]
	pod.IPs = append(pod.IPs, goldenIP("2001:db8:244:1::5"))
	st.Pods[k] = pod
	st.Ports.IntGateway = 4
	st.Ports.GatewayMAC = goldenMAC("02:00:0a:f4:01:01")
	return st
}

// goldenIPv6UnderlayEgress is goldenIPv6Underlay with egress gateways (issue 22: egress over an
// IPv6 underlay): echo-c's IPv4 traffic to 198.51.100.0/24 follows 192.0.2.50 (gateway node2),
// its IPv6 traffic to 2001:db8:100::/48 follows 2001:db8:0:2::50 (gateway node2), both tunnelled
// with tun_ipv6_dst; node1 is the active gateway of 192.0.2.51 and 2001:db8:0:2::51 (the SNAT
// records the pod's node's tun_ipv6_src in CTLabelEgressNode6); 192.0.2.53's gateway node3 has
// no IPv6 pod CIDR but an IPv6 underlay address (an IPv4 egress IP is served by it).
func goldenIPv6UnderlayEgress() *State {
	st := goldenIPv6Underlay()
	st.EgressClusterCIDRs = []netip.Prefix{goldenPrefix("10.96.0.0/12"), goldenPrefix("2001:db8:96::/108")}
	st.Egress = map[netip.Addr]EgressIP{
		goldenIP("192.0.2.50"):       {IP: goldenIP("192.0.2.50"), Policy: "job", Gateway: "node2"},
		goldenIP("2001:db8:0:2::50"): {IP: goldenIP("2001:db8:0:2::50"), Policy: "job", Gateway: "node2"},
		goldenIP("192.0.2.51"):       {IP: goldenIP("192.0.2.51"), Policy: "local", Gateway: "node1"},
		goldenIP("2001:db8:0:2::51"): {IP: goldenIP("2001:db8:0:2::51"), Policy: "local", Gateway: "node1"},
		goldenIP("192.0.2.53"):       {IP: goldenIP("192.0.2.53"), Policy: "other", Gateway: "node3"},
	}
	dsts := []netip.Prefix{goldenPrefix("198.51.100.0/24"), goldenPrefix("2001:db8:100::/48")}
	k := Key{Kind: KindPod, Namespace: "demo", Name: "echo-c"}
	pod := st.Pods[k]
	pod.Egress = &PodEgress{IP: goldenIP("192.0.2.50"), Policy: "job", Destinations: dsts, PortFirst: 1024, PortLast: 1535}
	pod.Egress6 = &PodEgress{IP: goldenIP("2001:db8:0:2::50"), Policy: "job", Destinations: dsts, PortFirst: 1024, PortLast: 1535}
	st.Pods[k] = pod
	return st
}
