package flows

import (
	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// KindNode: the Geneve route to one other node's pod CIDRs.

// BuildNode returns the flows of another node on br-int (KindNode): what arrives by Geneve from
// that node's InternalIP (tun_src; tun_ipv6_src over an IPv6 underlay, underlay.go) is classified by VNI - VNIPod and VNIService go to
// IntL3Forwarding with their RegSource mark, VNIServiceReply to br-ex; Geneve from any other
// source matches none of these and is dropped in IntClassifier (BuildIntBase). And the route to
// its pod CIDRs: pod traffic goes with VNIPod, DNATed external traffic from br-ex with VNIService;
// tun_dst (tun_ipv6_dst) is that node's InternalIP. A node this node cannot tunnel to
// (State.TunnelRefusal) gets no flow and a warning. While the node is live, backends keep the replies of the
// connections recorded as entering through it on it (IntPodIngressCT). With a gateway port
// (Ports.HasGateway) the host's traffic from it goes with VNIPod too, and VNIPod packets from that
// node are looked up in ZonePod (ovs-actions(7) "ct", no commit) and go to IntTunnelCT, which
// sends replies of the host's connections back to the gateway port (BuildGateway).
func BuildNode(st *State, n Node) (*FlowSet, error) {
	fs := &FlowSet{Key: Key{Kind: KindNode, Name: n.Name}, Bridge: BrInt}
	if why := st.TunnelRefusal(n); why != "" {
		fs.Warnings = append(fs.Warnings, why+": no route to its pods")
		return fs, fs.Finish()
	}
	tunSrc := of.TunSrcAddr(n.InternalIP)
	gw := st.Ports.HasGateway()
	// twin are the family-neutral IP flows that carry IPv6 too on a dual-stack node (node6Flows).
	var twin []of.Flow
	if gw {
		// With a gateway port, pod traffic from that node is looked up in ZonePod (no commit):
		// replies of connections the host sent out the gateway port go back to it (IntTunnelCT).
		f := flow(IntClassifier, prioHook, of.ProtoIP, st.Ports.IntTunnel, []of.Match{tunSrc, of.TunID(VNIPod)},
			SourceTunnelPod.Load(), CT{Zone: ZonePod, Table: uint8(IntTunnelCT), HasTable: true})
		fs.Flows = append(fs.Flows, f)
		twin = append(twin, f)
	} else {
		fs.Flows = append(fs.Flows, flow(IntClassifier, prioHook, of.ProtoNone, st.Ports.IntTunnel, []of.Match{tunSrc, of.TunID(VNIPod)},
			SourceTunnelPod.Load(), Goto(IntL3Forwarding)))
	}
	if gw {
		// That node's host reaches a local pod from its InternalIP (node-setup's route of the
		// cluster CIDRs into its gateway port has the node IP as source): the connection is
		// committed here with OriginNode and the node in CTLabelIngressNode, and its replies go
		// back over Geneve to it (BuildGateway), where they are +est+rpl of the connection its
		// gateway port committed (IntTunnelCT) and go out to its host. Through this node's host
		// they would be conntrack-invalid there (it never saw the SYN) or masqueraded. Only a
		// connection to this node's own pod CIDRs is committed: another destination (which that
		// node has no business sending here) leaves no ZonePod entry and goes on uncommitted.
		for _, c := range st.self().PodCIDRs {
			if !c.Addr().Is4() || !n.InternalIP.Is4() {
				// Over an IPv6 underlay that node's host reaches IPv4 pods from its IPv4 pod
				// gateway address (node-setup's route source without an IPv4 node IP), inside
				// its pod CIDR: the replies route back over VNIPod without a commit.
				continue
			}
			fs.Flows = append(fs.Flows,
				flow(IntTunnelCT, prioHigh, of.ProtoIP, 0,
					[]of.Match{tunSrc, of.IPv4Src(n.InternalIP), of.IPv4DstPrefix(c.Masked()), ctState(of.CTTracked.Set(), of.CTNew.Set())},
					CT{Commit: true, Zone: ZonePod, Exec: []of.Action{OriginNode.Load(), st.ingressFromTunSrc()}},
					Goto(IntL3Forwarding)))
		}
		// The guard of new connections tunnelled from that node to local pods, and routed
		// pods' ingress through it (routed.go).
		fs.Flows = append(fs.Flows, tunnelGuardFlows(st, n, tunSrc)...)
		// The host asks for that node's pods by ARP on the gateway port (it routes the cluster's
		// pod CIDRs there): answered with this node's pod gateway MAC.
		if gwMAC := selfGatewayMAC(st); gwMAC != nil {
			for _, c := range n.PodCIDRs {
				if c.Addr().Is4() {
					fs.Flows = append(fs.Flows, flow(IntARPResponder, prioEntry, of.ProtoARP, st.Ports.IntGateway,
						[]of.Match{of.ARPOp(arpOpRequest), of.ARPTPAPrefix(c.Masked())},
						arpReply(gwMAC)...))
				}
			}
		}
	}
	fs.Flows = append(fs.Flows,
		flow(IntClassifier, prioHook, of.ProtoNone, st.Ports.IntTunnel, []of.Match{tunSrc, of.TunID(VNIService)}, SourceTunnelSvc.Load(), Goto(IntL3Forwarding)),
		flow(IntClassifier, prioHook, of.ProtoNone, st.Ports.IntTunnel, []of.Match{tunSrc, of.TunID(VNIServiceReply)}, output(st.Ports.IntPatch)),
	)
	// The egress VNIs from n, over either underlay (tunSrc is tun_src or tun_ipv6_src): only a
	// node's underlay address may use them (the tunnel guard); Geneve from any other source
	// matches none of these and IntClassifier drops it.
	fs.Flows = append(fs.Flows, egressNodeFlows(st, tunSrc)...)
	if st.egress6() {
		// The IPv6 egress path's classification from n (egress6.go): here, not in br-int's
		// base, so that a node's coming or going rewrites only its own flow set.
		fs.Flows = append(fs.Flows, twin6(egressNodeFlows(st, tunSrc))...)
	}
	if !n.Down {
		// Connections recorded as entering through this node keep their replies on it for as
		// long as it is live, whichever node or origin a later packet comes from: the packet is
		// delivered without a commit (a route change that moved the client elsewhere leaves the
		// replies asymmetric; an injected packet changes nothing). When the node is no longer
		// live this flow goes, and BuildIntBase's re-point flows hand its connections to the
		// ingress node their packets now arrive through.
		recorded := recordedIngress(n.InternalIP)
		syn := of.TCPFlags(of.TCPSyn.Set(), of.TCPAck.Unset())
		keep := []of.Flow{
			flow(IntPodIngressCT, prioHigh, of.ProtoIP, 0,
				[]of.Match{ctEstablished(), OriginTunnel.Match(), recorded},
				RegOutPort.Output()),
			// A SYN of the established connection is a retransmission from the client (its
			// SYN-ACK was lost on the way) when it comes through the recorded node, and the SYN
			// of a second connection from the same client ip:port through another ingress node
			// when it does not: that one is refused (resetCollision).
			flow(IntPodIngressCT, prioCollisionOK, of.ProtoTCP, 0,
				[]of.Match{ctEstablished(), OriginTunnel.Match(), recorded, syn, SourceTunnelSvc.Match(), tunSrc},
				RegOutPort.Output()),
			flow(IntPodIngressCT, prioCollision, of.ProtoTCP, 0,
				[]of.Match{ctEstablished(), OriginTunnel.Match(), recorded, syn},
				resetCollision(st)...),
		}
		fs.Flows = append(fs.Flows, keep...)
		twin = append(twin, keep...)
	}
	for _, c := range n.PodCIDRs {
		if !c.Addr().Is4() {
			continue
		}
		dst := of.IPv4DstPrefix(c.Masked())
		tunDst := of.SetTunDstAddr(n.InternalIP)
		fs.Flows = append(fs.Flows,
			flow(IntL3Forwarding, prioEntry, of.ProtoIP, 0, []of.Match{SourcePod.Match(), dst},
				tunDst, of.SetTunnel{ID: VNIPod}, output(st.Ports.IntTunnel)),
			flow(IntL3Forwarding, prioEntry, of.ProtoIP, 0, []of.Match{SourceBrEx.Match(), dst},
				tunDst, of.SetTunnel{ID: VNIService}, output(st.Ports.IntTunnel)),
		)
		if gw {
			// The host (through the gateway port) reaches that node's pods like a pod does.
			fs.Flows = append(fs.Flows, flow(IntL3Forwarding, prioEntry, of.ProtoIP, 0, []of.Match{SourceGateway.Match(), dst},
				tunDst, of.SetTunnel{ID: VNIPod}, output(st.Ports.IntTunnel)))
		}
	}
	if st.selfHasIPv6() {
		fs.Flows = append(fs.Flows, node6Flows(st, n, twin)...)
	}
	return fs, fs.Finish()
}

func nodeRank(st *State, k Key) Rank { return st.Nodes[k.Name].Rank }
