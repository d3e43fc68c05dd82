package flows

import (
	"fmt"

	"github.com/digitalocean/go-openvswitch/ovs"
)

// The base pipelines (KindExBase, KindIntBase): one flow set per bridge, rebuilt in every sync.

func buildExBase(st *State, _ Key) (*FlowSet, error)  { return BuildExBase(st) }
func buildIntBase(st *State, _ Key) (*FlowSet, error) { return BuildIntBase(st) }

// ctService is ct(zone=ZoneService, nat, table=t): the lookup (and un-DNAT) in the Service zone.
func ctService(t Table) CT { return CT{Zone: ZoneService, NAT: &NAT{}, Table: tableRef(t)} }

// BuildExBase returns the static br-ex pipeline (KindExBase): the classifier hooks, the
// uplink<->host plumbing and the fixed parts of the service tables. See docs/pipeline.md.
func BuildExBase(st *State) (*FlowSet, error) {
	p := st.Ports
	if err := p.validate(); err != nil {
		return nil, err
	}
	fs := &FlowSet{Key: Key{Kind: KindExBase}, Bridge: BrEx}
	est := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateEstablished))
	rel := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateRelated))
	// A retransmitted SYN of a committed, unanswered connection comes back from ct(nat) as
	// +new+dnat, already translated (docs/lab-facts.md#pitfall-4).
	newDNAT := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateNew), "+dnat")
	rpl := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateEstablished), ovs.SetState(ovs.CTStateReply))
	fs.Flows = []ovs.Flow{
		// ExClassifier: Geneve to this node first (no Service entry point may capture the
		// tunnels): from a node the cluster knows it is let in above this flow
		// (BuildTunnelPeer), from anywhere else it is dropped here and counted by this flow's
		// n_packets. Then the hooks into our tables, then the installer's plumbing.
		flow(ExClassifier, prioTunnel, ovs.ProtocolUDPv4, p.ExUplink, st.tunnelMatch(), ovs.Drop()),
		flow(ExClassifier, prioHook, ovs.ProtocolIPv4, p.ExUplink, nil, Goto(ExServiceLB)),
		flow(ExClassifier, prioHook, "", p.ExPatch, nil, Goto(ExFromInt)),
		flow(ExClassifier, prioLow, "", p.ExUplink, nil, outputLocal),
		flow(ExClassifier, prioLow, "", ovs.PortLOCAL, nil, output(p.ExUplink)),
		flow(ExClassifier, prioDefault, "", 0, nil, ovs.Drop()),
		// ExServiceLB: ICMP errors (destination unreachable, incl. "fragmentation needed", time
		// exceeded, parameter problem) go through ct(zone=ZoneService,nat): one about a
		// ZoneService connection is +rel and un-DNATed (outer destination and the inner header)
		// towards its endpoint; any other ICMP error is not +rel and ExServiceCT gives it to the
		// host. Other ICMP (ping of the node) goes straight to the host.
		flow(ExServiceLB, prioEntry, ovs.ProtocolICMPv4, 0, []ovs.Match{ovs.ICMPType(icmpDestUnreachable)}, ctService(ExServiceCT)),
		flow(ExServiceLB, prioEntry, ovs.ProtocolICMPv4, 0, []ovs.Match{ovs.ICMPType(icmpTimeExceeded)}, ctService(ExServiceCT)),
		flow(ExServiceLB, prioEntry, ovs.ProtocolICMPv4, 0, []ovs.Match{ovs.ICMPType(icmpParamProblem)}, ctService(ExServiceCT)),
		// ExServiceLB: not an entry point of an opted-in Service -> the host (P5).
		flow(ExServiceLB, prioDefault, "", 0, nil, outputLocal),
		// ExServiceCT: known connections continue to br-int; other packets to the host.
		flow(ExServiceCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{est}, output(p.ExPatch)),
		flow(ExServiceCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{rel}, output(p.ExPatch)),
		flow(ExServiceCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{newDNAT}, output(p.ExPatch)),
		flow(ExServiceCT, prioDefault, "", 0, nil, outputLocal),
		// ExServiceOut: after the bucket's ct(commit,nat(dst=...)).
		flow(ExServiceOut, prioLow, ovs.ProtocolIPv4, 0, nil, output(p.ExPatch)),
		// ExFromInt / ExServiceReply: un-DNAT replies and send them to the client's MAC.
		flow(ExFromInt, prioLow, ovs.ProtocolIPv4, 0, nil, CT{Zone: ZoneService, NAT: &NAT{}, Table: tableRef(ExServiceReply)}),
		flow(ExFromInt, prioDefault, "", 0, nil, ovs.Drop()),
		flow(ExServiceReply, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{rpl},
			CTLabelClientMAC.MoveTo(nxmEthDst),
			ovs.ModDataLinkSource(p.ExMAC),
			output(p.ExUplink)),
		// An ICMP error of the endpoint about a ZoneService connection (e.g. UDP port
		// unreachable) is +rel: ct(nat) un-DNATed its outer source and inner header, and it
		// carries the connection's ct_label; it goes to the client like a reply.
		flow(ExServiceReply, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{rel},
			CTLabelClientMAC.MoveTo(nxmEthDst),
			ovs.ModDataLinkSource(p.ExMAC),
			output(p.ExUplink)),
		flow(ExServiceReply, prioDefault, "", 0, nil, ovs.Drop()),
	}
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
	rplTunnel := []ovs.Match{ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateEstablished), ovs.SetState(ovs.CTStateReply)), OriginTunnel.Match()}
	trackedNew := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateNew))
	trackedEst := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateEstablished))
	trackedRel := ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateRelated))
	rplBrEx := []ovs.Match{ctState(ovs.SetState(ovs.CTStateTracked), ovs.SetState(ovs.CTStateEstablished), ovs.SetState(ovs.CTStateReply)), OriginBrEx.Match()}
	fs.Flows = []ovs.Flow{
		// Geneve is accepted per VNI from known nodes only (BuildNode); anything else from the
		// tunnel port is dropped here, and counted by this flow's n_packets.
		flow(IntClassifier, prioLow, "", p.IntTunnel, nil, ovs.Drop()),
		flow(IntClassifier, prioHook, ovs.ProtocolIPv4, p.IntPatch, nil, SourceBrEx.Load(), Goto(IntL3Forwarding)),
		flow(IntClassifier, prioDefault, "", 0, nil, ovs.Drop()),

		flow(IntPodEgressCT, prioMid, ovs.ProtocolIPv4, 0, rplTunnel,
			CTLabelIngressNode.MoveTo(nxmTunIPv4),
			ovs.SetTunnel(VNIServiceReply),
			output(p.IntTunnel)),
		flow(IntPodEgressCT, prioMid, ovs.ProtocolIPv4, 0, rplBrEx, output(p.IntPatch)),
		// A pod's ICMP error about a connection that came in by tunnel or from br-ex is +rel in
		// ZonePod with that connection's ct_mark and ct_label: it goes where the replies go.
		flow(IntPodEgressCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{trackedRel, OriginTunnel.Match()},
			CTLabelIngressNode.MoveTo(nxmTunIPv4),
			ovs.SetTunnel(VNIServiceReply),
			output(p.IntTunnel)),
		flow(IntPodEgressCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{trackedRel, OriginBrEx.Match()}, output(p.IntPatch)),
		flow(IntPodEgressCT, prioDefault, "", 0, nil, Goto(IntL3Forwarding)),

		flow(IntARPResponder, prioDefault, "", 0, nil, ovs.Drop()),
		flow(IntL3Forwarding, prioDefault, "", 0, nil, ovs.Drop()),

		// IntPodIngress -> IntPodIngressCT: connections entering a pod from the service tunnel
		// or from br-ex are tracked in ZonePod; a new one is committed with its origin (and, from
		// the tunnel, the ingress node in ct_label); packets of an existing connection pass
		// without a commit, so no later packet can change what was recorded; a packet whose
		// connection has the other origin, or that conntrack finds invalid, is dropped.
		flow(IntPodIngress, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{SourceTunnelSvc.Match()},
			CT{Zone: ZonePod, Table: tableRef(IntPodIngressCT)}),
		flow(IntPodIngress, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{SourceBrEx.Match()},
			CT{Zone: ZonePod, Table: tableRef(IntPodIngressCT)}),
		flow(IntPodIngressCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{SourceTunnelSvc.Match(), trackedNew},
			CT{Commit: true, Zone: ZonePod, Exec: []ovs.Action{
				OriginTunnel.Load(),
				CTLabelIngressNode.MoveFrom(nxmTunSrc),
			}},
			RegOutPort.Output()),
		flow(IntPodIngressCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{SourceBrEx.Match(), trackedNew},
			CT{Commit: true, Zone: ZonePod, Exec: []ovs.Action{OriginBrEx.Load()}},
			RegOutPort.Output()),
		flow(IntPodIngressCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{SourceTunnelSvc.Match(), trackedEst, OriginTunnel.Match()}, RegOutPort.Output()),
		flow(IntPodIngressCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{SourceTunnelSvc.Match(), trackedRel, OriginTunnel.Match()}, RegOutPort.Output()),
		flow(IntPodIngressCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{SourceBrEx.Match(), trackedEst, OriginBrEx.Match()}, RegOutPort.Output()),
		flow(IntPodIngressCT, prioMid, ovs.ProtocolIPv4, 0, []ovs.Match{SourceBrEx.Match(), trackedRel, OriginBrEx.Match()}, RegOutPort.Output()),
		flow(IntPodIngressCT, prioDefault, "", 0, nil, ovs.Drop()),
		flow(IntPodIngress, prioDefault, "", 0, nil, RegOutPort.Output()),
	}
	{
		for _, c := range st.self().PodCIDRs {
			if !c.Addr().Is4() {
				continue
			}
			gwMAC := GatewayMAC(GatewayIP(c))
			// Proxy ARP for the whole pod CIDR: pods on this node reach each other and their
			// gateway through br-int's L3 forwarding.
			fs.Flows = append(fs.Flows, flow(IntARPResponder, prioEntry, ovs.ProtocolARP, 0,
				[]ovs.Match{ovs.ARPOperation(arpOpRequest), ovs.ARPTargetProtocolAddress(c.Masked().String())},
				ovs.Move(nxmEthSrc, nxmEthDst),
				ovs.ModDataLinkSource(gwMAC),
				ovs.Load(fmt.Sprintf("%#x", arpOpReply), nxmARPOp),
				ovs.Move(nxmARPSHA, nxmARPTHA),
				ovs.Load(macHex(gwMAC), nxmARPSHA),
				RegScratch.MoveFrom(nxmARPTPA),
				ovs.Move(nxmARPSPA, nxmARPTPA),
				RegScratch.MoveTo(nxmARPSPA),
				outputInPort))
		}
	}
	return fs, fs.Finish()
}
