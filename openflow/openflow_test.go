package openflow

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	of13 "github.com/contiv/libOpenflow/openflow13"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func text(a interface{ AppendText([]byte) []byte }) string { return string(a.AppendText(nil)) }

// Every match and action renders as ovs-ofctl(8) writes it (the golden files' text).
func TestText(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:c0:00:02:0b")
	a := netip.MustParseAddr("192.0.2.11")
	for want, m := range map[string]Match{
		"in_port=3":                         InPort(3),
		"in_port=LOCAL":                     InPort(PortLocal),
		"dl_src=02:00:c0:00:02:0b":          EthSrc(mac),
		"dl_dst=02:00:c0:00:02:0b":          EthDst(mac),
		"nw_src=192.0.2.11":                 IPv4Src(a),
		"nw_dst=10.244.0.0/16":              IPv4DstPrefix(netip.MustParsePrefix("10.244.0.0/16")),
		"nw_src=198.51.100.10/32":           IPv4SrcPrefix(netip.MustParsePrefix("198.51.100.10/32")),
		"arp_tpa=10.244.1.0/24":             ARPTPAPrefix(netip.MustParsePrefix("10.244.1.0/24")),
		"arp_op=1":                          ARPOp(1),
		"tp_dst=80":                         TPDst(80),
		"icmp_type=3":                       ICMPType(3),
		"ct_state=+trk+est-rpl":             CTState(CTTracked.Set(), CTEstablished.Set(), CTReply.Unset()),
		"tcp_flags=+syn-ack":                TCPFlags(TCPSyn.Set(), TCPAck.Unset()),
		"nw_frag=yes":                       IPFrag(FragYes),
		"reg0=0x1/0xf":                      RegMatch(Reg(0), 1, 0xf),
		"reg3=0xc0000232":                   RegExact(Reg(3), 0xc0000232),
		"ct_mark=0x00000002/0x0000000f":     CTMark(2, 0xf),
		"ct_label=0x0/0xffffffff":           CTLabel(U128{}, U128{Lo: 0xffffffff}),
		"ct_label=0x10000000000000000/0x1f": CTLabel(U128{Hi: 1, Lo: 0}, U128{Lo: 0x1f}),
		"tun_id=0x5":                        TunID(5),
		"tun_src=192.0.2.11":                TunSrc(a),
	} {
		assert.Equal(t, want, text(m))
	}
	dst := netip.MustParseAddrPort("10.244.2.5:8080")
	for want, act := range map[string]Action{
		"output:2":                    Output{Port: 2},
		"LOCAL":                       Output{Port: PortLocal},
		"IN_PORT":                     Output{Port: PortInPort},
		"normal":                      Output{Port: PortNormal},
		"output:NXM_NX_REG1[]":        OutputField{Src: Ref(Reg(1))},
		"goto_table:40":               GotoTable{Table: 40},
		"group:7":                     Group{ID: 7},
		"resubmit(,43)":               Resubmit{Table: 43},
		"load:0x2->NXM_OF_ARP_OP[]":   Load{Value: 2, Dst: Ref(FieldARPOp)},
		"load:0x4->NXM_NX_REG0[0..3]": Load{Value: 4, Dst: Bits(Reg(0), 0, 3)},
		"move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47]": Move{Src: Ref(FieldEthSrc), Dst: Bits(FieldCTLabel, 0, 47)},
		"set_field:192.0.2.11->tun_dst":                 SetTunDst(a),
		"set_field:0->tcp_dst":                          SetTCPDst(0),
		"mod_dl_src:02:00:c0:00:02:0b":                  ModDLSrc{MAC: mac},
		"set_tunnel:0x3":                                SetTunnel{ID: 3},
		"drop":                                          Drop{Reason: "r"},
		"ct(table=41,zone=64256,nat)":                   CT{HasTable: true, Table: 41, Zone: 64256, NAT: &NAT{}},
		"ct(commit,table=42,zone=64256,nat(dst=10.244.2.5:8080),exec(move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47]))": CT{Commit: true, HasTable: true, Table: 42, Zone: 64256, NAT: &NAT{Dst: dst},
			Exec: []Action{Move{Src: Ref(FieldEthSrc), Dst: Bits(FieldCTLabel, 0, 47)}}},
		"ct(commit,zone=64258,nat(src=192.0.2.11))": CT{Commit: true, Zone: 64258, NAT: &NAT{Src: a}},
		"ct(commit,table=75,zone=64256,nat(src=192.0.2.11:1024-1535))": CT{Commit: true, HasTable: true, Table: 75, Zone: 64256,
			NAT: &NAT{Src: a, SrcPortMin: 1024, SrcPortMax: 1535}},
		"learn(table=10,priority=610,hard_timeout=2,cookie=0x5c0d000000000000,eth_type=0x800,nw_proto=6,NXM_OF_IN_PORT[]=NXM_NX_REG1[0..15],NXM_OF_TCP_SRC[]=0,load:NXM_OF_TCP_DST[]->NXM_OF_TCP_SRC[],load:0x3->NXM_NX_TUN_ID[],output:NXM_OF_IN_PORT[])": Learn{
			Table: 10, Priority: 610, HardTimeout: 2, Cookie: 0x5c0d000000000000, Specs: []LearnSpec{
				{Kind: LearnMatch, Dst: Ref(FieldEthType), Value: 0x800},
				{Kind: LearnMatch, Dst: Ref(FieldIPProto), Value: 6},
				{Kind: LearnMatch, Dst: Ref(FieldInPort), Src: Bits(Reg(1), 0, 15), FromField: true},
				{Kind: LearnMatch, Dst: Ref(FieldTCPSrc), Value: 0},
				{Kind: LearnLoad, Dst: Ref(FieldTCPSrc), Src: Ref(FieldTCPDst), FromField: true},
				{Kind: LearnLoad, Dst: Ref(FieldTunID), Value: 3},
				{Kind: LearnOutput, Src: Ref(FieldInPort)},
			}},
	} {
		assert.Equal(t, want, text(act))
	}
}

// Flow and group messages render as the bundle lines flows.Plan writes.
func TestMessageText(t *testing.T) {
	f := &Flow{Table: 41, Priority: 100, Cookie: 0x5c10000000000001, Protocol: ProtoTCP,
		Match:   []Match{CTState(CTTracked.Set(), CTNew.Set()), IPv4Dst(netip.MustParseAddr("192.0.2.11")), TPDst(30080)},
		Actions: []Action{Group{ID: 9}}}
	assert.Equal(t, "flow add priority=100,tcp,ct_state=+trk+new,nw_dst=192.0.2.11,tp_dst=30080,table=41,idle_timeout=0,cookie=0x5c10000000000001,actions=group:9",
		text(FlowMod{Command: FlowAdd, Flow: f}))
	assert.Equal(t, "flow modify_strict priority=0,table=0,idle_timeout=0,actions=drop",
		text(FlowMod{Command: FlowModifyStrict, Flow: &Flow{Actions: []Action{Drop{}}}}))
	assert.Equal(t, "flow delete cookie=0x5c10000000000001/-1", text(DeleteCookie{Cookie: 0x5c10000000000001}))
	assert.Equal(t, "group delete group_id=9", text(DeleteGroup{ID: 9}))
	g := &GroupDesc{ID: 9, Type: GroupSelect, SelectionFields: []Field{FieldIPv4Src, FieldTCPSrc},
		Buckets: []Bucket{{ID: 1, Weight: 100, Actions: []Action{Output{Port: 2}}}, {ID: 2, Weight: 100, Actions: []Action{Output{Port: 3}}}}}
	assert.Equal(t, "group add_or_mod group_id=9,type=select,selection_method=hash,fields(ip_src,tcp_src),bucket=bucket_id:1,weight:100,actions=output:2",
		text(GroupMod{Command: GroupAddOrMod, Group: g, Buckets: g.Buckets[:1]}))
	assert.Equal(t, "group insert_bucket group_id=9,command_bucket_id=last,bucket=bucket_id:2,weight:100,actions=output:3",
		text(GroupMod{Command: GroupInsertBuckets, Group: g, Buckets: g.Buckets[1:]}))
	assert.Equal(t, "group_id=9,type=select,selection_method=hash,fields(ip_src,tcp_src),bucket=bucket_id:1,weight:100,actions=output:2,bucket=bucket_id:2,weight:100,actions=output:3", g.String())
	// A hash basis (selection_method_param): in the text after the method, in the property's
	// 64 bits at offset 32 on the wire.
	g.SelectionParam = 166312
	assert.Equal(t, "group add_or_mod group_id=9,type=select,selection_method=hash,selection_method_param=166312,fields(ip_src,tcp_src),bucket=bucket_id:1,weight:100,actions=output:2",
		text(GroupMod{Command: GroupAddOrMod, Group: g, Buckets: g.Buckets[:1]}))
	_, body, err := GroupMod{Command: GroupAddOrMod, Group: g, Buckets: g.Buckets[:1]}.Encode()
	require.NoError(t, err)
	assert.Contains(t, string(body), "hash\x00", "the method name")
	param := make([]byte, 8)
	binary.BigEndian.PutUint64(param, 166312)
	assert.Contains(t, string(body), string(param), "the basis")
}

// The wire encoding: a flow mod's header fields, its match TLVs in prerequisite order whatever
// the text order, and the refusals.
func TestEncode(t *testing.T) {
	f := &Flow{Table: 41, Priority: 100, Cookie: 0x5c10000000000001, Protocol: ProtoTCP,
		Match:   []Match{TPDst(80), IPv4Dst(netip.MustParseAddr("192.0.2.11")), InPort(1)},
		Actions: []Action{Output{Port: 2}, GotoTable{Table: 42}}}
	typ, body, err := FlowMod{Command: FlowAdd, Flow: f}.Encode()
	require.NoError(t, err)
	assert.Equal(t, uint8(TypeFlowMod), typ)
	assert.Equal(t, uint64(0x5c10000000000001), binary.BigEndian.Uint64(body[0:]), "cookie")
	assert.Equal(t, byte(41), body[16], "table")
	assert.Equal(t, byte(0), body[17], "command add")
	assert.Equal(t, uint16(100), binary.BigEndian.Uint16(body[22:]), "priority")
	// ofp_match at offset 40: type 1 (OXM), then in_port, eth_type, ip_proto, ipv4_dst, tcp_dst.
	var fields []byte
	for o := 44; o+4 <= 40+int(binary.BigEndian.Uint16(body[42:])); {
		fields = append(fields, body[o+2]>>1)
		o += 4 + int(body[o+3])
	}
	assert.Equal(t, []byte{0, 5, 10, 12, 14}, fields, "OXM fields in prerequisite order")

	_, _, err = FlowMod{Command: FlowModifyStrict, Flow: f}.Encode()
	require.NoError(t, err)
	for name, bad := range map[string]*Flow{
		"tp_dst without tcp/udp":         {Match: []Match{TPDst(1)}, Actions: []Action{Drop{}}},
		"field twice":                    {Match: []Match{InPort(1), InPort(2)}, Actions: []Action{Drop{}}},
		"drop with others":               {Actions: []Action{Output{Port: 1}, Drop{}}},
		"goto not last":                  {Actions: []Action{GotoTable{Table: 1}, Output{Port: 1}}},
		"move widths":                    {Actions: []Action{Move{Src: Ref(FieldEthSrc), Dst: Ref(Reg(0))}}},
		"load too wide":                  {Actions: []Action{Load{Value: 0x10, Dst: Bits(Reg(0), 0, 3)}}},
		"nat port range without address": {Actions: []Action{CT{Commit: true, Zone: 1, NAT: &NAT{SrcPortMin: 1024, SrcPortMax: 2047}}}},
		"nat port range reversed":        {Actions: []Action{CT{Commit: true, Zone: 1, NAT: &NAT{Src: netip.MustParseAddr("10.0.0.1"), SrcPortMin: 2047, SrcPortMax: 1024}}}},
		"nat dst without commit":         {Actions: []Action{CT{Zone: 1, NAT: &NAT{Dst: netip.MustParseAddrPort("10.0.0.1:80")}}}},
	} {
		_, _, err := FlowMod{Command: FlowAdd, Flow: bad}.Encode()
		assert.Error(t, err, name)
	}
	typ, body, err = DeleteGroup{ID: 9}.Encode()
	require.NoError(t, err)
	assert.Equal(t, uint8(TypeGroupMod), typ)
	assert.Equal(t, []byte{0, 2, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, body)
	_, _, err = DeleteCookie{Cookie: 1}.Encode()
	require.NoError(t, err)
}

// Values of the wrong family or length are refused by Check and Encode, never by a panic.
func TestCheck(t *testing.T) {
	v6 := netip.MustParseAddr("2001:db8::1")
	long, _ := net.ParseMAC("00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10:00:00:00:01")
	for name, f := range map[string]*Flow{
		"v6 nw_dst":         {Protocol: ProtoIP, Match: []Match{IPv4Dst(v6)}, Actions: []Action{Drop{}}},
		"v6 tun_src":        {Match: []Match{TunSrc(v6)}, Actions: []Action{Drop{}}},
		"long dl_src":       {Match: []Match{EthSrc(long)}, Actions: []Action{Drop{}}},
		"v6 set tun_dst":    {Actions: []Action{SetTunDst(v6)}},
		"long mod_dl_dst":   {Actions: []Action{ModDLDst{MAC: long}}},
		"tcp_flags on udp":  {Protocol: ProtoUDP, Match: []Match{TCPFlags(TCPSyn.Set())}, Actions: []Action{Drop{}}},
		"exec needs commit": {Actions: []Action{CT{Zone: 1, Exec: []Action{Load{Value: 1, Dst: Bits(FieldCTMark, 0, 3)}}}}},
	} {
		assert.Error(t, f.Check(), name)
		_, _, err := FlowMod{Command: FlowAdd, Flow: f}.Encode()
		assert.Error(t, err, name)
		assert.NotEmpty(t, f.String(), name)
	}
}

// Resubmit's direct encoding is libOpenflow's NXActionResubmitTable with in_port OFPP_IN_PORT,
// what ovs-ofctl sends for resubmit(,N).
func TestDirectResubmit(t *testing.T) {
	want, err := of13.NewNXActionResubmitTableAction(of13.OFPP_IN_PORT, 43).MarshalBinary()
	require.NoError(t, err)
	got, err := appendAction(nil, Resubmit{Table: 43})
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// The direct encodings of ct and nat are libOpenflow's NXActionConnTrack and NXActionCTNAT,
// byte for byte, for every shape (the golden files hold most of them; TestWireOracle pins those).
func TestDirectCT(t *testing.T) {
	ref := func(c CT) []byte {
		ct := of13.NewNXActionConnTrack()
		if c.Commit {
			ct.Commit()
		}
		if c.HasTable {
			ct.Table(c.Table)
		}
		ct.ZoneImm(c.Zone)
		if c.NAT != nil {
			nat := of13.NewNXActionCTNAT()
			switch {
			case c.NAT.Dst.IsValid():
				require.NoError(t, nat.SetDNAT())
				a := c.NAT.Dst.Addr().As4()
				nat.SetRangeIPv4Min(a[:])
				p := c.NAT.Dst.Port()
				nat.SetRangeProtoMin(&p)
				nat.SetRangeProtoMax(&p)
			case c.NAT.Src.IsValid():
				require.NoError(t, nat.SetSNAT())
				a := c.NAT.Src.As4()
				nat.SetRangeIPv4Min(a[:])
				if c.NAT.SrcPortMin != 0 {
					lo, hi := c.NAT.SrcPortMin, c.NAT.SrcPortMax
					nat.SetRangeProtoMin(&lo)
					nat.SetRangeProtoMax(&hi)
				}
			}
			ct.AddAction(nat)
		}
		for _, a := range c.Exec {
			e, err := encodeAction(a)
			require.NoError(t, err)
			ct.AddAction(e)
		}
		b, err := ct.MarshalBinary()
		require.NoError(t, err)
		return b
	}
	mv := Move{Src: Ref(FieldEthSrc), Dst: Bits(FieldCTLabel, 0, 47)}
	ld := Load{Value: 2, Dst: Bits(FieldCTMark, 0, 3)}
	for _, c := range []CT{
		{Zone: 1},
		{Zone: 64256, HasTable: true, Table: 41, NAT: &NAT{}},
		{Commit: true, Zone: 64256, HasTable: true, Table: 42, NAT: &NAT{Dst: netip.MustParseAddrPort("10.244.2.5:8080")}, Exec: []Action{mv}},
		{Commit: true, Zone: 64258, NAT: &NAT{Src: netip.MustParseAddr("192.0.2.51")}, Exec: []Action{ld, mv}},
		{Commit: true, Zone: 7, Exec: []Action{ld}},
		{Commit: true, Zone: 64256, HasTable: true, Table: 75, NAT: &NAT{Src: netip.MustParseAddr("10.244.2.5"), SrcPortMin: 1024, SrcPortMax: 1535}, Exec: []Action{ld}},
		{Commit: true, HasTable: true, Table: 0, Zone: 0},
	} {
		got, err := appendAction([]byte{0xee}, c)
		require.NoError(t, err)
		assert.Equal(t, append([]byte{0xee}, ref(c)...), got, text(c))
	}
}
