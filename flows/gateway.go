package flows

import (
	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// KindGateway: host connectivity through the gateway port (srcip-gw0).

// BuildGateway returns the host connectivity flows of br-int (KindGateway), present only when the
// node has a gateway port (Ports.HasGateway): an internal port on br-int that holds this node's
// pod gateway address on the host, through which the host routes the cluster's pod CIDRs.
//
//   - From the gateway port, IP goes through ct(zone=ZonePod) (ovs-actions(7) "ct") to
//     IntGatewayCT, which commits a new connection with ct_mark OriginGateway and sends it on to
//     IntL3Forwarding (a local pod, or another node's pod over Geneve with VNIPod); ARP requests
//     go to IntARPResponder, which answers for every node's pod CIDR; anything else from the port
//     is dropped (IntClassifier's default).
//   - The replies of such connections go back out the gateway port: from a local pod (+est+rpl in
//     IntPodEgressCT) and from another node's pod, which sends them over Geneve to the owner of
//     the destination address (+est+rpl in IntTunnelCT, after the lookup BuildNode adds). So the
//     host sees both directions and undoes kube-proxy's DNAT (pod -> ClusterIP -> endpoint pod).
//   - A local pod's packet for anything that is not a pod of the cluster (IntL3Forwarding miss:
//     node addresses, ClusterIPs, the outside world, this node's gateway address), and another
//     node's pod's packet for this node's gateway address, go to IntGatewayOut: a new connection
//     is committed in ZonePod (ct_mark 0), so the host's answers are +est, and the packet is
//     output to the gateway port with eth_dst := its MAC (ovs-actions(7) "mod_dl_dst").
//
// Only the host writes into the gateway port; pods cannot (their ports have the spoof guard),
// nodes' Geneve is classified by VNI and never reaches IntGatewayCT.
func BuildGateway(st *State) (*FlowSet, error) {
	p := st.Ports
	fs := &FlowSet{Key: Key{Kind: KindGateway}, Bridge: BrInt}
	var gwIPs []of.Match
	var gwMAC []byte
	for _, c := range st.self().PodCIDRs {
		if !c.Addr().Is4() {
			continue
		}
		gw := GatewayIP(c)
		if gwMAC == nil {
			gwMAC = GatewayMAC(gw)
		}
		gwIPs = append(gwIPs, of.IPv4Dst(gw))
	}
	if gwMAC == nil {
		fs.Warnings = append(fs.Warnings, "this node has no IPv4 pod CIDR: no host connectivity through the gateway port")
		return fs, fs.Finish()
	}
	trk := of.CTTracked.Set()
	newConn := ctState(trk, of.CTNew.Set())
	est := ctState(trk, of.CTEstablished.Set())
	rel := ctState(trk, of.CTRelated.Set())
	rpl := ctState(trk, of.CTEstablished.Set(), of.CTReply.Set())
	toHost := Goto(IntGatewayOut)
	fs.Flows = []of.Flow{
		// IntClassifier: what the host sends in.
		flow(IntClassifier, prioHigh, of.ProtoIP, p.IntGateway, nil,
			SourceGateway.Load(), CT{Zone: ZonePod, Table: uint8(IntGatewayCT), HasTable: true}),
		flow(IntClassifier, prioHigh, of.ProtoARP, p.IntGateway, []of.Match{of.ARPOp(arpOpRequest)},
			Goto(IntARPResponder)),

		// IntGatewayCT: commit what the host opens (kubelet probes, kube-proxy's DNAT, host
		// processes) with its origin; its own answers to what pods opened are +est (IntGatewayOut
		// committed those); an ICMP error of the host about a pod's connection is +rel.
		flow(IntGatewayCT, prioMid, of.ProtoIP, 0, []of.Match{newConn},
			CT{Commit: true, Zone: ZonePod, Exec: []of.Action{OriginGateway.Load()}},
			Goto(IntL3Forwarding)),
		flow(IntGatewayCT, prioMid, of.ProtoIP, 0, []of.Match{est}, Goto(IntL3Forwarding)),
		flow(IntGatewayCT, prioMid, of.ProtoIP, 0, []of.Match{rel}, Goto(IntL3Forwarding)),
		flow(IntGatewayCT, prioDefault, of.ProtoNone, 0, nil, DropFor(DropGatewayInvalid)),

		// Replies (and ICMP errors) of connections that came from the host go back to it: from a
		// local pod ...
		flow(IntPodEgressCT, prioMid, of.ProtoIP, 0, []of.Match{rpl, OriginGateway.Match()}, toHost),
		flow(IntPodEgressCT, prioMid, of.ProtoIP, 0, []of.Match{rel, OriginGateway.Match()}, toHost),
		// Replies (and ICMP errors) of connections another node's host opened from its InternalIP
		// (OriginNode, committed by BuildNode) go back over Geneve (VNIPod) to that node.
		flow(IntPodEgressCT, prioMid, of.ProtoIP, 0, []of.Match{rpl, OriginNode.Match()},
			st.ingressToTunDst(), of.SetTunnel{ID: VNIPod}, output(p.IntTunnel)),
		flow(IntPodEgressCT, prioMid, of.ProtoIP, 0, []of.Match{rel, OriginNode.Match()},
			st.ingressToTunDst(), of.SetTunnel{ID: VNIPod}, output(p.IntTunnel)),
		// ... and from another node's pod, over Geneve (VNIPod, looked up by BuildNode's flow).
		flow(IntTunnelCT, prioMid, of.ProtoIP, 0, []of.Match{rpl, OriginGateway.Match()}, toHost),
		flow(IntTunnelCT, prioMid, of.ProtoIP, 0, []of.Match{rel, OriginGateway.Match()}, toHost),
		// kubernetes#74839: another node's pod's out-of-window segment of a connection the host
		// opened (kube-proxy's DNAT of a ClusterIP) is invalid here; it must not go on to a local
		// pod untranslated (its kernel would answer the backend's address with a RST).
		flow(IntTunnelCT, prioMid, of.ProtoTCP, 0, invalidSegment(), DropFor(DropPodEgressInvalid)),
		flow(IntTunnelCT, prioDefault, of.ProtoNone, 0, nil, Goto(IntL3Forwarding)),

		// IntL3Forwarding: a local pod's packet for anything that is not a pod goes to the host
		// (below every route; packets from br-ex, the tunnel or the host itself still end in the
		// default drop).
		flow(IntL3Forwarding, prioLow, of.ProtoIP, 0, []of.Match{SourcePod.Match()}, toHost),

		// IntGatewayOut: commit new connections so that the host's answers are tracked.
		flow(IntGatewayOut, prioMid, of.ProtoIP, 0, []of.Match{newConn},
			CT{Commit: true, Zone: ZonePod},
			of.ModDLSrc{MAC: gwMAC}, of.ModDLDst{MAC: p.GatewayMAC}, output(p.IntGateway)),
		flow(IntGatewayOut, prioLow, of.ProtoIP, 0, nil,
			of.ModDLSrc{MAC: gwMAC}, of.ModDLDst{MAC: p.GatewayMAC}, output(p.IntGateway)),
	}
	if st.selfHasIPv6() {
		fs.Flows = append(fs.Flows, gateway6Flows(st, fs.Flows)...)
	}
	// Another node's pod may reach this node's host on the gateway address (it is inside this
	// node's pod CIDR, so it arrives here by VNIPod).
	for _, m := range gwIPs {
		fs.Flows = append(fs.Flows, flow(IntL3Forwarding, prioHigh, of.ProtoIP, 0, []of.Match{SourceTunnelPod.Match(), m}, toHost))
	}
	// The host routes the cluster's pod CIDRs into the gateway port and asks for each destination
	// by ARP: answered for this node's pod CIDRs by BuildIntBase's responder, for other nodes' by
	// their BuildNode flow sets (so a node added or removed changes only its own flow set).
	return fs, fs.Finish()
}

func gatewayKeys(st *State) []Key {
	if !st.Ports.HasGateway() {
		return nil
	}
	return []Key{{Kind: KindGateway}}
}

func buildGatewayKey(st *State, _ Key) (*FlowSet, error) {
	if !st.Ports.HasGateway() {
		return nil, nil
	}
	return BuildGateway(st)
}
