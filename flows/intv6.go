package flows

import (
	"fmt"
	"net"
	"net/netip"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// IPv6 on br-int (issue 22, docs/pipeline.md "IPv6 on br-int"). A node with an IPv6 pod CIDR
// (Node.PodCIDRs of both families: dual-stack) carries IPv6 on br-int like IPv4: every flow that
// matches ip and must carry IPv6 too has an ipv6 twin (same table, priority, marks and actions;
// tcp6 for tcp), the spoof guard holds each pod address of either family to its port, and IPv6
// neighbour discovery replaces ARP (IntNDResponder, IntNDAdvert). Over an IPv4 underlay inner
// IPv6 goes over Geneve with IPv4 tun_src/tun_dst, and the ct_label/ct_mark layout is that of
// IPv4 (CTLabelIngressNode is the ingress node's 32-bit InternalIP); over an IPv6 underlay the
// tunnel fields are tun_ipv6_src/tun_ipv6_dst and the ingress node is CTLabelIngressNode6
// (underlay.go). A node without an IPv6
// pod CIDR renders exactly as before (no twin, no ND table).
//
// Egress per family: a pod whose IPv6 traffic no policy with an IPv6 egress IP selects
// (Pod.Egress6 nil) sends it the normal way (to pods, or to the host through the gateway port),
// never into IntEgressOut, whatever its IPv4 egress (TestEgressNoIPv6); the IPv6 egress path is
// egress6.go's.

// Priorities of the IPv6 flows of IntClassifier.
const (
	// prioICMPv6Control: router solicitations and advertisements, redirects and MLD from a pod
	// or the host are dropped above their ports' accept flows (prioHigh), below the tunnel and
	// patch hooks (prioHook). br-int is no IPv6 router on the link: pods' routes are static
	// (srcip-cni), and nothing is multicast.
	prioICMPv6Control = 410
	// prioNDOwn: a pod's Neighbor Solicitation from its own address (and any from the gateway
	// port) goes to IntNDResponder.
	prioNDOwn = 360
	// prioND: any other Neighbor Solicitation or Advertisement is dropped (above the accept
	// flows, so none reaches conntrack or a route).
	prioND = 350
)

// Priorities of IntNDResponder, below its duplicate address detection drop (prioHigh) and above
// the answer of a solicitation with a Source Link-Layer Address option (prioEntry).
const (
	// prioNDNoSLLMulticast: a multicast solicitation without a Source Link-Layer Address option
	// is dropped (DropNDNoSLL).
	prioNDNoSLLMulticast = 290
	// prioNDNoSLL: a unicast solicitation without one is answered without a Target Link-Layer
	// Address option (ndAnswerNoOption).
	prioNDNoSLL = 280
)

// linkLocal6 is fe80::/64, the link-local prefix of RFC 4291 2.5.6 (the only one in use): a pod's
// neighbour unreachability probes may come from its link-local address (pod6LinkLocalFlow).
var linkLocal6 = netip.MustParsePrefix("fe80::/64")

// multicast6 is ff00::/8 (RFC 4291 2.7): a solicitation to it (the solicited-node address
// ff02::1:ffXX:XXXX) is a multicast one.
var multicast6 = netip.MustParsePrefix("ff00::/8")

// noLLAddr is the nd_sll of a solicitation without a Source Link-Layer Address option (Open
// vSwitch reads 00:00:00:00:00:00 then; ovs-fields(7) "nd_sll").
var noLLAddr = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// ICMPv6 types (RFC 4443, RFC 4861, RFC 2710, RFC 3810).
const (
	icmp6MLDQuery      = 130
	icmp6MLDReport     = 131
	icmp6MLDDone       = 132
	icmp6RouterSolicit = 133
	icmp6RouterAdvert  = 134
	icmp6NeighSolicit  = 135
	icmp6NeighAdvert   = 136
	icmp6Redirect      = 137
	icmp6MLDv2Report   = 143
)

// ndAdvertFlags is the NA's R, S and O flags (RFC 4861 4.4: the 32 bits after the checksum,
// ovs-fields(7) "nd_reserved"): br-int answers as a router (R), in response to a solicitation
// (S; without it the pod's neighbour entry would stay STALE and its reachability probes would
// fail), and overrides any cached address (O).
const ndAdvertFlags = 0xe0000000

// ndOptTLL is the ND option type of the Target Link-Layer Address (RFC 4861 4.6.1; 1 is the
// Source Link-Layer Address the solicitation carries).
const ndOptTLL = 2

// selfHasIPv6 reports whether this node has an IPv6 pod CIDR: only then does br-int carry IPv6,
// br-ex carry the IPv6 twins of its base flows (BuildExBase) and serve IPv6 Service ports
// (BuildServicePort declines them otherwise: an IPv6 NodePort address alone is not enough).
func (st *State) selfHasIPv6() bool { return len(v6CIDRs(st.self().PodCIDRs)) > 0 }

// v6CIDRs returns the IPv6 prefixes of cs, masked.
func v6CIDRs(cs []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cs {
		if c.Addr().Is6() && !c.Addr().Is4In6() {
			out = append(out, c.Masked())
		}
	}
	return out
}

// selfGatewayMAC6 is the MAC this node answers every Neighbor Solicitation with (IntNDResponder)
// and the source of what it delivers to pods over IPv6: that of the gateway of its first IPv6
// pod CIDR; nil without one.
func selfGatewayMAC6(st *State) net.HardwareAddr {
	if cs := v6CIDRs(st.self().PodCIDRs); len(cs) > 0 {
		return GatewayMAC(GatewayIP(cs[0]))
	}
	return nil
}

// twin6 returns the IPv6 twins of family-neutral IPv4 flows: ip becomes ipv6 and tcp tcp6, with
// the same table, priority, matches and actions (ResetLearn's learned flow matches IPv6
// addresses: learn6). Flows of another protocol (ARP, none), and those with any match in skip,
// have no twin. A flow that matches an IPv4 address is a builder's mistake (it is not
// family-neutral): twin6 panics.
func twin6(fl []of.Flow, skip ...of.Match) []of.Flow {
	var out []of.Flow
	var b []byte
next:
	for _, f := range fl {
		var p of.Protocol
		switch f.Protocol {
		case of.ProtoIP:
			p = of.ProtoIPv6
		case of.ProtoTCP:
			p = of.ProtoTCP6
		default:
			continue
		}
		for _, m := range f.Match {
			switch m.Field() {
			case of.FieldIPv4Src, of.FieldIPv4Dst, of.FieldARPSPA, of.FieldARPTPA:
				panic(fmt.Sprintf("flows: twin6 of a flow that matches an IPv4 address: %s", f.String()))
			}
			b = m.AppendText(b[:0])
			for _, s := range skip {
				if string(s.AppendText(nil)) == string(b) {
					continue next
				}
			}
		}
		t := f
		t.Protocol = p
		t.Actions = make([]of.Action, len(f.Actions))
		for i, a := range f.Actions {
			if l, ok := a.(of.Learn); ok {
				a = learn6(l)
			}
			t.Actions[i] = a
		}
		out = append(out, t)
	}
	return out
}

// learn6 is l with its IPv4 specs turned into IPv6 ones: eth_type 0x86dd, ipv6_src and ipv6_dst
// for nw_src and nw_dst (ResetLearn's learned flow for a tcp6 SYN).
func learn6(l of.Learn) of.Learn {
	specs := make([]of.LearnSpec, len(l.Specs))
	for i, s := range l.Specs {
		if s.Kind == of.LearnMatch && !s.FromField && s.Dst.Field == of.FieldEthType && s.Value == 0x800 {
			s.Value = 0x86dd
		}
		s.Dst, s.Src = ref6(s.Dst), ref6(s.Src)
		specs[i] = s
	}
	l.Specs = specs
	return l
}

// ref6 maps a whole IPv4 address field to its IPv6 counterpart.
func ref6(r of.FieldRef) of.FieldRef {
	switch {
	case r.Whole && r.Field == of.FieldIPv4Src:
		return of.Ref(of.FieldIPv6Src)
	case r.Whole && r.Field == of.FieldIPv4Dst:
		return of.Ref(of.FieldIPv6Dst)
	}
	return r
}

// ndAnswer turns a Neighbor Solicitation into the Neighbor Advertisement "the target is at mac",
// in two steps (RFC 4861 4.4, 7.2.4; ovs-fields(7) "icmpv6_type", "nd_reserved",
// "nd_options_type", "nd_target", "nd_tll"): here, while the packet is still a solicitation,
// Ethernet destination := its source and source := mac, IPv6 destination := its source and
// source := the target (a solicitation to the solicited-node multicast address must not be
// answered from a multicast source, so the addresses are not simply swapped), type := 136,
// R|S|O, and the Source Link-Layer Address option becomes a Target Link-Layer Address option;
// then IntNDAdvert (ndAdvertFlows) writes mac into that option and sends the advertisement back
// where the solicitation came from. nd_tll can only be written by a flow that matches an
// advertisement (its prerequisite), hence the second table; Open vSwitch commits the options'
// type before their address and recomputes the ICMPv6 checksum. The hop limit (255) and the
// target are kept.
func ndAnswer(mac net.HardwareAddr) []of.Action {
	return ndAnswerTo(mac, ndAdvertFlags, IntNDAdvert)
}

// ndAnswerTo is ndAnswer with the advertisement's flags (nd_reserved) and the table that writes
// the TLL option (IntNDAdvert on br-int, ExNDAdvert on br-ex).
func ndAnswerTo(mac net.HardwareAddr, flags uint64, next Table) []of.Action {
	return append(ndAdvertise(mac, flags),
		of.SetField{Field: of.FieldNDOptionsType, Value: ndOptTLL},
		Goto(next))
}

// ndAdvertise are the rewrites ndAnswerTo and ndAnswerNoOption share: addresses, type and the
// flags (nd_reserved).
func ndAdvertise(mac net.HardwareAddr, flags uint64) []of.Action {
	return []of.Action{
		of.Move{Src: nxmEthSrc, Dst: nxmEthDst},
		of.ModDLSrc{MAC: mac},
		of.Move{Src: of.Ref(of.FieldIPv6Src), Dst: of.Ref(of.FieldIPv6Dst)},
		of.Move{Src: of.Ref(of.FieldNDTarget), Dst: of.Ref(of.FieldIPv6Src)},
		of.SetField{Field: of.FieldICMPv6Type, Value: icmp6NeighAdvert},
		of.SetField{Field: of.FieldNDReserved, Value: flags},
	}
}

// ndAnswerNoOption answers a unicast Neighbor Solicitation that carries no option (no Source
// Link-Layer Address) with the Neighbor Advertisement "the target is at mac" without a Target
// Link-Layer Address option, sent straight back out its port: RFC 4861 7.2.4 lets the option be
// omitted when the solicitation's destination was not a multicast address (the sender already
// holds the link-layer address it probes; with S set its entry becomes REACHABLE, 7.2.5). The
// message is the solicitation rewritten in place, and it has no option to turn into a TLL one:
// writing nd_options_type would touch the byte after its end (Open vSwitch writes the first
// option's type without checking there is one), and nd_tll can only be written into an option
// the packet has. A multicast solicitation without the option is not answered (DropNDNoSLL).
func ndAnswerNoOption(mac net.HardwareAddr) []of.Action {
	return append(ndAdvertise(mac, ndAdvertFlags), outputInPort)
}

// nsMatch matches m and a Neighbor Solicitation (type 135, code 0).
func nsMatch(m ...of.Match) []of.Match {
	return append(append([]of.Match{}, m...), of.ICMPv6Type(icmp6NeighSolicit), of.ICMPv6Code(0))
}

// intBase6 are BuildIntBase's IPv6 flows (a node with an IPv6 pod CIDR; base are its IPv4 flows,
// whose family-neutral ones get their twins).
func intBase6(st *State, base []of.Flow) []of.Flow {
	fl := twin6(base)
	icmp6 := func(t uint8) []of.Match { return []of.Match{of.ICMPv6Type(t)} }
	for _, t := range []uint8{icmp6MLDQuery, icmp6MLDReport, icmp6MLDDone, icmp6RouterSolicit, icmp6RouterAdvert, icmp6Redirect, icmp6MLDv2Report} {
		fl = append(fl, flow(IntClassifier, prioICMPv6Control, of.ProtoICMP6, 0, icmp6(t), DropFor(DropICMPv6Control)))
	}
	// What BuildPod and BuildGateway do not let through to IntNDResponder: a pod's solicitation
	// from another source (duplicate address detection from ::, a spoofed source) and every
	// advertisement (br-int never solicits, and nobody needs a pod's: br-int answers for all).
	fl = append(fl,
		flow(IntClassifier, prioND, of.ProtoICMP6, 0, icmp6(icmp6NeighSolicit), DropFor(DropNDNotOurs)),
		flow(IntClassifier, prioND, of.ProtoICMP6, 0, icmp6(icmp6NeighAdvert), DropFor(DropNDNotOurs)),
		// Duplicate address detection (source ::) is never answered: silence tells the sender
		// its address is unique (the host's own gateway address among them).
		flow(IntNDResponder, prioHigh, of.ProtoICMP6, 0, nsMatch(of.IPv6Src(netip.IPv6Unspecified())), DropFor(DropNDNotOurs)),
		// A solicitation without a Source Link-Layer Address option: a multicast one is not
		// answered (its sender breaks RFC 4861 4.3, which makes the option a MUST there; the
		// answer must carry a Target Link-Layer Address option, 7.2.4, which an in-place
		// rewrite cannot add, and without one the sender would discard it anyway, 7.2.5); a
		// unicast one (a reachability probe) is answered without the option.
		flow(IntNDResponder, prioNDNoSLLMulticast, of.ProtoICMP6, 0, nsMatch(of.IPv6DstPrefix(multicast6), of.NDSLL(noLLAddr)), DropFor(DropNDNoSLL)),
		flow(IntNDResponder, prioNDNoSLL, of.ProtoICMP6, 0, nsMatch(of.NDSLL(noLLAddr)), ndAnswerNoOption(selfGatewayMAC6(st))...),
		flow(IntNDResponder, prioDefault, of.ProtoNone, 0, nil, DropFor(DropNDNotOurs)),
		flow(IntNDAdvert, prioMid, of.ProtoICMP6, 0, []of.Match{of.ICMPv6Type(icmp6NeighAdvert), of.ICMPv6Code(0)},
			of.Move{Src: nxmEthSrc, Dst: of.Ref(of.FieldNDTLL)}, outputInPort),
	)
	// Proxy neighbour discovery, the IPv6 ARP responder: every solicitation that reached this
	// table (a pod's from its own address, the host's from srcip-gw0) is answered with this
	// node's IPv6 gateway MAC, whatever its target. A pod solicits only on-link targets (its
	// gateway and the other addresses of its /64: routes of srcip-cni), the host only what it
	// routes into srcip-gw0 (the cluster's pod CIDRs); what they then send to that MAC is routed
	// or dropped by IntL3Forwarding like any packet, as after a proxy ARP answer.
	// (openflow has no masked nd_target match: NDTarget is exact.)
	fl = append(fl, flow(IntNDResponder, prioEntry, of.ProtoICMP6, 0, nsMatch(), ndAnswer(selfGatewayMAC6(st))...))
	return fl
}

// pod6LinkLocalFlow lets a local pod's Neighbor Solicitations from a link-local address (fe80::/64)
// through to IntNDResponder, from its own MAC on its own port only (BuildPod, once per pod with an
// IPv6 address): Linux sends its unicast neighbour unreachability probes (RFC 4861 7.3.3) of the
// gateway from the link-local address of its interface. The advertisement goes back to that
// source (ndAnswer). Nothing else is accepted from a link-local source: the pod's other IPv6
// must come from one of its addresses (pod6Flows), its MLD reports are dropped (icmpv6-control).
func pod6LinkLocalFlow(p Pod) of.Flow {
	return flow(IntClassifier, prioNDOwn, of.ProtoICMP6, p.OFPort, nsMatch(of.EthSrc(p.MAC), of.IPv6SrcPrefix(linkLocal6)),
		Goto(IntNDResponder))
}

// pod6Flows are the flows of one IPv6 address ip of a local pod (BuildPod): the spoof guard (the
// pod's MAC and ip; its solicitations only from ip, to IntNDResponder) and its delivery.
func pod6Flows(st *State, p Pod, ip netip.Addr) []of.Flow {
	mac := of.EthSrc(p.MAC)
	return []of.Flow{
		flow(IntClassifier, prioHigh, of.ProtoIPv6, p.OFPort, []of.Match{mac, of.IPv6Src(ip)},
			SourcePod.Load(), CT{Zone: ZonePod, NAT: &NAT{}, Table: uint8(IntPodEgressCT), HasTable: true}),
		flow(IntClassifier, prioNDOwn, of.ProtoICMP6, p.OFPort, nsMatch(mac, of.IPv6Src(ip)),
			Goto(IntNDResponder)),
		flow(IntL3Forwarding, prioMid, of.ProtoIPv6, 0, []of.Match{of.IPv6Dst(ip)},
			of.ModDLSrc{MAC: selfGatewayMAC6(st)}, of.ModDLDst{MAC: p.MAC},
			RegOutPort.Load(uint32(p.OFPort)), Goto(IntPodIngress)),
	}
}

// node6Flows are BuildNode's IPv6 flows for node n (this node has an IPv6 pod CIDR): the twins
// of its family-neutral flows (twin: the Geneve classification with a gateway port, the
// IntPodIngressCT keep flows of a live node), the routes to n's IPv6 pod CIDRs (the host's
// solicitations for n's IPv6 pods are answered by IntNDResponder's one flow) and, with a gateway
// port, the OriginNode commit of n's host's IPv6 connections.
//
// n's host reaches this node's IPv6 pods from its IPv6 pod gateway address (its srcip-gw0's,
// the source Linux picks for the route of the cluster's pod CIDRs into that port), which is
// inside n's pod CIDR: the replies route back over VNIPod, where n's IntTunnelCT finds them
// +est+rpl of the connection its gateway port committed. A socket bound to n's IPv6 InternalIP
// (Node.InternalIPv6) sends from a node address instead, which no route leads back to n's
// tunnel: that connection is committed here with OriginNode and n's underlay address in
// CTLabelIngressNode, as IPv4's from n's InternalIP (BuildNode), and BuildGateway's OriginNode
// flows (ipv6 twins) send its replies back over Geneve to n.
func node6Flows(st *State, n Node, twin []of.Flow) []of.Flow {
	fl := twin6(twin)
	cs := v6CIDRs(n.PodCIDRs)
	gw := st.Ports.HasGateway()
	tunDst := of.SetTunDstAddr(n.InternalIP)
	// Over an IPv4 underlay only: over an IPv6 one the OriginNode commit is not built (for
	// either family, as BuildNode's IPv4 one).
	if gw && n.InternalIP.Is4() && n.InternalIPv6.Is6() && !n.InternalIPv6.Is4In6() {
		for _, c := range v6CIDRs(st.self().PodCIDRs) {
			fl = append(fl, flow(IntTunnelCT, prioHigh, of.ProtoIPv6, 0,
				[]of.Match{of.TunSrc(n.InternalIP), of.IPv6Src(n.InternalIPv6), of.IPv6DstPrefix(c), ctState(of.CTTracked.Set(), of.CTNew.Set())},
				CT{Commit: true, Zone: ZonePod, Exec: []of.Action{OriginNode.Load(), st.ingressFromTunSrc()}},
				Goto(IntL3Forwarding)))
		}
	}
	for _, c := range cs {
		dst := of.IPv6DstPrefix(c)
		fl = append(fl,
			flow(IntL3Forwarding, prioEntry, of.ProtoIPv6, 0, []of.Match{SourcePod.Match(), dst},
				tunDst, of.SetTunnel{ID: VNIPod}, output(st.Ports.IntTunnel)),
			flow(IntL3Forwarding, prioEntry, of.ProtoIPv6, 0, []of.Match{SourceBrEx.Match(), dst},
				tunDst, of.SetTunnel{ID: VNIService}, output(st.Ports.IntTunnel)),
		)
		if gw {
			fl = append(fl, flow(IntL3Forwarding, prioEntry, of.ProtoIPv6, 0, []of.Match{SourceGateway.Match(), dst},
				tunDst, of.SetTunnel{ID: VNIPod}, output(st.Ports.IntTunnel)))
		}
	}
	return fl
}

// gateway6Flows are BuildGateway's IPv6 flows (this node has an IPv6 pod CIDR; base are its IPv4
// flows): the twins of the family-neutral ones (OriginNode's among them: the replies of another
// node's host's connections from its IPv6 InternalIP, node6Flows), the host's solicitations to
// IntNDResponder, and another node's pod reaching this host on its IPv6 gateway address.
func gateway6Flows(st *State, base []of.Flow) []of.Flow {
	p := st.Ports
	fl := twin6(base)
	fl = append(fl, flow(IntClassifier, prioNDOwn, of.ProtoICMP6, p.IntGateway, nsMatch(), Goto(IntNDResponder)))
	for _, c := range v6CIDRs(st.self().PodCIDRs) {
		fl = append(fl, flow(IntL3Forwarding, prioHigh, of.ProtoIPv6, 0,
			[]of.Match{SourceTunnelPod.Match(), of.IPv6Dst(GatewayIP(c))}, Goto(IntGatewayOut)))
	}
	return fl
}
