package ofctl_test

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

// ipv6Messages are IPv6 flows and a group of every IPv6 shape openflow encodes: tcp6/udp6/icmp6
// matches on addresses and prefixes, a select group hashing ipv6_src, ct with nat(dst=[v6]:port)
// and nat(src=v6), ICMPv6 types, a Neighbor Solicitation matched on nd_target and nd_sll and
// answered by set_field (nd_reserved, nd_options_type, nd_tll) and 128-bit moves, a learn of
// 128-bit fields, and the IPv6 underlay's tun_ipv6_src match and tun_ipv6_dst set_field and moves.
func ipv6Messages() []openflow.Message {
	const cookie = 0x5c10000000000006
	vip := netip.MustParseAddr("2001:db8::11")
	ep := netip.MustParseAddrPort("[2001:db8:2::5]:8080")
	mac, _ := net.ParseMAC("02:00:c0:00:02:0b")
	node := netip.MustParseAddr("2001:db8:0:2::12")
	g := &openflow.GroupDesc{ID: 7, Type: openflow.GroupSelect, SelectionParam: 166312,
		SelectionFields: []openflow.Field{openflow.FieldIPv6Src, openflow.FieldTCPSrc},
		Buckets: []openflow.Bucket{
			{ID: 1, Weight: 100, Actions: []openflow.Action{openflow.CT{Commit: true, HasTable: true, Table: 42, Zone: 64272,
				NAT:  &openflow.NAT{Dst: ep},
				Exec: []openflow.Action{openflow.Move{Src: openflow.Ref(openflow.FieldEthSrc), Dst: openflow.Bits(openflow.FieldCTLabel, 0, 47)}}}}},
			{ID: 2, Weight: 100, Actions: []openflow.Action{openflow.Move{Src: openflow.Ref(openflow.FieldIPv6Src), Dst: openflow.Ref(openflow.FieldIPv6Dst)},
				openflow.Output{Port: 2}}},
		}}
	flow := func(table uint8, prio uint16, proto openflow.Protocol, m []openflow.Match, acts ...openflow.Action) openflow.Message {
		return openflow.FlowMod{Command: openflow.FlowAdd, Flow: &openflow.Flow{Table: table, Priority: prio, Cookie: cookie,
			Protocol: proto, Match: m, Actions: acts}}
	}
	learn := openflow.Learn{Table: 10, Priority: 610, HardTimeout: 2, Cookie: cookie, Specs: []openflow.LearnSpec{
		{Kind: openflow.LearnMatch, Dst: openflow.Ref(openflow.FieldEthType), Value: 0x86dd},
		{Kind: openflow.LearnMatch, Dst: openflow.Ref(openflow.FieldIPProto), Value: 6},
		{Kind: openflow.LearnMatch, Dst: openflow.Ref(openflow.FieldIPv6Src), Src: openflow.Ref(openflow.FieldIPv6Dst), FromField: true},
		{Kind: openflow.LearnMatch, Dst: openflow.Bits(openflow.FieldIPv6Dst, 64, 127), Src: openflow.Bits(openflow.FieldIPv6Src, 64, 127), FromField: true},
		{Kind: openflow.LearnLoad, Dst: openflow.Ref(openflow.FieldIPv6Src), Src: openflow.Ref(openflow.FieldIPv6Dst), FromField: true},
		{Kind: openflow.LearnLoad, Dst: openflow.Ref(openflow.FieldTunIPv6Dst), Src: openflow.Ref(openflow.FieldTunIPv6Src), FromField: true},
		{Kind: openflow.LearnOutput, Src: openflow.Ref(openflow.FieldInPort)},
	}}
	return []openflow.Message{
		openflow.GroupMod{Command: openflow.GroupAddOrMod, Group: g, Buckets: g.Buckets},
		flow(40, 100, openflow.ProtoTCP6, []openflow.Match{openflow.IPv6Dst(vip), openflow.TPDst(80),
			openflow.IPv6SrcPrefix(netip.MustParsePrefix("2001:db8:1::/64"))}, openflow.Group{ID: 7}),
		flow(40, 90, openflow.ProtoUDP6, []openflow.Match{openflow.IPDst(vip), openflow.TPDst(53)},
			openflow.CT{Commit: true, Zone: 64272, NAT: &openflow.NAT{Dst: netip.MustParseAddrPort("[2001:db8:2::6]:5353")}}),
		flow(40, 80, openflow.ProtoTCP6, []openflow.Match{openflow.CTState(openflow.CTTracked.Set(), openflow.CTNew.Set()),
			openflow.IPv6SrcPrefix(netip.MustParsePrefix("fd00:10:244::/48")), openflow.TCPFlags(openflow.TCPSyn.Set())},
			openflow.CT{Commit: true, Zone: 64274, NAT: &openflow.NAT{Src: vip}}, openflow.GotoTable{Table: 41}),
		flow(40, 70, openflow.ProtoIPv6, []openflow.Match{openflow.IPv6DstPrefix(netip.MustParsePrefix("2001:db8::/32")),
			openflow.IPFrag(openflow.FragLater)}, openflow.CT{HasTable: true, Table: 41, Zone: 64272, NAT: &openflow.NAT{}}),
		flow(40, 60, openflow.ProtoICMP6, []openflow.Match{openflow.ICMPv6Type(2)}, openflow.Output{Port: 3}),
		flow(40, 60, openflow.ProtoICMP6, []openflow.Match{openflow.ICMPv6Type(1), openflow.ICMPv6Code(4)}, openflow.Output{Port: 3}),
		// A Neighbor Solicitation for the VIP answered in place.
		flow(55, 100, openflow.ProtoICMP6, []openflow.Match{openflow.ICMPv6Type(135), openflow.NDTarget(vip), openflow.NDSLL(mac)},
			openflow.Move{Src: openflow.Ref(openflow.FieldEthSrc), Dst: openflow.Ref(openflow.FieldEthDst)},
			openflow.ModDLSrc{MAC: mac},
			openflow.Move{Src: openflow.Ref(openflow.FieldIPv6Src), Dst: openflow.Ref(openflow.FieldIPv6Dst)},
			openflow.SetIPSrc(vip),
			openflow.SetValue(openflow.FieldICMPv6Type, 136),
			openflow.SetValue(openflow.FieldNDReserved, 0x60000000), // solicited, override
			openflow.SetValue(openflow.FieldNDOptionsType, 2),       // the option is now the target's
			openflow.Resubmit{Table: 56}),
		// nd_tll can be set only by a flow that matches an NA (OVS checks a set_field's
		// prerequisites against the flow's match, not the actions before it).
		flow(56, 100, openflow.ProtoICMP6, []openflow.Match{openflow.ICMPv6Type(136)},
			openflow.SetMAC(openflow.FieldNDTLL, mac), openflow.Output{Port: openflow.PortInPort}),
		flow(55, 90, openflow.ProtoICMP6, []openflow.Match{openflow.ICMPv6Type(136), openflow.NDTLL(mac)},
			openflow.SetMAC(openflow.FieldNDTLL, net.HardwareAddr{2, 0, 0, 0, 0, 1}), openflow.SetAddr(openflow.FieldNDTarget, vip),
			openflow.Move{Src: openflow.Ref(openflow.FieldNDTarget), Dst: openflow.Ref(openflow.FieldIPv6Src)}, openflow.Output{Port: 1}),
		flow(10, 600, openflow.ProtoTCP6, []openflow.Match{openflow.IPv6Src(vip)}, learn, openflow.SetIPDst(netip.MustParseAddr("2001:db8::12"))),
		// The IPv6 underlay: Geneve from a node's IPv6 address (tun_ipv6_src), its source recorded
		// in all of ct_label, a reply tunnelled back to it (tun_ipv6_dst from ct_label, or set).
		flow(0, 300, openflow.ProtoIP, []openflow.Match{openflow.TunIPv6Src(node), openflow.TunID(2)},
			openflow.CT{Commit: true, Zone: 64257, Exec: []openflow.Action{openflow.Move{Src: openflow.Ref(openflow.FieldTunIPv6Src), Dst: openflow.Bits(openflow.FieldCTLabel, 0, 127)}}},
			openflow.Output{Port: 3}),
		flow(0, 290, openflow.ProtoNone, []openflow.Match{openflow.TunIPv6Src(node), openflow.TunID(3)}, openflow.Output{Port: 1}),
		flow(50, 300, openflow.ProtoIPv6, []openflow.Match{openflow.CTState(openflow.CTTracked.Set(), openflow.CTEstablished.Set())},
			openflow.Move{Src: openflow.Bits(openflow.FieldCTLabel, 0, 127), Dst: openflow.Ref(openflow.FieldTunIPv6Dst)}, openflow.SetTunnel{ID: 3}, openflow.Output{Port: 2}),
		flow(70, 300, openflow.ProtoIP, []openflow.Match{openflow.IPv4DstPrefix(netip.MustParsePrefix("10.244.2.0/24"))},
			openflow.SetTunIPv6Dst(node), openflow.SetTunnel{ID: 1}, openflow.Output{Port: 2}),
	}
}

// The IPv6 flows and group (ipv6Messages), written through ovs-ofctl from their text and through
// the native connection from their encoding, leave both bridges with the same dump-flows and
// dump-groups output, line for line; OVS prints them as the text says (the v6 nat in brackets,
// the hash field ipv6_src, the 128-bit moves).
func TestNativeEquivalenceIPv6(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "ref")
	sb.AddBridge(t, "nat")
	ref := ofctl.NewOpenFlow("ref", sb.MgmtTarget("ref"))
	nat := nativeOpenFlow(t, sb, "nat")
	msgs := ipv6Messages()
	for _, m := range msgs {
		if fm, ok := m.(openflow.FlowMod); ok {
			require.NoError(t, fm.Flow.Check(), fm.Flow.String())
		}
	}
	e := openflow.EncodeAll(msgs)
	require.NoError(t, e.Err)
	require.NoError(t, ref.BundleText(ctx, openflow.Text(msgs)), "via ovs-ofctl")
	require.NoError(t, nat.BundleEncoded(ctx, e), "native")
	rf, rg := dumpState(t, sb, "ref")
	nf, ng := dumpState(t, sb, "nat")
	assert.Len(t, rf, len(msgs)-1)
	assert.Equal(t, rf, nf, "flows")
	assert.Equal(t, rg, ng, "groups")
	all := strings.Join(append(rf, rg...), "\n")
	for _, want := range []string{"nat(dst=[2001:db8:2::5]:8080)", "nat(src=2001:db8::11)", "fields(ipv6_src,tcp_src)",
		"ipv6_src=2001:db8:1::/64", "nd_target=2001:db8::11", "icmp6,icmp_type=2", "move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[]",
		"set_field:2001:db8::11->ipv6_src", "set_field:1610612736->nd_reserved", "set_field:2->nd_options_type",
		"set_field:02:00:c0:00:02:0b->nd_tll", "NXM_NX_IPV6_SRC[]=NXM_NX_IPV6_DST[]", "tcp6", "udp6",
		"tun_ipv6_src=2001:db8:0:2::12", "move:NXM_NX_TUN_IPV6_SRC[]->NXM_NX_CT_LABEL[]", "move:NXM_NX_CT_LABEL[]->NXM_NX_TUN_IPV6_DST[]",
		"set_field:2001:db8:0:2::12->tun_ipv6_dst", "load:NXM_NX_TUN_IPV6_SRC[]->NXM_NX_TUN_IPV6_DST[]"} {
		assert.Contains(t, all, want)
	}
	t.Logf("%d IPv6 flows and %d group: native and ovs-ofctl agree", len(rf), len(rg))
}
