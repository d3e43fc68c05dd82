package flows

import (
	"net"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// The base pipelines (KindExBase, KindIntBase): one flow set per bridge, rebuilt in every sync.

func buildExBase(st *State, _ Key) (*FlowSet, error)  { return BuildExBase(st) }
func buildIntBase(st *State, _ Key) (*FlowSet, error) { return BuildIntBase(st) }

// ctService is ct(zone=ZoneService, nat, table=t): the lookup (and un-DNAT) in the Service zone.
func ctService(t Table) CT {
	return CT{Zone: ZoneService, NAT: &NAT{}, Table: uint8(t), HasTable: true}
}

// BuildExBase returns the static br-ex pipeline (KindExBase): the classifier hooks, the
// uplink<->host plumbing and the fixed parts of the service tables. See docs/pipeline.md.
func BuildExBase(st *State) (*FlowSet, error) {
	p := st.Ports
	if err := p.validate(); err != nil {
		return nil, err
	}
	fs := &FlowSet{Key: Key{Kind: KindExBase}, Bridge: BrEx}
	est := ctState(of.CTTracked.Set(), of.CTEstablished.Set())
	rel := ctState(of.CTTracked.Set(), of.CTRelated.Set())
	// A retransmitted SYN of a committed, unanswered connection comes back from ct(nat) as
	// +new+dnat, already translated (docs/lab-facts.md#pitfall-4).
	newDNAT := ctState(of.CTTracked.Set(), of.CTNew.Set(), of.CTDNAT.Set())
	invDNAT := ctState(of.CTTracked.Set(), of.CTInvalid.Set(), of.CTDNAT.Set())
	invRpl := ctState(of.CTTracked.Set(), of.CTInvalid.Set(), of.CTSNAT.Set())
	toNode := of.EthDst(p.ExMAC)
	rpl := ctState(of.CTTracked.Set(), of.CTEstablished.Set(), of.CTReply.Set())
	fs.Flows = append(fs.Flows, []of.Flow{
		// ExClassifier: Geneve to this node first (no Service entry point may capture the
		// tunnels): from a node the cluster knows it is let in above this flow
		// (BuildTunnelPeer), from anywhere else it is dropped here and counted by this flow's
		// n_packets. Then the hooks into our tables: IP from the uplink addressed to br-ex's MAC
		// (the node; frames for other MACs are not this node's to DNAT) and everything from our
		// patch port. Frames to br-ex's MAC from any other port go to the host directly, so
		// they are never flooded. Everything else keeps the installer's default forwarding,
		// NORMAL: uplink <-> LOCAL broadcasts and any port of br-ex the agent does not own
		// (other patch ports, VM taps) (docs/security.md, "Entry points and the host stack").
		flow(ExClassifier, prioTunnel, st.tunnelProto(), p.ExUplink, st.tunnelMatch(), DropFor(DropTunnelUnknownNode)),
		flow(ExClassifier, prioHook, of.ProtoIP, p.ExUplink, []of.Match{toNode}, Goto(ExServiceLB)),
		flow(ExClassifier, prioHook, of.ProtoNone, p.ExPatch, nil, Goto(ExFromInt)),
		flow(ExClassifier, prioLow, of.ProtoNone, 0, []of.Match{toNode}, outputLocal),
		flow(ExClassifier, prioDefault, of.ProtoNone, 0, nil, of.Output{Port: of.PortNormal}),
	}...)
	if st.underlayIPv6() {
		// Over an IPv6 underlay no node tunnels over IPv4: Geneve over IPv4, to any address of
		// this node (an IPv4 NodePort address), is dropped too (br-int would drop it anyway, no
		// node flow matches a tun_src).
		fs.Flows = append(fs.Flows, flow(ExClassifier, prioTunnel, of.ProtoUDP, p.ExUplink,
			[]of.Match{of.TPDst(st.Ports.tunnelUDPPort())}, DropFor(DropTunnelUnknownNode)))
	}
	fs.Flows = append(fs.Flows, []of.Flow{
		// ExServiceLB: ICMP errors (destination unreachable, incl. "fragmentation needed", time
		// exceeded, parameter problem) go through ct(zone=ZoneService,nat): one about a
		// ZoneService connection is +rel and un-DNATed (outer destination and the inner header)
		// towards its endpoint; any other ICMP error is not +rel and ExServiceCT gives it to the
		// host. Other ICMP (ping of the node) goes straight to the host.
		flow(ExServiceLB, prioEntry, of.ProtoICMP, 0, []of.Match{of.ICMPType(icmpDestUnreachable)}, ctService(ExServiceCT)),
		flow(ExServiceLB, prioEntry, of.ProtoICMP, 0, []of.Match{of.ICMPType(icmpTimeExceeded)}, ctService(ExServiceCT)),
		flow(ExServiceLB, prioEntry, of.ProtoICMP, 0, []of.Match{of.ICMPType(icmpParamProblem)}, ctService(ExServiceCT)),
		// ExServiceLB: not an entry point of an opted-in Service -> the host (P5).
		flow(ExServiceLB, prioDefault, of.ProtoNone, 0, nil, outputLocal),
		// ExServiceCT: known connections continue to br-int; other packets to the host.
		flow(ExServiceCT, prioMid, of.ProtoIP, 0, []of.Match{est}, output(p.ExPatch)),
		flow(ExServiceCT, prioMid, of.ProtoIP, 0, []of.Match{rel}, output(p.ExPatch)),
		flow(ExServiceCT, prioMid, of.ProtoIP, 0, []of.Match{newDNAT}, output(p.ExPatch)),
		// C31 (docs/field-cases.md#c31): a segment conntrack holds invalid (e.g. far outside
		// the TCP window) but that belongs to a ZoneService connection comes out of ct(nat)
		// already translated (+dnat, destination = the endpoint). It must not reach the host
		// stack (whose reset would kill the client's connection, or which would route it
		// towards the pod address): it goes on through the existing NAT to br-int, where the
		// endpoint's node, the one node that sees every packet of the connection, drops it if
		// its ZonePod holds it invalid too (IntPodIngressCT). This node's view may be stale: a
		// route change sent part of the connection through another ingress node. Invalid
		// packets without a ZoneService connection (not +dnat: the SYN-ACK of the host's own
		// connection from a NodePort-numbered port, C16) still go to the host.
		flow(ExServiceCT, prioMid, of.ProtoIP, 0, []of.Match{invDNAT}, output(p.ExPatch)),
		flow(ExServiceCT, prioDefault, of.ProtoNone, 0, nil, outputLocal),
		// ExServiceOut: after the bucket's ct(commit,nat(dst=...)).
		flow(ExServiceOut, prioLow, of.ProtoIP, 0, nil, output(p.ExPatch)),
		// ExFromInt / ExServiceReply: un-DNAT replies and send them to the client's MAC.
		flow(ExFromInt, prioLow, of.ProtoIP, 0, nil, CT{Zone: ZoneService, NAT: &NAT{}, Table: uint8(ExServiceReply), HasTable: true}),
		flow(ExFromInt, prioDefault, of.ProtoNone, 0, nil, DropFor(DropFromIntNotIP)),
		flow(ExServiceReply, prioMid, of.ProtoIP, 0, []of.Match{rpl},
			CTLabelClientMAC.MoveTo(nxmEthDst),
			of.ModDLSrc{MAC: p.ExMAC},
			output(p.ExUplink)),
		// An ICMP error of the endpoint about a ZoneService connection (e.g. UDP port
		// unreachable) is +rel: ct(nat) un-DNATed its outer source and inner header, and it
		// carries the connection's ct_label; it goes to the client like a reply.
		flow(ExServiceReply, prioMid, of.ProtoIP, 0, []of.Match{rel},
			CTLabelClientMAC.MoveTo(nxmEthDst),
			of.ModDLSrc{MAC: p.ExMAC},
			output(p.ExUplink)),
		// The same for replies: one that ZoneService holds invalid but un-DNATs (+inv+snat)
		// was found +est+rpl by the endpoint's node; it goes to the client.
		flow(ExServiceReply, prioMid, of.ProtoIP, 0, []of.Match{invRpl},
			CTLabelClientMAC.MoveTo(nxmEthDst),
			of.ModDLSrc{MAC: p.ExMAC},
			output(p.ExUplink)),
		flow(ExServiceReply, prioDefault, of.ProtoNone, 0, nil, DropFor(DropReplyNoConnection)),
	}...)
	if st.selfHasIPv6() {
		fs.Flows = append(fs.Flows, exBaseIPv6(st)...)
	}
	fs.Flows = append(fs.Flows, routedGuardFlows(st)...)
	sec, problems := secondaryUplinkFlows(st)
	fs.Flows = append(fs.Flows, sec...)
	fs.Warnings = append(fs.Warnings, problems...)
	return fs, fs.Finish()
}

// BuildIntBase returns the static br-int pipeline (KindIntBase): tunnel and patch classification,
// the pod reply steering, the ARP responder for this node's pod CIDRs and the pod ingress commit.
func BuildIntBase(st *State) (*FlowSet, error) {
	p := st.Ports
	if err := p.validate(); err != nil {
		return nil, err
	}
	fs := &FlowSet{Key: Key{Kind: KindIntBase}, Bridge: BrInt}
	rplTunnel := []of.Match{ctState(of.CTTracked.Set(), of.CTEstablished.Set(), of.CTReply.Set()), OriginTunnel.Match()}
	trackedNew := ctState(of.CTTracked.Set(), of.CTNew.Set())
	trackedEst := ctState(of.CTTracked.Set(), of.CTEstablished.Set())
	trackedRel := ctState(of.CTTracked.Set(), of.CTRelated.Set())
	trackedInv := ctState(of.CTTracked.Set(), of.CTInvalid.Set())
	rplBrEx := []of.Match{ctState(of.CTTracked.Set(), of.CTEstablished.Set(), of.CTReply.Set()), OriginBrEx.Match()}
	fs.Flows = []of.Flow{
		// Geneve is accepted per VNI from known nodes only (BuildNode); anything else from the
		// tunnel port is dropped here, and counted by this flow's n_packets.
		flow(IntClassifier, prioLow, of.ProtoNone, p.IntTunnel, nil, DropFor(DropTunnelUnknownVNI)),
		// From br-ex only what its Service tables sent, whose Ethernet destination is always
		// br-ex's MAC (ExClassifier's hook requires it); frames NORMAL floods into the patch
		// port (broadcasts, unknown unicast of other ports of br-ex) are dropped.
		flow(IntClassifier, prioHook, of.ProtoIP, p.IntPatch, []of.Match{of.EthDst(p.ExMAC)}, SourceBrEx.Load(), Goto(IntL3Forwarding)),
		flow(IntClassifier, prioDefault, of.ProtoNone, 0, nil, DropFor(DropUnknownInput)),
		// TCP source port 0 is never a real connection's: a pod's RST from port 0 (the answer to
		// a refused collision SYN, resetCollision) leaves only by the flow ResetLearn learned.
		flow(IntClassifier, prioPortZero, of.ProtoTCP, 0, []of.Match{of.TPSrc(0)}, DropFor(DropTCPSourcePortZero)),

		flow(IntPodEgressCT, prioMid, of.ProtoIP, 0, rplTunnel,
			st.ingressToTunDst(),
			of.SetTunnel{ID: VNIServiceReply},
			output(p.IntTunnel)),
		flow(IntPodEgressCT, prioMid, of.ProtoIP, 0, rplBrEx, output(p.IntPatch)),
		// A pod's ICMP error about a connection that came in by tunnel or from br-ex is +rel in
		// ZonePod with that connection's ct_mark and ct_label: it goes where the replies go.
		flow(IntPodEgressCT, prioMid, of.ProtoIP, 0, []of.Match{trackedRel, OriginTunnel.Match()},
			st.ingressToTunDst(),
			of.SetTunnel{ID: VNIServiceReply},
			output(p.IntTunnel)),
		flow(IntPodEgressCT, prioMid, of.ProtoIP, 0, []of.Match{trackedRel, OriginBrEx.Match()}, output(p.IntPatch)),
		// kubernetes#74839: a segment from a local pod that ZonePod holds invalid (the backend's
		// out-of-window segment of a connection the host DNATed or the tunnel brought in) would
		// leave here untranslated, past the host's or the ingress node's un-DNAT, and the client
		// would answer the backend's own address with a RST that kills the connection. It is
		// dropped, as a conntrack-invalid packet is by kube-proxy's rules (invalidSegment).
		flow(IntPodEgressCT, prioMid, of.ProtoTCP, 0, invalidSegment(), DropFor(DropPodEgressInvalid)),
		flow(IntPodEgressCT, prioDefault, of.ProtoNone, 0, nil, Goto(IntL3Forwarding)),

		flow(IntARPResponder, prioDefault, of.ProtoNone, 0, nil, DropFor(DropARPNotOurs)),
		flow(IntL3Forwarding, prioDefault, of.ProtoNone, 0, nil, DropFor(DropNoRoute)),

		// IntPodIngress -> IntPodIngressCT: connections entering a pod from the service tunnel
		// or from br-ex are tracked in ZonePod; a new one is committed with its origin (and, from
		// the tunnel, the ingress node in ct_label); packets of an existing connection pass
		// without a commit, from whichever node or origin they come (an LB IP picked up by
		// another ingress node after a route change), so no later packet can change what was
		// recorded: replies keep going the recorded way. A packet conntrack finds invalid (e.g. a
		// SYN from a second ingress node for the 4-tuple of an established connection) is
		// dropped (docs/security.md).
		flow(IntPodIngress, prioMid, of.ProtoIP, 0, []of.Match{SourceTunnelSvc.Match()},
			CT{Zone: ZonePod, Table: uint8(IntPodIngressCT), HasTable: true}),
		flow(IntPodIngress, prioMid, of.ProtoIP, 0, []of.Match{SourceBrEx.Match()},
			CT{Zone: ZonePod, Table: uint8(IntPodIngressCT), HasTable: true}),
		flow(IntPodIngressCT, prioMid, of.ProtoIP, 0, []of.Match{SourceTunnelSvc.Match(), trackedNew},
			CT{Commit: true, Zone: ZonePod, Exec: []of.Action{
				OriginTunnel.Load(),
				st.ingressFromTunSrc(),
			}},
			RegOutPort.Output()),
		flow(IntPodIngressCT, prioMid, of.ProtoIP, 0, []of.Match{SourceBrEx.Match(), trackedNew},
			CT{Commit: true, Zone: ZonePod, Exec: []of.Action{OriginBrEx.Load()}},
			RegOutPort.Output()),
		// A connection recorded as entering through a node that is no longer live (no keep flow
		// of BuildNode matched) is taken over by the ingress node its packets now come from: by
		// tunnel, the new ingress node's tun_src is recorded; from br-ex, this node itself
		// becomes the ingress node. Replies then follow the client's new route instead of
		// stalling at a dead node. Only known nodes can tunnel (IntClassifier), so nothing from
		// outside the cluster can re-point a connection, and never one of a live ingress node.
		flow(IntPodIngressCT, prioRepoint, of.ProtoIP, 0, []of.Match{SourceTunnelSvc.Match(), trackedEst, OriginTunnel.Match()},
			CT{Commit: true, Zone: ZonePod, Exec: []of.Action{st.ingressFromTunSrc()}},
			RegOutPort.Output()),
		flow(IntPodIngressCT, prioRepoint, of.ProtoIP, 0, []of.Match{SourceBrEx.Match(), trackedEst, OriginTunnel.Match()},
			CT{Commit: true, Zone: ZonePod, Exec: []of.Action{OriginBrEx.Load()}},
			RegOutPort.Output()),
		flow(IntPodIngressCT, prioMid, of.ProtoIP, 0, []of.Match{trackedEst}, RegOutPort.Output()),
		flow(IntPodIngressCT, prioMid, of.ProtoIP, 0, []of.Match{trackedRel}, RegOutPort.Output()),
		// The same client ip:port through a second ingress node to the endpoint of an
		// established connection: its SYN is invalid in ZonePod (the pod could hold only one of
		// the two). It is refused promptly instead of black-holed: delivered to the pod's port 0
		// (never a socket), whose kernel answers with a RST; the flow learned here carries that
		// RST back to the SYN's ingress node as a reply of the second connection, which it
		// un-DNATs to the client (connection refused). The established connection is not
		// touched: nothing is committed.
		// Conntrack finds the second connection's SYN invalid, or established (then BuildNode's
		// flows tell a retransmission through the recorded node from a collision; a connection
		// that came from br-ex is here, and a SYN for it by tunnel is a collision).
		flow(IntPodIngressCT, prioMid, of.ProtoTCP, 0, []of.Match{SourceTunnelSvc.Match(), trackedInv, of.TCPFlags(of.TCPSyn.Set(), of.TCPAck.Unset())},
			resetCollision(st)...),
		flow(IntPodIngressCT, prioMid, of.ProtoTCP, 0, []of.Match{SourceBrEx.Match(), trackedInv, of.TCPFlags(of.TCPSyn.Set(), of.TCPAck.Unset())},
			resetCollision(st)...),
		flow(IntPodIngressCT, prioCollision, of.ProtoTCP, 0, []of.Match{SourceTunnelSvc.Match(), trackedEst, OriginBrEx.Match(), of.TCPFlags(of.TCPSyn.Set(), of.TCPAck.Unset())},
			resetCollision(st)...),
		flow(IntPodIngressCT, prioDefault, of.ProtoNone, 0, nil, DropFor(DropPodIngressInvalid)),
		flow(IntPodIngress, prioDefault, of.ProtoNone, 0, nil, RegOutPort.Output()),
	}
	if st.selfHasIPv6() {
		// A dual-stack node: the IPv6 twins of the flows above, neighbour discovery (intv6.go).
		fs.Flows = append(fs.Flows, intBase6(st, fs.Flows)...)
	}
	fs.Flows = append(fs.Flows, egressBaseFlows(st)...)
	if st.egress6() {
		// The IPv6 egress path (egress6.go): only with IPv6 egress IPs.
		fs.Flows = append(fs.Flows, egressBase6(st)...)
	}
	{
		for _, c := range st.self().PodCIDRs {
			if !c.Addr().Is4() {
				continue
			}
			gwMAC := GatewayMAC(GatewayIP(c))
			// Proxy ARP for the whole pod CIDR: pods on this node reach each other and their
			// gateway through br-int's L3 forwarding.
			fs.Flows = append(fs.Flows, flow(IntARPResponder, prioEntry, of.ProtoARP, 0,
				[]of.Match{of.ARPOp(arpOpRequest), of.ARPTPAPrefix(c.Masked())},
				arpReply(gwMAC)...))
		}
	}
	fs.Flows = append(fs.Flows, upgradeTestFlows()...) // none in a normal build (upgradetest.go)
	return fs, fs.Finish()
}

// invalidSegment matches a TCP segment that conntrack holds invalid although it is a plain
// acknowledgement (ACK, maybe with data; no SYN, FIN or RST): out of window for a connection the
// zone tracks. A pod-to-pod connection is not committed in ZonePod, and its SYN-ACK (and, with
// the kernel datapath, its FIN and RST) are invalid only because no entry exists: those keep
// going; a plain ACK without an entry is +new (the userspace datapath; the kernel's with
// nf_conntrack_tcp_loose=1, its default).
func invalidSegment() []of.Match {
	return []of.Match{ctState(of.CTTracked.Set(), of.CTInvalid.Set()),
		of.TCPFlags(of.TCPAck.Set(), of.TCPSyn.Unset(), of.TCPFin.Unset(), of.TCPRst.Unset())}
}

// arpReply turns an ARP request into the reply "the target address is at mac" and sends it back
// where it came from (ovs-actions(7) "move", "load", "output"; ovs-fields(7) "arp_op", "arp_sha",
// "arp_spa", "arp_tha", "arp_tpa").
func arpReply(mac net.HardwareAddr) []of.Action {
	return []of.Action{
		of.Move{Src: nxmEthSrc, Dst: nxmEthDst},
		of.ModDLSrc{MAC: mac},
		of.Load{Value: arpOpReply, Dst: nxmARPOp},
		of.Move{Src: nxmARPSHA, Dst: nxmARPTHA},
		of.Load{Value: macValue(mac), Dst: nxmARPSHA},
		RegScratch.MoveFrom(nxmARPTPA),
		of.Move{Src: nxmARPSPA, Dst: nxmARPTPA},
		RegScratch.MoveTo(nxmARPSPA),
		outputInPort,
	}
}
