package openflow

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"

	of13 "github.com/contiv/libOpenflow/openflow13"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The protocol twins: V6 and V4 are inverses on the IP protocols, ForAddr picks by family,
// IPSrcField/IPDstField name the family's address fields.
func TestProtocolFamilies(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.11")
	v6 := netip.MustParseAddr("2001:db8::11")
	for p4, p6 := range map[Protocol]Protocol{ProtoIP: ProtoIPv6, ProtoTCP: ProtoTCP6, ProtoUDP: ProtoUDP6, ProtoICMP: ProtoICMP6} {
		assert.Equal(t, p6, p4.V6(), p4.String())
		assert.Equal(t, p6, p6.V6(), p6.String())
		assert.Equal(t, p4, p6.V4(), p6.String())
		assert.Equal(t, p4, p4.V4(), p4.String())
		assert.Equal(t, p4, p6.ForAddr(v4))
		assert.Equal(t, p6, p4.ForAddr(v6))
		assert.True(t, p6.IsIPv6() && !p6.IsIPv4() && p4.IsIPv4() && !p4.IsIPv6())
		assert.Equal(t, FieldIPv4Src, p4.IPSrcField())
		assert.Equal(t, FieldIPv6Dst, p6.IPDstField())
		if p4 != ProtoICMP {
			assert.Equal(t, p4.IPProto(), p6.IPProto())
		}
		assert.Equal(t, uint16(0x86dd), p6.EthType())
	}
	assert.Equal(t, uint8(58), ProtoICMP6.IPProto())
	assert.Equal(t, ProtoNone, ProtoARP.V6())
	assert.Equal(t, ProtoARP, ProtoARP.V4())
	assert.Equal(t, Field(0), ProtoARP.IPSrcField())
	assert.Equal(t, []string{"ipv6", "tcp6", "udp6", "icmp6"},
		[]string{ProtoIPv6.String(), ProtoTCP6.String(), ProtoUDP6.String(), ProtoICMP6.String()})
	assert.True(t, ProtoTCP6.IsTCP() && ProtoUDP6.IsUDP() && !ProtoUDP6.IsTCP())
}

// IPv6 matches and actions render as ovs-ofctl(8) writes them.
func TestTextIPv6(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:c0:00:02:0b")
	a := netip.MustParseAddr("2001:db8::11")
	for want, m := range map[string]Match{
		"ipv6_src=2001:db8::11":     IPv6Src(a),
		"ipv6_dst=2001:db8::11":     IPv6Dst(a),
		"ipv6_dst=2001:db8::12":     IPDst(netip.MustParseAddr("2001:db8::12")),
		"ipv6_src=2001:db8::12":     IPSrc(netip.MustParseAddr("2001:db8::12")),
		"ipv6_src=2001:db8:1::/64":  IPv6SrcPrefix(netip.MustParsePrefix("2001:db8:1::/64")),
		"ipv6_dst=fd00::/8":         IPv6DstPrefix(netip.MustParsePrefix("fd00::/8")),
		"ipv6_src=2001:db8::11/128": IPSrcPrefix(netip.MustParsePrefix("2001:db8::11/128")),
		"nw_src=192.0.2.0/24":       IPSrcPrefix(netip.MustParsePrefix("192.0.2.0/24")),
		"nw_dst=192.0.2.11":         IPDst(netip.MustParseAddr("192.0.2.11")),
		"nw_src=192.0.2.11":         IPSrc(netip.MustParseAddr("192.0.2.11")),
		"ipv6_dst=2001:db8::/32":    IPDstPrefix(netip.MustParsePrefix("2001:db8::/32")),
		"icmpv6_type=2":             ICMPv6Type(2),
		"icmpv6_code=0":             ICMPv6Code(0),
		"nd_target=2001:db8::11":    NDTarget(a),
		"nd_sll=02:00:c0:00:02:0b":  NDSLL(mac),
		"nd_tll=02:00:c0:00:02:0b":  NDTLL(mac),
	} {
		assert.Equal(t, want, text(m))
	}
	for want, act := range map[string]Action{
		"set_field:2001:db8::11->ipv6_src":           SetIPSrc(a),
		"set_field:192.0.2.11->ip_dst":               SetIPDst(netip.MustParseAddr("192.0.2.11")),
		"set_field:2001:db8::11->nd_target":          SetAddr(FieldNDTarget, a),
		"set_field:02:00:c0:00:02:0b->nd_tll":        SetMAC(FieldNDTLL, mac),
		"set_field:136->icmpv6_type":                 SetValue(FieldICMPv6Type, 136),
		"move:NXM_NX_IPV6_SRC[]->NXM_NX_IPV6_DST[]":  Move{Src: Ref(FieldIPv6Src), Dst: Ref(FieldIPv6Dst)},
		"move:NXM_NX_ND_TARGET[]->NXM_NX_IPV6_SRC[]": Move{Src: Ref(FieldNDTarget), Dst: Ref(FieldIPv6Src)},
		"ct(commit,table=42,zone=64272,nat(dst=[2001:db8:2::5]:8080))": CT{Commit: true, HasTable: true, Table: 42, Zone: 64272,
			NAT: &NAT{Dst: netip.MustParseAddrPort("[2001:db8:2::5]:8080")}},
		"ct(commit,zone=64274,nat(src=2001:db8::11))":                      CT{Commit: true, Zone: 64274, NAT: &NAT{Src: a}},
		"ct(commit,table=75,zone=64256,nat(src=[2001:db8::11]:1024-1535))": CT{Commit: true, HasTable: true, Table: 75, Zone: 64256, NAT: &NAT{Src: a, SrcPortMin: 1024, SrcPortMax: 1535}},
		"learn(table=10,priority=610,cookie=0x1,eth_type=0x86dd,nw_proto=6,NXM_NX_IPV6_SRC[]=NXM_NX_IPV6_DST[],load:NXM_NX_IPV6_DST[]->NXM_NX_IPV6_SRC[])": Learn{
			Table: 10, Priority: 610, Cookie: 1, Specs: []LearnSpec{
				{Kind: LearnMatch, Dst: Ref(FieldEthType), Value: 0x86dd},
				{Kind: LearnMatch, Dst: Ref(FieldIPProto), Value: 6},
				{Kind: LearnMatch, Dst: Ref(FieldIPv6Src), Src: Ref(FieldIPv6Dst), FromField: true},
				{Kind: LearnLoad, Dst: Ref(FieldIPv6Src), Src: Ref(FieldIPv6Dst), FromField: true},
			}},
	} {
		assert.Equal(t, want, text(act))
	}
	g := &GroupDesc{ID: 9, Type: GroupSelect, SelectionFields: []Field{FieldIPv6Src, FieldTCPSrc}}
	assert.Equal(t, "group_id=9,type=select,selection_method=hash,fields(ipv6_src,tcp_src)", g.String())
	assert.Equal(t, uint16(128), FieldIPv6Src.Bits())
	assert.Equal(t, "NXM_NX_ND_TLL", FieldNDTLL.NXM())
}

// matchFields returns the OXM (class, field) pairs and payload lengths of an encoded flow
// mod's match, in wire order.
func matchFields(t *testing.T, body []byte) (fields []uint16, lens []byte) {
	t.Helper()
	end := 40 + int(binary.BigEndian.Uint16(body[42:]))
	for o := 44; o+4 <= end; {
		fields = append(fields, uint16(body[o+1])<<8|uint16(body[o+2]>>1))
		lens = append(lens, body[o+3])
		o += 4 + int(body[o+3])
	}
	return fields, lens
}

// An IPv6 flow encodes eth_type 0x86dd and ip_proto, then its fields after their
// prerequisites (nd_target after icmpv6_type), 16-byte addresses, a /64 prefix masked.
func TestEncodeIPv6(t *testing.T) {
	f := &Flow{Table: 41, Priority: 100, Protocol: ProtoTCP6,
		Match:   []Match{TPDst(80), IPv6DstPrefix(netip.MustParsePrefix("2001:db8:1::/64")), IPv6Src(netip.MustParseAddr("2001:db8::1"))},
		Actions: []Action{Output{Port: 2}}}
	require.NoError(t, f.Check())
	_, body, err := FlowMod{Command: FlowAdd, Flow: f}.Encode()
	require.NoError(t, err)
	fields, lens := matchFields(t, body)
	assert.Equal(t, []uint16{0x0005, 0x000a, 0x001a, 0x001b, 0x000e}, fields, "eth_type, ip_proto, ipv6_src, ipv6_dst, tcp_dst")
	assert.Equal(t, []byte{2, 1, 16, 32, 2}, lens)
	assert.Contains(t, string(body), string([]byte{0x86, 0xdd}))

	nd := &Flow{Protocol: ProtoICMP6, Match: []Match{NDTarget(netip.MustParseAddr("2001:db8::11")), ICMPv6Type(135)},
		Actions: []Action{Drop{}}}
	require.NoError(t, nd.Check())
	_, body, err = FlowMod{Command: FlowAdd, Flow: nd}.Encode()
	require.NoError(t, err)
	fields, _ = matchFields(t, body)
	assert.Equal(t, []uint16{0x0005, 0x000a, 0x001d, 0x001f}, fields, "eth_type, ip_proto 58, icmpv6_type, nd_target")

	// A select group hashing ipv6_src: the field's TLV carries 16 bytes of all-ones mask.
	g := &GroupDesc{ID: 9, Type: GroupSelect, SelectionFields: []Field{FieldIPv6Src, FieldTCPSrc},
		Buckets: []Bucket{{ID: 1, Weight: 100, Actions: []Action{Output{Port: 2}}}}}
	_, body, err = GroupMod{Command: GroupAddOrMod, Group: g, Buckets: g.Buckets}.Encode()
	require.NoError(t, err)
	assert.Contains(t, string(body), string(append([]byte{0x80, 0x00, 26 << 1, 16}, make16(0xff)...)))

	// set_field of an IPv6 address: a 16-byte set-field; a 128-bit move.
	acts := []Action{SetIPSrc(netip.MustParseAddr("2001:db8::1")), Move{Src: Ref(FieldIPv6Src), Dst: Ref(FieldIPv6Dst)},
		SetMAC(FieldNDTLL, net.HardwareAddr{2, 0, 0, 0, 0, 1}), SetValue(FieldICMPv6Type, 136)}
	require.NoError(t, CheckActions(acts))
	b, err := appendInstructions(nil, acts)
	require.NoError(t, err)
	assert.Contains(t, string(b), string(netip.MustParseAddr("2001:db8::1").AsSlice()))

	// nd_reserved and nd_options_type: OXM class 0x1000, fields 1 and 2.
	b, err = appendInstructions(nil, []Action{SetValue(FieldNDReserved, 0x60000000), SetValue(FieldNDOptionsType, 2)})
	require.NoError(t, err)
	assert.Contains(t, string(b), string([]byte{0x10, 0x00, 1 << 1, 4, 0x60, 0, 0, 0}))
	assert.Contains(t, string(b), string([]byte{0x10, 0x00, 2 << 1, 1, 2}))
}

func make16(v byte) []byte {
	b := make([]byte, 16)
	for i := range b {
		b[i] = v
	}
	return b
}

// Values of the wrong family, fields without their prerequisite protocol, and nat addresses of
// the other family are refused by Check (and the match ones by Encode), never by a panic.
func TestCheckIPv6(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.11")
	v6 := netip.MustParseAddr("2001:db8::1")
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	for name, f := range map[string]*Flow{
		"v4 ipv6_dst":         {Protocol: ProtoIPv6, Match: []Match{IPv6Dst(v4)}, Actions: []Action{Drop{}}},
		"ipv6_dst on ip":      {Protocol: ProtoIP, Match: []Match{IPv6Dst(v6)}, Actions: []Action{Drop{}}},
		"nw_dst on ipv6":      {Protocol: ProtoIPv6, Match: []Match{IPv4Dst(v4)}, Actions: []Action{Drop{}}},
		"nd_target on ipv6":   {Protocol: ProtoIPv6, Match: []Match{NDTarget(v6)}, Actions: []Action{Drop{}}},
		"nd_tll on ipv6":      {Protocol: ProtoIPv6, Match: []Match{NDTLL(mac)}, Actions: []Action{Drop{}}},
		"icmpv6_type on icmp": {Protocol: ProtoICMP, Match: []Match{ICMPv6Type(2)}, Actions: []Action{Drop{}}},
		"tcp_flags on udp6":   {Protocol: ProtoUDP6, Match: []Match{TCPFlags(TCPSyn.Set())}, Actions: []Action{Drop{}}},
		"tp_dst on ipv6":      {Protocol: ProtoIPv6, Match: []Match{TPDst(80)}, Actions: []Action{Drop{}}},
	} {
		assert.Error(t, f.Check(), name)
		_, _, err := FlowMod{Command: FlowAdd, Flow: f}.Encode()
		assert.Error(t, err, name)
	}
	for name, f := range map[string]*Flow{
		"v6 nat in a tcp flow":  {Protocol: ProtoTCP, Actions: []Action{CT{Commit: true, Zone: 1, NAT: &NAT{Dst: netip.AddrPortFrom(v6, 80)}}}},
		"v4 nat in a tcp6 flow": {Protocol: ProtoTCP6, Actions: []Action{CT{Commit: true, Zone: 1, NAT: &NAT{Src: v4}}}},
		"v4 set ipv6_src":       {Actions: []Action{SetAddr(FieldIPv6Src, v4)}},
		"v6 set ip_src":         {Actions: []Action{SetAddr(FieldIPv4Src, v6)}},
		"address into a port":   {Actions: []Action{SetAddr(FieldTCPDst, v6)}},
		"short nd_tll":          {Actions: []Action{SetMAC(FieldNDTLL, mac[:4])}},
		"wide icmpv6_type":      {Actions: []Action{SetValue(FieldICMPv6Type, 256)}},
		"set ipv6_src in ip":    {Protocol: ProtoIP, Actions: []Action{SetIPSrc(v6)}},
		"set ip_dst in ipv6":    {Protocol: ProtoIPv6, Actions: []Action{SetIPDst(v4)}},
		"move ipv6 in tcp":      {Protocol: ProtoTCP, Actions: []Action{Move{Src: Ref(FieldIPv6Src), Dst: Ref(FieldIPv6Dst)}}},
	} {
		assert.Error(t, f.Check(), name)
		assert.NotEmpty(t, f.String(), name)
	}
	ok := &Flow{Protocol: ProtoTCP6, Match: []Match{IPv6Dst(v6), TPDst(80)},
		Actions: []Action{CT{Commit: true, Zone: 1, NAT: &NAT{Dst: netip.AddrPortFrom(v6, 8080)}}}}
	require.NoError(t, ok.Check())
}

// The direct encoding of an IPv6 nat is libOpenflow's NXActionCTNAT with the IPv6 minimum (and
// the port range for a DNAT), byte for byte.
func TestDirectCTIPv6(t *testing.T) {
	for _, c := range []CT{
		{Commit: true, Zone: 64272, HasTable: true, Table: 42, NAT: &NAT{Dst: netip.MustParseAddrPort("[2001:db8:2::5]:8080")}},
		{Commit: true, Zone: 64274, NAT: &NAT{Src: netip.MustParseAddr("2001:db8::11")}},
		{Commit: true, Zone: 64256, HasTable: true, Table: 75, NAT: &NAT{Src: netip.MustParseAddr("2001:db8::11"), SrcPortMin: 1536, SrcPortMax: 2047}},
	} {
		ct := of13.NewNXActionConnTrack()
		ct.Commit()
		if c.HasTable {
			ct.Table(c.Table)
		}
		ct.ZoneImm(c.Zone)
		nat := of13.NewNXActionCTNAT()
		if c.NAT.Dst.IsValid() {
			require.NoError(t, nat.SetDNAT())
			nat.SetRangeIPv6Min(c.NAT.Dst.Addr().AsSlice())
			p := c.NAT.Dst.Port()
			nat.SetRangeProtoMin(&p)
			nat.SetRangeProtoMax(&p)
		} else {
			require.NoError(t, nat.SetSNAT())
			nat.SetRangeIPv6Min(c.NAT.Src.AsSlice())
			if c.NAT.SrcPortMin != 0 {
				lo, hi := c.NAT.SrcPortMin, c.NAT.SrcPortMax
				nat.SetRangeProtoMin(&lo)
				nat.SetRangeProtoMax(&hi)
			}
		}
		ct.AddAction(nat)
		want, err := ct.MarshalBinary()
		require.NoError(t, err)
		got, err := appendAction(nil, c)
		require.NoError(t, err)
		assert.Equal(t, want, got, text(c))
	}
}

// The IPv6 underlay's tunnel fields: tun_ipv6_src matches and tun_ipv6_dst set_field render as
// ovs-ofctl(8) writes them, hold only IPv6 addresses, need no IPv6 protocol (an IPv4 inner packet
// over an IPv6 underlay), and encode as the 16-byte NXM_NX_TUN_IPV6_SRC / _DST TLVs.
func TestTunnelIPv6Fields(t *testing.T) {
	a := netip.MustParseAddr("2001:db8:0:2::12")
	v4 := netip.MustParseAddr("192.0.2.12")
	assert.Equal(t, "tun_ipv6_src=2001:db8:0:2::12", text(TunIPv6Src(a)))
	assert.Equal(t, "tun_ipv6_src=2001:db8:0:2::12", text(TunSrcAddr(a)))
	assert.Equal(t, "tun_src=192.0.2.12", text(TunSrcAddr(v4)))
	assert.Equal(t, "set_field:2001:db8:0:2::12->tun_ipv6_dst", text(SetTunIPv6Dst(a)))
	assert.Equal(t, "set_field:2001:db8:0:2::12->tun_ipv6_dst", text(SetTunDstAddr(a)))
	assert.Equal(t, "set_field:192.0.2.12->tun_dst", text(SetTunDstAddr(v4)))
	assert.Equal(t, "move:NXM_NX_TUN_IPV6_SRC[]->NXM_NX_CT_LABEL[0..127]", text(Move{Src: Ref(FieldTunIPv6Src), Dst: Bits(FieldCTLabel, 0, 127)}))
	assert.Equal(t, uint16(128), FieldTunIPv6Dst.Bits())
	for _, p := range []Protocol{ProtoNone, ProtoIP, ProtoTCP, ProtoUDP6, ProtoIPv6} {
		f := Flow{Table: 0, Priority: 100, Protocol: p, Match: []Match{TunIPv6Src(a), TunID(2)},
			Actions: []Action{SetTunIPv6Dst(a), Move{Src: Bits(FieldCTLabel, 0, 127), Dst: Ref(FieldTunIPv6Dst)}, Output{Port: 2}}}
		require.NoError(t, f.Check(), f.String())
		_, body, err := FlowMod{Command: FlowAdd, Flow: &f}.Encode()
		require.NoError(t, err, f.String())
		fields, lens := matchFields(t, body)
		i := slices.Index(fields, uint16(1)<<8|109) // OXM class NXM_1, field 109: NXM_NX_TUN_IPV6_SRC
		require.GreaterOrEqual(t, i, 0, "%s: %x", f.String(), fields)
		assert.Equal(t, byte(16), lens[i])
	}
	bad := Flow{Table: 0, Priority: 100, Protocol: ProtoIP, Match: []Match{TunIPv6Src(v4)}, Actions: []Action{Output{Port: 1}}}
	assert.Error(t, bad.Check(), "an IPv4 address in tun_ipv6_src")
	bad = Flow{Table: 0, Priority: 100, Protocol: ProtoIP, Actions: []Action{SetTunIPv6Dst(v4)}}
	assert.Error(t, bad.Check(), "an IPv4 address in tun_ipv6_dst")
}
