package flows

import "net/netip"

// GoldenDualStackServices is node1 of topology T3 dual-stack (issue 22; documentation prefix
// 2001:db8::/32): every node also has an IPv6 pod CIDR 2001:db8:244:N::/64, node1 serves
// NodePorts on 2001:db8::11 too. Service demo/web is dual-stack: its TCP port is two
// ServicePorts (IPv4 as GoldenWebTCP; IPv6 with the NodePort, LoadBalancer IP 2001:db8:113::100
// filtered to 2001:db8:51:100::/64 and one endpoint on node2), its UDP port an IPv6 one with an
// endpoint on node2 (the UDP fragments of 2001:db8::11). An IPv6 entry point that went away
// drains, and an IPv6 port with sessionAffinity (demo/sticky) learns its clients by ipv6_src.
func GoldenDualStackServices() *State {
	v6 := ServicePort{Namespace: "demo", Name: "web", PortName: "http", Protocol: TCP, Family: IPv6, Port: 80, NodePort: 30080,
		LoadBalancerIPs: []netip.Addr{goldenIP("2001:db8:113::100")},
		FilterSources:   true, SourceRanges: []netip.Prefix{goldenPrefix("2001:db8:51:100::/64"), goldenPrefix("198.51.100.0/24")},
		Endpoints: []Endpoint{{IP: goldenIP("2001:db8:244:2::5"), Port: 8080, NodeName: "node2"}}}
	udp6 := ServicePort{Namespace: "demo", Name: "web", PortName: "dns", Protocol: UDP, Family: IPv6, Port: 53, NodePort: 30053,
		Endpoints: []Endpoint{{IP: goldenIP("2001:db8:244:2::5"), Port: 8053, NodeName: "node2"}}}
	sticky := ServicePort{Namespace: "demo", Name: "sticky", Protocol: TCP, Family: IPv6, Port: 80, NodePort: 30081, AffinitySeconds: 10800,
		AffinityPeriod: 166312, Endpoints: []Endpoint{{IP: goldenIP("2001:db8:244:2::6"), Port: 8080, NodeName: "node2"}}}
	st := GoldenState(GoldenWebTCP(), v6, udp6, sticky)
	st.NodePortAddresses = append(st.NodePortAddresses, goldenIP("2001:db8::11"))
	for name, n := range st.Nodes {
		n.PodCIDRs = append(n.PodCIDRs, goldenPrefix("2001:db8:244:"+name[len("node"):]+"::/64"))
		st.Nodes[name] = n
	}
	st.Drains[EntryPoint{Protocol: TCP, Addr: netip.MustParseAddrPort("[2001:db8:113::101]:80")}] = true
	return st
}
