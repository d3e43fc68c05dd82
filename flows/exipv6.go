package flows

import (
	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// ICMPv6 error types (RFC 4443) that concern a connection: the ICMP errors of IPv4's pipeline
// plus Packet Too Big, IPv6's "fragmentation needed" (routers do not fragment IPv6; PMTUD
// depends on it).
const (
	icmp6DestUnreachable = 1 // code 4 port unreachable
	icmp6PacketTooBig    = 2
	icmp6TimeExceeded    = 3
	icmp6ParamProblem    = 4
)

// exBaseIPv6 returns the IPv6 twins of BuildExBase's flows that match IP (a node that runs
// IPv6 only: State.selfHasIPv6): the uplink hook into ExServiceLB, the ICMPv6 errors through
// ct(zone=ZoneService6,nat) (Destination Unreachable, Packet Too Big, Time Exceeded, Parameter
// Problem: one about a ZoneService6 connection is +rel and follows it, as the ICMP ones do),
// ExServiceCT's known connections to br-int, ExServiceOut, and the un-DNAT of replies from
// br-int (ExFromInt, ExServiceReply: +est+rpl, +rel, +inv+snat to the client's MAC). Each has
// the same table, priority and action as its IPv4 twin; ipv6 instead of ip, ZoneService6
// instead of ZoneService.
func exBaseIPv6(st *State) []of.Flow {
	p := st.Ports
	est := ctState(of.CTTracked.Set(), of.CTEstablished.Set())
	rel := ctState(of.CTTracked.Set(), of.CTRelated.Set())
	newDNAT := ctState(of.CTTracked.Set(), of.CTNew.Set(), of.CTDNAT.Set())
	invDNAT := ctState(of.CTTracked.Set(), of.CTInvalid.Set(), of.CTDNAT.Set())
	invRpl := ctState(of.CTTracked.Set(), of.CTInvalid.Set(), of.CTSNAT.Set())
	rpl := ctState(of.CTTracked.Set(), of.CTEstablished.Set(), of.CTReply.Set())
	toClient := func(m of.Match) of.Flow {
		return flow(ExServiceReply, prioMid, of.ProtoIPv6, 0, []of.Match{m},
			CTLabelClientMAC.MoveTo(nxmEthDst),
			of.ModDLSrc{MAC: p.ExMAC},
			output(p.ExUplink))
	}
	fl := []of.Flow{
		flow(ExClassifier, prioHook, of.ProtoIPv6, p.ExUplink, []of.Match{of.EthDst(p.ExMAC)}, Goto(ExServiceLB)),
	}
	for _, t := range []uint8{icmp6DestUnreachable, icmp6PacketTooBig, icmp6TimeExceeded, icmp6ParamProblem} {
		fl = append(fl, flow(ExServiceLB, prioEntry, of.ProtoICMP6, 0, []of.Match{of.ICMPv6Type(t)}, CT{Zone: ZoneService6, NAT: &NAT{}, Table: uint8(ExServiceCT), HasTable: true}))
	}
	for _, m := range []of.Match{est, rel, newDNAT, invDNAT} {
		fl = append(fl, flow(ExServiceCT, prioMid, of.ProtoIPv6, 0, []of.Match{m}, output(p.ExPatch)))
	}
	return append(fl,
		flow(ExServiceOut, prioLow, of.ProtoIPv6, 0, nil, output(p.ExPatch)),
		flow(ExFromInt, prioLow, of.ProtoIPv6, 0, nil, CT{Zone: ZoneService6, NAT: &NAT{}, Table: uint8(ExServiceReply), HasTable: true}),
		toClient(rpl), toClient(rel), toClient(invRpl),
	)
}
