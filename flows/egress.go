package flows

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// Egress gateways (path P4, docs/egress.md): KindEgress (br-int) and KindEgressAnnounce (br-ex),
// one flow set each per egress IP, plus the pod's own egress flows (BuildPod, podEgressFlows),
// the fixed parts in BuildIntBase (egressBaseFlows) and the tunnel classification per peer
// (BuildNode, egressNodeFlows).

// EgressMAC is the inner Ethernet destination of a packet tunnelled to the gateway of egress IP
// ip (0a:5e:<ip> for IPv4, 0a:5f:<its last 32 bits> for IPv6, EgressID): it tells the gateway
// which egress IP to SNAT to.
func EgressMAC(ip netip.Addr) net.HardwareAddr {
	if ip.Is6() {
		id := EgressID(ip)
		return net.HardwareAddr{0x0a, 0x5f, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
	}
	b := ip.As4()
	return net.HardwareAddr{0x0a, 0x5e, b[0], b[1], b[2], b[3]}
}

// egressFamily is what the egress builders take from an IP family, so that BuildEgress,
// BuildEgressAnnounce's hand-off flows, podEgressFlows and egressExcluded are written once for
// IPv4 and IPv6 (issue 22: the IPv6 path mirrors the IPv4 one table for table).
type egressFamily struct {
	v6    bool
	proto of.Protocol
	// tcp and udp are the family's TCP and UDP protocols (the port-block flows).
	tcp, udp of.Protocol
	// zone is the gateway's SNAT zone (ZoneEgress, ZoneEgress6).
	zone uint16
	// all is every destination of the family: a policy without destinations.
	all netip.Prefix
	// hostBits is the prefix length of one address.
	hostBits  int
	src, dst  func(netip.Addr) of.Match
	dstPrefix func(netip.Prefix) of.Match
}

var (
	egressIPv4 = &egressFamily{proto: of.ProtoIP, tcp: of.ProtoTCP, udp: of.ProtoUDP, zone: ZoneEgress, all: netip.MustParsePrefix("0.0.0.0/0"), hostBits: 32,
		src: of.IPv4Src, dst: of.IPv4Dst, dstPrefix: of.IPv4DstPrefix}
	egressIPv6 = &egressFamily{v6: true, proto: of.ProtoIPv6, tcp: of.ProtoTCP6, udp: of.ProtoUDP6, zone: ZoneEgress6, all: netip.MustParsePrefix("::/0"), hostBits: 128,
		src: of.IPv6Src, dst: of.IPv6Dst, dstPrefix: of.IPv6DstPrefix}
)

// has reports whether a is an address of the family (an IPv4-mapped IPv6 address is neither).
func (f *egressFamily) has(a netip.Addr) bool {
	if f.v6 {
		return a.Is6() && !a.Is4In6()
	}
	return a.Is4()
}

// prefixes are the networks of cs of the family, masked, in order.
func (f *egressFamily) prefixes(cs []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cs {
		if f.has(c.Addr()) {
			out = append(out, c.Masked())
		}
	}
	return out
}

// egressExcluded lists what is never sent to an egress gateway, of family f: every node's pod
// CIDRs and InternalIPs (the underlay one and the IPv6 one), the cluster's Service and node networks (State.EgressClusterCIDRs) and
// the policy's excludedDestinations.
func egressExcluded(st *State, e *PodEgress, f *egressFamily) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range st.Nodes {
		out = append(out, f.prefixes(n.PodCIDRs)...)
		// The node's underlay address and, on a dual-stack node, its IPv6 InternalIP (the
		// underlay may be IPv4 while the node also has an IPv6 address): a selected pod reaches
		// other nodes' own addresses directly in both families, never through the gateway.
		for _, a := range []netip.Addr{n.InternalIP, n.InternalIPv6} {
			if a.IsValid() && f.has(a) {
				out = append(out, netip.PrefixFrom(a, f.hostBits))
			}
		}
	}
	out = append(out, f.prefixes(append(slices.Clone(st.EgressClusterCIDRs), e.Excluded...))...)
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

// podEgressFlows are the IntL3Forwarding flows of a local pod selected by an EgressGateway: a
// NEW connection from the pod's own address (its port's spoof guard holds it to that address)
// to one of the destinations is committed in ZonePod with EgressPath and its egress IP in
// CTLabelEgressIP (so it keeps that path for its life, C37) and goes to IntEgressOut; to an
// excluded network it keeps the host path (IntGatewayOut, or drop without a gateway port).
// Established packets of such a connection go to IntEgressOut by BuildIntBase's flow; replies
// to connections that came IN to the pod were steered away earlier (IntPodEgressCT, C22).
func podEgressFlows(st *State, p Pod, ip netip.Addr) []of.Flow {
	f, e := egressIPv4, p.Egress
	if ip.Is6() {
		// IPv6: only the pod's IPv6 assignment, on a node that carries the IPv6 egress path.
		f, e = egressIPv6, p.Egress6
		if e == nil || !e.IP.Is6() || !st.selfHasIPv6() {
			return nil
		}
	} else if e == nil || !e.IP.Is4() {
		return nil
	}
	src := f.src(ip)
	newConn := ctState(of.CTTracked.Set(), of.CTNew.Set())
	var fl []of.Flow
	hostPath := DropFor(DropNoRoute)
	if st.Ports.HasGateway() {
		hostPath = Goto(IntGatewayOut)
	}
	for _, x := range egressExcluded(st, e, f) {
		fl = append(fl, flow(IntL3Forwarding, prioEgressExcl, f.proto, 0,
			[]of.Match{SourcePod.Match(), src, f.dstPrefix(x), newConn}, hostPath))
	}
	dsts := f.prefixes(e.Destinations)
	if len(e.Destinations) == 0 {
		dsts = []netip.Prefix{f.all}
	}
	id := EgressID(e.IP)
	for _, d := range dsts {
		m := []of.Match{SourcePod.Match(), src, newConn}
		if d.Bits() > 0 {
			m = append(m, f.dstPrefix(d))
		}
		exec := []of.Action{EgressPath.Load(), CTLabelEgressIP.Load(uint64(id))}
		fl = append(fl, flow(IntL3Forwarding, prioEgress, f.proto, 0, m,
			CT{Commit: true, Zone: ZonePod, Exec: exec},
			RegEgressIP.Load(id), Goto(IntEgressOut)))
		fl = append(fl, podEgressPortFlows(ip, e, m, id, exec, f)...)
	}
	return fl
}

// podEgressPortFlows are the TCP and UDP variants (protos) of a pod's egress flow with matches
// m: the commit in ZonePod maps the source port into the pod's block for its egress IP
// (nat(src=POD_IP:FIRST-LAST): the pod IP is kept, conntrack keeps the pod's port when it is in
// the block and free, else takes a free one of the block) and recirculates to IntEgressOut,
// RegEgressIP loaded before (registers survive the recirculation). The pod's node holds the
// translation (ZonePod never fails over; its base flows apply it to the later packets and undo
// it on the replies); the gateways see only ports of the pod's block, unique per egress IP
// cluster-wide, so every gateway's nat(src=EGRESS_IP) keeps them (docs/egress.md "Port
// blocks"). Without a block because the pool is exhausted (PodEgress.PortsExhausted) they are
// dropped (fail closed); while the block is pending there is no such flow (prioEgress carries
// them with the pod's own port, as before port blocks).
//
// With a block, a second flow per protocol maps back what the gateway sends without a
// connection of its own (the stateless reply path, EgressIP.ReplyBlocks): in IntEgressReplyCT a
// packet still to the egress IP with a destination port in the block gets the pod's address
// and goes through ZonePod's un-NAT (ct(zone=ZonePod,nat), back to IntEgressReplyCT): it
// reaches the pod only as a reply of a connection the pod opened (its entry's reply tuple is
// server -> POD_IP:block port), else it is dropped there.
func podEgressPortFlows(ip netip.Addr, e *PodEgress, m []of.Match, id uint32, exec []of.Action, f *egressFamily) []of.Flow {
	var fl []of.Flow
	for _, proto := range []of.Protocol{f.tcp, f.udp} {
		if !e.HasPorts() {
			if e.PortsExhausted {
				fl = append(fl, flow(IntL3Forwarding, prioEgressPorts, proto, 0, m, DropFor(DropEgressNoPortBlock)))
			}
			continue
		}
		fl = append(fl, flow(IntL3Forwarding, prioEgressPorts, proto, 0, m,
			RegEgressIP.Load(id),
			CT{Commit: true, Zone: ZonePod, NAT: &NAT{Src: ip, SrcPortMin: e.PortFirst, SrcPortMax: e.PortLast},
				Table: uint8(IntEgressOut), HasTable: true, Exec: exec}))
		if blk, ok := portBlockMatch(e.PortFirst, uint32(e.PortLast)-uint32(e.PortFirst)+1); ok {
			fl = append(fl, flow(IntEgressReplyCT, prioHigh, proto, 0, []of.Match{f.dst(e.IP), blk},
				SourceEgress.Load(), of.SetIPDst(ip),
				CT{Zone: ZonePod, NAT: &NAT{}, Table: uint8(IntEgressReplyCT), HasTable: true}))
		}
	}
	return fl
}

// portBlockMatch matches the ports first..first+size-1 (tp_dst under a mask) when they are an
// aligned power-of-two block (egressv1.PortBlock's rule); ok is false for any other range.
func portBlockMatch(first uint16, size uint32) (m of.Match, ok bool) {
	if first == 0 || size == 0 || size > 1<<15 || size&(size-1) != 0 || uint32(first)%size != 0 {
		return nil, false
	}
	return of.TPDstMasked(first, ^uint16(size-1)), true
}

// egressBaseFlows are the fixed egress flows of br-int (part of BuildIntBase).
func egressBaseFlows(st *State) []of.Flow {
	p := st.Ports
	trk := of.CTTracked.Set()
	estOrig := ctState(trk, of.CTEstablished.Set(), of.CTReply.Unset())
	rpl := ctState(trk, of.CTEstablished.Set(), of.CTReply.Set())
	rel := ctState(trk, of.CTRelated.Set())
	local := st.egressLocal()
	return []of.Flow{
		// A pod's packet of a connection pinned to the egress path goes to its egress IP's
		// gateway, whatever the policies say now (C37); without that IP's flow set it is dropped.
		flow(IntL3Forwarding, prioEgress, of.ProtoIP, 0, []of.Match{SourcePod.Match(), estOrig, EgressPath.Match()},
			of.Move{Src: CTLabelEgressIP.ref(), Dst: RegEgressIP.ref()}, Goto(IntEgressOut)),
		flow(IntEgressOut, prioDefault, of.ProtoNone, 0, nil, DropFor(DropEgressNoGateway)),
		flow(IntEgressSNAT, prioDefault, of.ProtoNone, 0, nil, DropFor(DropEgressNotGateway)),
		flow(IntEgressSend, prioDefault, of.ProtoNone, 0, nil, DropFor(DropEgressNotGateway)),
		// Gateway: un-SNATed replies go back to the pod's node, or to this node's pod.
		flow(IntEgressReply, prioMid, of.ProtoIP, 0, []of.Match{rpl, local},
			SourceEgress.Load(), CT{Zone: ZonePod, NAT: &NAT{}, Table: uint8(IntEgressReplyCT), HasTable: true}),
		flow(IntEgressReply, prioMid, of.ProtoIP, 0, []of.Match{rel, local},
			SourceEgress.Load(), CT{Zone: ZonePod, NAT: &NAT{}, Table: uint8(IntEgressReplyCT), HasTable: true}),
		flow(IntEgressReply, prioLow+1, of.ProtoIP, 0, []of.Match{rpl},
			st.egressNodeToTunDst(), of.SetTunnel{ID: VNIEgressReply}, output(p.IntTunnel)),
		flow(IntEgressReply, prioLow+1, of.ProtoIP, 0, []of.Match{rel},
			st.egressNodeToTunDst(), of.SetTunnel{ID: VNIEgressReply}, output(p.IntTunnel)),
		flow(IntEgressReply, prioDefault, of.ProtoNone, 0, nil, DropFor(DropEgressReplyNoConnection)),
		// Pod's node: only replies of what the pod opened on the egress path reach it.
		flow(IntEgressReplyCT, prioMid, of.ProtoIP, 0, []of.Match{rpl, EgressPath.Match()}, Goto(IntL3Forwarding)),
		flow(IntEgressReplyCT, prioMid, of.ProtoIP, 0, []of.Match{rel, EgressPath.Match()}, Goto(IntL3Forwarding)),
		flow(IntEgressReplyCT, prioDefault, of.ProtoNone, 0, nil, DropFor(DropEgressReplyNoConnection)),
	}
}

// egressNodeFlows are the Geneve classification flows of the egress VNIs from one peer node,
// tunSrc matching its underlay address (tun_src or tun_ipv6_src; part of BuildNode): VNIEgress from it goes to IntEgressSNAT, which SNATs only for egress IPs
// this node is the active gateway of; VNIEgressReply goes through ZonePod to IntEgressReplyCT,
// VNIEgressReplyPorts to IntEgressReplyCT (the stateless reply path, podEgressPortFlows).
// The inner source is not checked against the peer's pod CIDRs: a chained pod's address is its main
// CNI's (docs/egress.md#chained-mode), the pod's node already held it to its port (spoof
// guard), and the reply goes back to the tunnel source whatever the source (CTLabelEgressNode).
func egressNodeFlows(st *State, tunSrc of.Match) []of.Flow {
	return []of.Flow{
		flow(IntClassifier, prioHook, of.ProtoIP, st.Ports.IntTunnel, []of.Match{tunSrc, of.TunID(VNIEgress)},
			Goto(IntEgressSNAT)),
		flow(IntClassifier, prioHook, of.ProtoIP, st.Ports.IntTunnel, []of.Match{tunSrc, of.TunID(VNIEgressReply)},
			SourceEgress.Load(), CT{Zone: ZonePod, NAT: &NAT{}, Table: uint8(IntEgressReplyCT), HasTable: true}),
		// The stateless reply path (still to the egress IP): a local pod's block maps it back
		// (podEgressPortFlows); anything else is dropped there.
		flow(IntClassifier, prioHook, of.ProtoIP, st.Ports.IntTunnel, []of.Match{tunSrc, of.TunID(VNIEgressReplyPorts)},
			Goto(IntEgressReplyCT)),
	}
}

// egressGatewayRefusal is why this node cannot send egress IP e's packets to its gateway (""
// when it can): e has no gateway ("no gateway"; the callers warn only when e.Gateway is set), the
// gateway is unknown, or another node this node cannot tunnel to (State.TunnelRefusal: no
// underlay address, or one of the other family). This node itself is always reachable.
func (st *State) egressGatewayRefusal(e EgressIP) string {
	if e.Gateway == "" {
		return "no gateway"
	}
	if e.Gateway == st.Node {
		return ""
	}
	gw, known := st.Nodes[e.Gateway]
	if !known {
		return "gateway node " + e.Gateway + " unknown"
	}
	if why := st.TunnelRefusal(gw); why != "" {
		return "gateway " + why
	}
	return ""
}

// BuildEgress returns the br-int flows of one egress IP (KindEgress), on every node: where
// IntEgressOut sends the pods' packets (the active gateway over Geneve, this node's own SNAT, or
// drop when there is no gateway: fail closed, C29); and on the active gateway the SNAT in
// ZoneEgress (ovs-actions(7) "ct", nat(src=IP)), the hand-off to br-ex and the un-SNAT of what
// br-ex passes back for the egress IP.
func BuildEgress(st *State, e EgressIP) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindEgress, Name: e.IP.String()}, Bridge: BrInt}
	f := egressIPv4
	switch {
	case e.IP.Is6() && !e.IP.Is4In6():
		// IPv6 (issue 22): on a node that runs IPv6 only; its gateway declines an IP inside
		// an IPv6 subnet of one of its secondary NICs (egress6SecondaryRefusal).
		if !st.selfHasIPv6() {
			return fs, fs.Finish()
		}
		f = egressIPv6
		if e.Gateway == st.Node {
			if why := st.egress6SecondaryRefusal(e.IP); why != "" {
				// Never SNATed onto the primary uplink's segment (fail closed).
				fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, f.proto, 0,
					[]of.Match{RegEgressIP.MatchValue(EgressID(e.IP))}, DropFor(DropEgressNoGateway)))
				fs.Warnings = append(fs.Warnings, why)
				return fs, fs.Finish()
			}
		}
	case !e.IP.Is4():
		return fs, fs.Finish()
	}
	p := st.Ports
	match := RegEgressIP.MatchValue(EgressID(e.IP))
	mac := EgressMAC(e.IP)
	switch why := st.egressGatewayRefusal(e); {
	case why != "":
		fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, f.proto, 0, []of.Match{match}, DropFor(DropEgressNoGateway)))
		if e.Gateway != "" {
			fs.Warnings = append(fs.Warnings, fmt.Sprintf("egress IP %s: %s: its traffic is dropped", e.IP, why))
		}
	case e.Gateway == st.Node:
		fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, f.proto, 0, []of.Match{match},
			of.ModDLDst{MAC: mac}, Goto(IntEgressSNAT)))
	default:
		fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, f.proto, 0, []of.Match{match},
			of.ModDLDst{MAC: mac}, of.SetTunDstAddr(st.Nodes[e.Gateway].InternalIP), of.SetTunnel{ID: VNIEgress},
			output(p.IntTunnel)))
	}
	if e.Gateway == st.Node {
		fs.Flows = append(fs.Flows,
			flow(IntEgressSNAT, prioMid, f.proto, 0, []of.Match{of.EthDst(mac)},
				CT{Commit: true, Zone: f.zone, NAT: &NAT{Src: e.IP}, Table: uint8(IntEgressSend), HasTable: true,
					Exec: []of.Action{st.egressNodeFromTunSrc()}}),
			flow(IntEgressSend, prioMid, f.proto, 0, []of.Match{f.src(e.IP)},
				of.ModDLSrc{MAC: mac}, of.ModDLDst{MAC: p.ExMAC}, output(p.IntPatch)),
			flow(IntClassifier, prioEgressHook, f.proto, p.IntPatch,
				[]of.Match{of.EthDst(p.ExMAC), f.dst(e.IP)},
				CT{Zone: f.zone, NAT: &NAT{}, Table: uint8(IntEgressReply), HasTable: true}),
		)
		fs.Flows = append(fs.Flows, egressReplyBlockFlows(st, e, f)...)
	}
	return fs, fs.Finish()
}

// egressReplyBlockFlows are the active gateway's stateless reply path of egress IP e
// (EgressIP.ReplyBlocks): in IntEgressReply, below the replies of its own connections
// (which ZoneEgress un-SNATs), a TCP or UDP packet to e's IP whose destination port is in a
// pod's block goes to the pod's node over Geneve (VNIEgressReplyPorts, still to the egress IP)
// or, for a pod of this node, to IntEgressReplyCT; the pod's node maps it back by the block and
// its ZonePod entry, or drops it (podEgressPortFlows). Without it, a server's answer that reaches
// a new gateway before the pod's next packet has re-committed the session here is dropped
// (DropEgressReplyNoConnection) and a request-response connection hangs. Blocks of a node
// this node cannot tunnel to, or that is unknown, are left out (dropped as before).
func egressReplyBlockFlows(st *State, e EgressIP, f *egressFamily) []of.Flow {
	var fl []of.Flow
	for _, b := range e.ReplyBlocks {
		blk, ok := portBlockMatch(b.First, uint32(b.Size))
		if !ok {
			continue
		}
		var acts []of.Action
		switch n, known := st.Nodes[b.Node]; {
		case b.Node == st.Node:
			// Back to a lower table: resubmit (goto_table only goes forward).
			acts = []of.Action{of.Resubmit{Table: uint8(IntEgressReplyCT)}}
		case !known || st.TunnelRefusal(n) != "":
			continue
		default:
			acts = []of.Action{of.SetTunDstAddr(n.InternalIP), of.SetTunnel{ID: VNIEgressReplyPorts}, output(st.Ports.IntTunnel)}
		}
		for _, proto := range []of.Protocol{f.tcp, f.udp} {
			fl = append(fl, flow(IntEgressReply, prioLow, proto, 0, []of.Match{f.dst(e.IP), blk}, acts...))
		}
	}
	return fl
}

// BuildEgressAnnounce returns the br-ex flows of one egress IP on its active gateway
// (KindEgressAnnounce; nothing elsewhere): ARP requests for the egress IP from its uplink are
// answered with br-ex's MAC; IP to it from that uplink goes to br-int (the un-SNAT); the SNATed
// packets br-int sends go to the host, which routes them (next hop and NIC from its routing
// table). Its uplink is State.UplinkFor(IP): the secondary NIC whose subnet holds the egress IP
// (C38: node-setup's source routing sends the SNATed packets out that NIC, and
// secondaryUplinkFlows lets them through), else the primary uplink. The other uplinks neither
// answer nor intercept anything for it.
func BuildEgressAnnounce(st *State, e EgressIP) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindEgressAnnounce, Name: e.IP.String()}, Bridge: BrEx}
	if e.IP.Is6() && !e.IP.Is4In6() && e.Gateway == st.Node {
		buildEgressAnnounce6(st, e, fs)
		return fs, fs.Finish()
	}
	if !e.IP.Is4() || e.Gateway != st.Node {
		return fs, fs.Finish()
	}
	p := st.Ports
	up := st.UplinkFor(e.IP)
	fs.Flows = append([]of.Flow{
		flow(ExClassifier, prioEgressHook, of.ProtoARP, up,
			[]of.Match{of.ARPOp(arpOpRequest), of.ARPTPA(e.IP)}, arpReply(p.ExMAC)...),
	}, egressHandoffFlows(st, e.IP, egressIPv4, up)...)
	return fs, fs.Finish()
}

// egressHandoffFlows are the br-ex flows of egress IP ip (family f) on its active gateway
// besides its ARP or Neighbor Discovery answers: what comes to it from its uplink up (br-ex's
// MAC) goes to br-int for the un-SNAT; what br-int sends from it goes to the host, which routes
// it.
func egressHandoffFlows(st *State, ip netip.Addr, f *egressFamily, up int) []of.Flow {
	p := st.Ports
	return []of.Flow{
		flow(ExClassifier, prioEgressHook, f.proto, up,
			[]of.Match{of.EthDst(p.ExMAC), f.dst(ip)}, output(p.ExPatch)),
		flow(ExClassifier, prioEgressHook, f.proto, p.ExPatch,
			[]of.Match{f.src(ip)}, of.ModDLSrc{MAC: p.ExMAC}, outputLocal),
	}
}

func egressKeys(k Kind) func(st *State) []Key {
	return func(st *State) []Key {
		out := make([]Key, 0, len(st.Egress))
		for ip := range st.Egress {
			out = append(out, Key{Kind: k, Name: ip.String()})
		}
		return out
	}
}

func egressBuild(b func(*State, EgressIP) (*FlowSet, error)) func(*State, Key) (*FlowSet, error) {
	return func(st *State, k Key) (*FlowSet, error) {
		ip, err := netip.ParseAddr(k.Name)
		if err != nil {
			return nil, nil
		}
		e, ok := st.Egress[ip]
		if !ok {
			return nil, nil
		}
		return b(st, e)
	}
}

// PodEgressFlow reports whether a flow of a pod flow set in table t with priority prio is one of
// the pod's egress flows (podEgressFlows: to the egress path, or an excluded destination kept on
// the host path), for srcipctl get egress.
func PodEgressFlow(t Table, prio int) bool {
	return t == IntL3Forwarding && (prio == prioEgress || prio == prioEgressPorts || prio == prioEgressExcl)
}
