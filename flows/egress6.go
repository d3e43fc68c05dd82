package flows

import (
	"encoding/binary"
	"net/netip"
	"slices"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// IPv6 egress gateways (issue 22, docs/egress.md "IPv6"). A policy's IPv6 egress IPs govern only
// the IPv6 traffic of its pods (Pod.Egress6), its IPv4 ones only their IPv4 traffic (Pod.Egress):
// each family is decided, pinned and translated on its own, so no connection is ever half
// translated. The IPv6 path mirrors the IPv4 one table for table: the pod's node pins a new
// connection in ZonePod (EgressPath, the egress IP's id in CTLabelEgressIP) and tunnels it to
// the active gateway (VNIEgress, inner eth_dst EgressMAC); the gateway SNATs it in its own zone,
// ZoneEgress6, hands it to its host through br-ex, answers Neighbor Solicitations for the egress
// IP on the uplink and tunnels the un-SNATed replies back (VNIEgressReply). Both families go
// over either underlay: the outer addresses are the nodes' underlay addresses (tun_src/tun_dst
// and CTLabelEgressNode over IPv4, tun_ipv6_src/tun_ipv6_dst and CTLabelEgressNode6 over IPv6,
// underlay.go). All of it exists
// only on a node that runs IPv6 (State.selfHasIPv6) and carries the IPv6 egress path
// (State.egress6): a dual-stack node without IPv6 egress IPs renders as before.

// EgressID returns the 32-bit value that names egress IP ip in RegEgressIP and CTLabelEgressIP
// (and the last four bytes of its EgressMAC): an IPv4 address itself (network byte order), an
// IPv6 address's last 32 bits. Two IPv6 egress IPs with the same last 32 bits cannot both be
// programmed (the agent refuses the younger one).
func EgressID(ip netip.Addr) uint32 {
	if ip.Is4() {
		return uint32(ipv4Value(ip))
	}
	b := ip.As16()
	return binary.BigEndian.Uint32(b[12:])
}

// egress6 reports whether this node carries the IPv6 egress path of br-int's base: whenever it
// runs IPv6 (an IPv6 pod CIDR), as the IPv4 path is always there, whether or not State.Egress
// holds an IPv6 egress IP. IPv6 connections pinned to an egress IP outlive it and must keep
// being dropped (C37), also by an agent restarted after it went; and a restart must find the
// base it wrote (no rewrite of br-int when nothing changed).
func (st *State) egress6() bool { return st.selfHasIPv6() }

// egressBase6 are BuildIntBase's IPv6 egress flows (State.egress6): the ipv6 twins of
// egressBaseFlows (a pinned connection's packets to IntEgressOut, the gateway's replies back to
// the pod's node or to its local pod, IntEgressReplyCT). The twins of egressNodeFlows (the
// Geneve classification of VNIEgress and VNIEgressReply from a peer) are in that peer's node
// flow set (BuildNode), as the IPv4 ones.
func egressBase6(st *State) []of.Flow { return twin6(egressBaseFlows(st)) }

// egressExcluded6 is egressExcluded for IPv6: every node's IPv6 pod CIDRs and IPv6 InternalIP,
// the IPv6 cluster networks (State.EgressClusterCIDRs) and the policy's IPv6
// excludedDestinations.
func egressExcluded6(st *State, e *PodEgress) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range st.Nodes {
		out = append(out, v6CIDRs(n.PodCIDRs)...)
		if n.InternalIP.Is6() && !n.InternalIP.Is4In6() {
			out = append(out, netip.PrefixFrom(n.InternalIP, 128))
		}
	}
	out = append(out, v6CIDRs(append(slices.Clone(st.EgressClusterCIDRs), e.Excluded...))...)
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

// podEgressFlows6 are podEgressFlows for an IPv6 address ip of a local pod and its IPv6 egress
// assignment e (Pod.Egress6): the excluded networks keep the host path; a NEW connection to one
// of the IPv6 destinations (default ::/0) is committed in ZonePod with EgressPath and the egress
// IP's EgressID in CTLabelEgressIP, loads RegEgressIP and goes to IntEgressOut.
func podEgressFlows6(st *State, ip netip.Addr, e *PodEgress) []of.Flow {
	src := of.IPv6Src(ip)
	newConn := ctState(of.CTTracked.Set(), of.CTNew.Set())
	hostPath := DropFor(DropNoRoute)
	if st.Ports.HasGateway() {
		hostPath = Goto(IntGatewayOut)
	}
	var fl []of.Flow
	for _, x := range egressExcluded6(st, e) {
		fl = append(fl, flow(IntL3Forwarding, prioEgressExcl, of.ProtoIPv6, 0,
			[]of.Match{SourcePod.Match(), src, of.IPv6DstPrefix(x), newConn}, hostPath))
	}
	dsts := v6CIDRs(e.Destinations)
	if len(e.Destinations) == 0 {
		dsts = []netip.Prefix{netip.MustParsePrefix("::/0")}
	}
	id := EgressID(e.IP)
	for _, d := range dsts {
		m := []of.Match{SourcePod.Match(), src, newConn}
		if d.Bits() > 0 {
			m = append(m, of.IPv6DstPrefix(d))
		}
		exec := []of.Action{EgressPath.Load(), CTLabelEgressIP.Load(uint64(id))}
		fl = append(fl, flow(IntL3Forwarding, prioEgress, of.ProtoIPv6, 0, m,
			CT{Commit: true, Zone: ZonePod, Exec: exec},
			RegEgressIP.Load(id), Goto(IntEgressOut)))
		fl = append(fl, podEgressPortFlows(ip, e, m, id, exec, of.ProtoTCP6, of.ProtoUDP6)...)
	}
	return fl
}

// buildEgress6 is BuildEgress for an IPv6 egress IP (a node that runs IPv6; nothing elsewhere):
// IntEgressOut sends the packets with RegEgressIP = EgressID(IP) to the active gateway over
// Geneve (either underlay), to this node's own SNAT, or drops them (no gateway: C29); on the
// active gateway the SNAT in ZoneEgress6 (nat(src=IP), the pod's node's tunnel source in
// CTLabelEgressNode or CTLabelEgressNode6), the hand-off to br-ex and the un-SNAT of what br-ex passes back.
func buildEgress6(st *State, e EgressIP, fs *FlowSet) {
	if !st.selfHasIPv6() {
		return
	}
	p := st.Ports
	match := RegEgressIP.MatchValue(EgressID(e.IP))
	mac := EgressMAC(e.IP)
	switch why := st.egressGatewayRefusal(e); {
	case why != "":
		fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, of.ProtoIPv6, 0, []of.Match{match}, DropFor(DropEgressNoGateway)))
		if e.Gateway != "" {
			fs.Warnings = append(fs.Warnings, "egress IP "+e.IP.String()+": "+why+": its traffic is dropped")
		}
	case e.Gateway == st.Node:
		fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, of.ProtoIPv6, 0, []of.Match{match},
			of.ModDLDst{MAC: mac}, Goto(IntEgressSNAT)))
	default:
		fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, of.ProtoIPv6, 0, []of.Match{match},
			of.ModDLDst{MAC: mac}, of.SetTunDstAddr(st.Nodes[e.Gateway].InternalIP), of.SetTunnel{ID: VNIEgress},
			output(p.IntTunnel)))
	}
	if e.Gateway == st.Node {
		fs.Flows = append(fs.Flows,
			flow(IntEgressSNAT, prioMid, of.ProtoIPv6, 0, []of.Match{of.EthDst(mac)},
				CT{Commit: true, Zone: ZoneEgress6, NAT: &NAT{Src: e.IP}, Table: uint8(IntEgressSend), HasTable: true,
					Exec: []of.Action{st.egressNodeFromTunSrc()}}),
			flow(IntEgressSend, prioMid, of.ProtoIPv6, 0, []of.Match{of.IPv6Src(e.IP)},
				of.ModDLSrc{MAC: mac}, of.ModDLDst{MAC: p.ExMAC}, output(p.IntPatch)),
			flow(IntClassifier, prioEgressHook, of.ProtoIPv6, p.IntPatch,
				[]of.Match{of.EthDst(p.ExMAC), of.IPv6Dst(e.IP)},
				CT{Zone: ZoneEgress6, NAT: &NAT{}, Table: uint8(IntEgressReply), HasTable: true}),
		)
	}
}

// ndAdvertFlagsEgress is the NA flags br-ex answers for an egress IP with: S (solicited) and O
// (override), not R: br-ex is a host for that address, not a router (RFC 4861 4.4).
const ndAdvertFlagsEgress = 0x60000000

// Priorities of br-ex's solicitation flows for an IPv6 egress IP (buildEgressAnnounce6), above
// its answer (prioEgressHook): duplicate address detection (source ::, never answered), then a
// multicast solicitation without a Source Link-Layer Address option (dropped), then a unicast
// one without it (answered without a Target Link-Layer Address option).
const (
	prioEgressNDDAD            = prioEgressHook + 3
	prioEgressNDNoSLLMulticast = prioEgressHook + 2
	prioEgressNDNoSLL          = prioEgressHook + 1
)

// buildEgressAnnounce6 is BuildEgressAnnounce for an IPv6 egress IP on its active gateway (a
// node that runs IPv6): on its uplink (State.UplinkFor), a Neighbor Solicitation for the egress
// IP is answered with br-ex's MAC (ndAnswerTo's rewrite with flags S|O, then ExNDAdvert writes
// the Target Link-Layer Address option and sends it back), except duplicate address detection
// (source ::), which is dropped (an answer to :: has no destination); IPv6 to the egress IP
// from the uplink goes to br-int (the un-SNAT); the SNATed packets br-int sends go to the host,
// which routes them (next hop from its IPv6 routing table).
func buildEgressAnnounce6(st *State, e EgressIP, fs *FlowSet) {
	if !st.selfHasIPv6() {
		return
	}
	p := st.Ports
	up := st.UplinkFor(e.IP)
	target := of.NDTarget(e.IP)
	fs.Flows = []of.Flow{
		flow(ExClassifier, prioEgressNDDAD, of.ProtoICMP6, up,
			nsMatch(of.IPv6Src(netip.IPv6Unspecified()), target), DropFor(DropNDNotOurs)),
		// A solicitation without a Source Link-Layer Address option, as on br-int (intBase6): a
		// multicast one is not answered (RFC 4861 4.3, 7.2.4, 7.2.5), a unicast one (the
		// router's reachability probe) is answered without a Target Link-Layer Address option
		// (writing nd_options_type would touch the byte after the packet's end).
		flow(ExClassifier, prioEgressNDNoSLLMulticast, of.ProtoICMP6, up,
			nsMatch(of.IPv6DstPrefix(multicast6), of.NDSLL(noLLAddr), target), DropFor(DropNDNoSLL)),
		flow(ExClassifier, prioEgressNDNoSLL, of.ProtoICMP6, up, nsMatch(of.NDSLL(noLLAddr), target),
			append(ndAdvertise(p.ExMAC, ndAdvertFlagsEgress), outputInPort)...),
		flow(ExClassifier, prioEgressHook, of.ProtoICMP6, up, nsMatch(target),
			ndAnswerTo(p.ExMAC, ndAdvertFlagsEgress, ExNDAdvert)...),
		flow(ExNDAdvert, prioMid, of.ProtoICMP6, up,
			[]of.Match{of.ICMPv6Type(icmp6NeighAdvert), of.ICMPv6Code(0), target},
			of.Move{Src: nxmEthSrc, Dst: of.Ref(of.FieldNDTLL)}, outputInPort),
		flow(ExClassifier, prioEgressHook, of.ProtoIPv6, up,
			[]of.Match{of.EthDst(p.ExMAC), of.IPv6Dst(e.IP)}, output(p.ExPatch)),
		flow(ExClassifier, prioEgressHook, of.ProtoIPv6, p.ExPatch,
			[]of.Match{of.IPv6Src(e.IP)}, of.ModDLSrc{MAC: p.ExMAC}, outputLocal),
	}
}
