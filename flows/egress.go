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

// egressExcluded lists what is never sent to an egress gateway: every node's pod CIDRs and
// InternalIP, the cluster's Service and node networks (State.EgressClusterCIDRs) and the
// policy's excludedDestinations.
func egressExcluded(st *State, e *PodEgress) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range st.Nodes {
		for _, c := range n.PodCIDRs {
			if c.Addr().Is4() {
				out = append(out, c.Masked())
			}
		}
		if n.InternalIP.Is4() {
			out = append(out, netip.PrefixFrom(n.InternalIP, 32))
		}
	}
	for _, c := range append(slices.Clone(st.EgressClusterCIDRs), e.Excluded...) {
		if c.Addr().Is4() {
			out = append(out, c.Masked())
		}
	}
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
	if ip.Is6() {
		// IPv6: only the pod's IPv6 assignment, on a node that carries the IPv6 egress path.
		if e := p.Egress6; e != nil && e.IP.Is6() && st.selfHasIPv6() {
			return podEgressFlows6(st, ip, e)
		}
		return nil
	}
	e := p.Egress
	if e == nil || !e.IP.Is4() || !ip.Is4() {
		return nil
	}
	src := of.IPv4Src(ip)
	newConn := ctState(of.CTTracked.Set(), of.CTNew.Set())
	var fl []of.Flow
	hostPath := DropFor(DropNoRoute)
	if st.Ports.HasGateway() {
		hostPath = Goto(IntGatewayOut)
	}
	for _, x := range egressExcluded(st, e) {
		fl = append(fl, flow(IntL3Forwarding, prioEgressExcl, of.ProtoIP, 0,
			[]of.Match{SourcePod.Match(), src, of.IPv4DstPrefix(x), newConn}, hostPath))
	}
	dsts := e.Destinations
	if len(dsts) == 0 {
		dsts = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	}
	for _, d := range dsts {
		if !d.Addr().Is4() {
			continue
		}
		m := []of.Match{SourcePod.Match(), src, newConn}
		if d.Bits() > 0 {
			m = append(m, of.IPv4DstPrefix(d.Masked()))
		}
		exec := []of.Action{EgressPath.Load(), CTLabelEgressIP.Load(ipv4Value(e.IP))}
		fl = append(fl, flow(IntL3Forwarding, prioEgress, of.ProtoIP, 0, m,
			CT{Commit: true, Zone: ZonePod, Exec: exec},
			RegEgressIP.Load(uint32(ipv4Value(e.IP))), Goto(IntEgressOut)))
		fl = append(fl, podEgressPortFlows(ip, e, m, uint32(ipv4Value(e.IP)), exec, of.ProtoTCP, of.ProtoUDP)...)
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
func podEgressPortFlows(ip netip.Addr, e *PodEgress, m []of.Match, id uint32, exec []of.Action, protos ...of.Protocol) []of.Flow {
	var fl []of.Flow
	for _, proto := range protos {
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
	}
	return fl
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
// this node is the active gateway of; VNIEgressReply goes through ZonePod to IntEgressReplyCT.
// The inner source is not checked against the peer's pod CIDRs: a chained pod's address is its main
// CNI's (docs/egress.md#chained-mode), the pod's node already held it to its port (spoof
// guard), and the reply goes back to the tunnel source whatever the source (CTLabelEgressNode).
func egressNodeFlows(st *State, tunSrc of.Match) []of.Flow {
	return []of.Flow{
		flow(IntClassifier, prioHook, of.ProtoIP, st.Ports.IntTunnel, []of.Match{tunSrc, of.TunID(VNIEgress)},
			Goto(IntEgressSNAT)),
		flow(IntClassifier, prioHook, of.ProtoIP, st.Ports.IntTunnel, []of.Match{tunSrc, of.TunID(VNIEgressReply)},
			SourceEgress.Load(), CT{Zone: ZonePod, NAT: &NAT{}, Table: uint8(IntEgressReplyCT), HasTable: true}),
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
	if e.IP.Is6() && !e.IP.Is4In6() {
		buildEgress6(st, e, fs)
		return fs, fs.Finish()
	}
	if !e.IP.Is4() {
		return fs, fs.Finish()
	}
	p := st.Ports
	match := RegEgressIP.MatchValue(uint32(ipv4Value(e.IP)))
	mac := EgressMAC(e.IP)
	switch why := st.egressGatewayRefusal(e); {
	case why != "":
		fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, of.ProtoIP, 0, []of.Match{match}, DropFor(DropEgressNoGateway)))
		if e.Gateway != "" {
			fs.Warnings = append(fs.Warnings, fmt.Sprintf("egress IP %s: %s: its traffic is dropped", e.IP, why))
		}
	case e.Gateway == st.Node:
		fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, of.ProtoIP, 0, []of.Match{match},
			of.ModDLDst{MAC: mac}, Goto(IntEgressSNAT)))
	default:
		fs.Flows = append(fs.Flows, flow(IntEgressOut, prioMid, of.ProtoIP, 0, []of.Match{match},
			of.ModDLDst{MAC: mac}, of.SetTunDstAddr(st.Nodes[e.Gateway].InternalIP), of.SetTunnel{ID: VNIEgress},
			output(p.IntTunnel)))
	}
	if e.Gateway == st.Node {
		fs.Flows = append(fs.Flows,
			flow(IntEgressSNAT, prioMid, of.ProtoIP, 0, []of.Match{of.EthDst(mac)},
				CT{Commit: true, Zone: ZoneEgress, NAT: &NAT{Src: e.IP}, Table: uint8(IntEgressSend), HasTable: true,
					Exec: []of.Action{st.egressNodeFromTunSrc()}}),
			flow(IntEgressSend, prioMid, of.ProtoIP, 0, []of.Match{of.IPv4Src(e.IP)},
				of.ModDLSrc{MAC: mac}, of.ModDLDst{MAC: p.ExMAC}, output(p.IntPatch)),
			flow(IntClassifier, prioEgressHook, of.ProtoIP, p.IntPatch,
				[]of.Match{of.EthDst(p.ExMAC), of.IPv4Dst(e.IP)},
				CT{Zone: ZoneEgress, NAT: &NAT{}, Table: uint8(IntEgressReply), HasTable: true}),
		)
	}
	return fs, fs.Finish()
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
	fs.Flows = []of.Flow{
		flow(ExClassifier, prioEgressHook, of.ProtoARP, up,
			[]of.Match{of.ARPOp(arpOpRequest), of.ARPTPA(e.IP)}, arpReply(p.ExMAC)...),
		flow(ExClassifier, prioEgressHook, of.ProtoIP, up,
			[]of.Match{of.EthDst(p.ExMAC), of.IPv4Dst(e.IP)}, output(p.ExPatch)),
		flow(ExClassifier, prioEgressHook, of.ProtoIP, p.ExPatch,
			[]of.Match{of.IPv4Src(e.IP)}, of.ModDLSrc{MAC: p.ExMAC}, outputLocal),
	}
	return fs, fs.Finish()
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
