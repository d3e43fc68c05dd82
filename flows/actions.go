package flows

import (
	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// CT is the conntrack action (ovs-actions(7) "The ct action"): openflow.CT.
type CT = of.CT

// NAT is the nat(...) argument of CT: openflow.NAT.
type NAT = of.NAT

// Group sends the packet to OpenFlow group id (group:N).
func Group(id uint32) of.Action { return of.Group{ID: id} }

// Goto continues processing in table t (goto_table:N, OpenFlow 1.1+ instruction).
func Goto(t Table) of.Action { return of.GotoTable{Table: uint8(t)} }

// Actions of the pipeline that output to reserved ports.
var (
	outputLocal  of.Action = of.Output{Port: of.PortLocal}
	outputInPort of.Action = of.Output{Port: of.PortInPort}
)

// ResetLearn is the learn action (ovs-actions(7) "The learn action") of the collision reset: run
// on a TCP SYN that the backend delivers to a local pod's closed port 0 instead of its Service
// port, it learns the flow that carries the pod's answer (the kernel's RST to a SYN for a port
// without a socket) back the way the SYN came, as a reply of the SYN's own connection:
//
//	table=IntClassifier, priority=prioTunnelPeer, hard_timeout=hardTimeout, cookie=KindLearnedReset
//	tcp, in_port=<the pod's port (RegOutPort)>, nw_src=<SYN's nw_dst>, nw_dst=<SYN's nw_src>,
//	tp_src=0, tp_dst=<SYN's tp_src>
//	actions: tp_src=<SYN's tp_dst>, tun_dst=<SYN's tun_src>, tun_id=VNIServiceReply,
//	         output:<SYN's in_port> (the Geneve port, or the patch port to br-ex)
//
// It must run before the SYN's tp_dst is rewritten. hardTimeout (seconds) bounds the learned
// flow's life.
func ResetLearn(hardTimeout uint16) of.Action { return ResetLearnUnderlay(hardTimeout, false) }

// ResetLearnUnderlay is ResetLearn for a node whose Geneve underlay is IPv6 (ipv6Underlay):
// the learned flow loads the SYN's tun_ipv6_src into tun_ipv6_dst instead of tun_src into
// tun_dst.
func ResetLearnUnderlay(hardTimeout uint16, ipv6Underlay bool) of.Action {
	ref := of.Ref
	tunSrc, tunDst := ref(of.FieldTunSrc), ref(of.FieldTunDst)
	if ipv6Underlay {
		tunSrc, tunDst = ref(of.FieldTunIPv6Src), ref(of.FieldTunIPv6Dst)
	}
	match := func(dst of.FieldRef, v uint64) of.LearnSpec {
		return of.LearnSpec{Kind: of.LearnMatch, Dst: dst, Value: v}
	}
	matchField := func(dst, src of.FieldRef) of.LearnSpec {
		return of.LearnSpec{Kind: of.LearnMatch, Dst: dst, Src: src, FromField: true}
	}
	loadField := func(src, dst of.FieldRef) of.LearnSpec {
		return of.LearnSpec{Kind: of.LearnLoad, Dst: dst, Src: src, FromField: true}
	}
	return of.Learn{
		Table:       uint8(IntClassifier),
		Priority:    prioTunnelPeer,
		HardTimeout: hardTimeout,
		Cookie:      uint64(NewCookie(KindLearnedReset, 0)),
		Specs: []of.LearnSpec{
			match(ref(of.FieldEthType), 0x800),
			match(ref(of.FieldIPProto), 6),
			matchField(ref(of.FieldInPort), of.Bits(of.Reg(RegOutPort.reg), 0, 15)),
			matchField(ref(of.FieldIPv4Src), ref(of.FieldIPv4Dst)),
			matchField(ref(of.FieldIPv4Dst), ref(of.FieldIPv4Src)),
			match(ref(of.FieldTCPSrc), 0),
			matchField(ref(of.FieldTCPDst), ref(of.FieldTCPSrc)),
			loadField(ref(of.FieldTCPDst), ref(of.FieldTCPSrc)),
			loadField(tunSrc, tunDst),
			{Kind: of.LearnLoad, Dst: ref(of.FieldTunID), Value: VNIServiceReply},
			{Kind: of.LearnOutput, Src: ref(of.FieldInPort)},
		},
	}
}
