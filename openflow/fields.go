// Package openflow holds typed OpenFlow 1.5 values with the Nicira (NXM) extensions Open vSwitch
// implements: match fields with optional masks, actions, flow mods and group mods with their
// buckets. Each value renders two ways: the ovs-ofctl(8) text (the flow and group syntax of
// ovs-ofctl's "bundle" file, what the agent's golden files hold and what the ovs-ofctl fallback
// reads) and the OpenFlow 1.5 wire encoding OVS 3.1 accepts (Encode), which the agent sends on
// its own connection.
//
// Both families are covered: the IPv6 protocols (ProtoIPv6, ProtoTCP6, ...; Protocol.V6 maps an
// IPv4 one to its twin), fields (ipv6_src, ipv6_dst, ICMPv6, Neighbor Discovery) and ct nat
// addresses; the family-generic IPSrc, IPDst, SetIPSrc and SetIPDst pick the field by address.
// Tunnel fields (tun_src, tun_dst) are IPv4: the underlay is.
//
// The package does no I/O and imports nothing of this module. Field and action semantics are
// those of ovs-fields(7) and ovs-actions(7); message layouts are those of the OpenFlow 1.5.1
// specification (ofp_flow_mod, ofp15_group_mod, ofp15_bucket) and OVS's Nicira extensions
// (nx_action_conntrack, nx_action_nat, nx_action_learn, nx_action_set_tunnel,
// ntr_group_prop_selection_method). The actions of every Service bucket and most flows (ct with
// nat and exec, move, output, group) are appended directly (direct.go), and so are the flow
// mod, its OXM/NXM match TLVs (headers from libOpenflow's field table, looked up once per
// name) and its instructions, and the group mod with its selection-method property (encode.go);
// the other actions (load, set_field, learn, output to a field, set_tunnel) are built with
// libOpenflow's OpenFlow 1.3 structures, whose encodings 1.5 shares. libOpenflow stays for those
// because its encodings are the ones TestNativeEquivalence proved against ovs-ofctl; flows'
// TestWireOracle pins every byte, so any part can be replaced by a direct encoding with that
// check (as the flow mod was).
package openflow

import (
	"fmt"
	"strconv"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// Field is a packet or metadata field as ovs-fields(7) names it.
type Field uint8

// Fields the pipeline matches on, sets, moves or loads.
const (
	FieldInPort   Field = iota + 1 // in_port: 16 bits as NXM_OF_IN_PORT, 32 bits as OXM_OF_IN_PORT
	FieldEthSrc                    // eth_src (dl_src), 48 bits
	FieldEthDst                    // eth_dst (dl_dst), 48 bits
	FieldEthType                   // eth_type (dl_type), 16 bits
	FieldIPProto                   // ip_proto (nw_proto), 8 bits
	FieldIPv4Src                   // ip_src (nw_src), 32 bits
	FieldIPv4Dst                   // ip_dst (nw_dst), 32 bits
	FieldIPFrag                    // nw_frag, 2 bits
	FieldARPOp                     // arp_op, 16 bits
	FieldARPSPA                    // arp_spa, 32 bits
	FieldARPTPA                    // arp_tpa, 32 bits
	FieldARPSHA                    // arp_sha, 48 bits
	FieldARPTHA                    // arp_tha, 48 bits
	FieldTCPSrc                    // tcp_src, 16 bits
	FieldTCPDst                    // tcp_dst, 16 bits
	FieldUDPSrc                    // udp_src, 16 bits
	FieldUDPDst                    // udp_dst, 16 bits
	FieldTCPFlags                  // tcp_flags, 12 bits
	FieldICMPType                  // icmp_type, 8 bits
	FieldCTState                   // ct_state, 32 bits
	FieldCTMark                    // ct_mark, 32 bits
	FieldCTLabel                   // ct_label, 128 bits
	FieldTunID                     // tun_id, 64 bits
	FieldTunSrc                    // tun_src, 32 bits
	FieldTunDst                    // tun_dst, 32 bits
	FieldReg0                      // reg0..reg15 follow, 32 bits each
)

// IPv6 fields (numbered after the registers, so the fields above keep their values). Their
// prerequisites are those of ovs-fields(7): an IPv6 protocol (ProtoIPv6, ProtoTCP6, ProtoUDP6,
// ProtoICMP6) for ipv6_src and ipv6_dst, icmp6 for icmpv6_type and icmpv6_code, and icmp6 with
// icmpv6_type 135 (Neighbor Solicitation) or 136 (Neighbor Advertisement) for nd_target, nd_sll
// (135 only) and nd_tll (136 only); nd_reserved and nd_options_type (OVS 2.11+) are of an NS or
// an NA, and are encoded as OXM class 0x1000 (they have no NXM name: NXM() names the OXM).
const (
	FieldIPv6Src       Field = FieldReg0 + 16 + iota // ipv6_src, 128 bits (NXM_NX_IPV6_SRC, OXM_OF_IPV6_SRC)
	FieldIPv6Dst                                     // ipv6_dst, 128 bits (NXM_NX_IPV6_DST, OXM_OF_IPV6_DST)
	FieldICMPv6Type                                  // icmpv6_type, 8 bits
	FieldICMPv6Code                                  // icmpv6_code, 8 bits
	FieldNDTarget                                    // nd_target, 128 bits: the ND target address
	FieldNDSLL                                       // nd_sll, 48 bits: the source link-layer address option of an NS
	FieldNDTLL                                       // nd_tll, 48 bits: the target link-layer address option of an NA
	FieldNDReserved                                  // nd_reserved, 32 bits: an NA's flags (R 0x80000000, S 0x40000000, O 0x20000000), the rest reserved
	FieldNDOptionsType                               // nd_options_type, 8 bits: the ND option's type (1 source, 2 target link-layer address)
	FieldTunIPv6Src                                  // tun_ipv6_src, 128 bits: the tunnel's outer IPv6 source (NXM_NX_TUN_IPV6_SRC)
	FieldTunIPv6Dst                                  // tun_ipv6_dst, 128 bits: the tunnel's outer IPv6 destination (NXM_NX_TUN_IPV6_DST)
	fieldEnd                                         // one past the last field
)

// Reg returns register field reg0..reg15 (n 0..15).
func Reg(n int) Field {
	if n < 0 || n > 15 {
		panic(fmt.Sprintf("openflow: no register reg%d", n))
	}
	return FieldReg0 + Field(n)
}

type fieldInfo struct {
	name string // ovs-fields(7) name
	nxm  string // NXM name (actions, learn specs, refs)
	oxm  string // name of the match TLV the encoder writes (libOpenflow's FindFieldHeaderByName)
	bits uint16 // width of the NXM field
}

var fieldInfos = [...]fieldInfo{
	FieldInPort:   {"in_port", "NXM_OF_IN_PORT", "OXM_OF_IN_PORT", 16},
	FieldEthSrc:   {"eth_src", "NXM_OF_ETH_SRC", "OXM_OF_ETH_SRC", 48},
	FieldEthDst:   {"eth_dst", "NXM_OF_ETH_DST", "OXM_OF_ETH_DST", 48},
	FieldEthType:  {"eth_type", "NXM_OF_ETH_TYPE", "OXM_OF_ETH_TYPE", 16},
	FieldIPProto:  {"nw_proto", "NXM_OF_IP_PROTO", "OXM_OF_IP_PROTO", 8},
	FieldIPv4Src:  {"ip_src", "NXM_OF_IP_SRC", "OXM_OF_IPV4_SRC", 32},
	FieldIPv4Dst:  {"ip_dst", "NXM_OF_IP_DST", "OXM_OF_IPV4_DST", 32},
	FieldIPFrag:   {"nw_frag", "NXM_NX_IP_FRAG", "NXM_NX_IP_FRAG", 8},
	FieldARPOp:    {"arp_op", "NXM_OF_ARP_OP", "OXM_OF_ARP_OP", 16},
	FieldARPSPA:   {"arp_spa", "NXM_OF_ARP_SPA", "OXM_OF_ARP_SPA", 32},
	FieldARPTPA:   {"arp_tpa", "NXM_OF_ARP_TPA", "OXM_OF_ARP_TPA", 32},
	FieldARPSHA:   {"arp_sha", "NXM_NX_ARP_SHA", "NXM_NX_ARP_SHA", 48},
	FieldARPTHA:   {"arp_tha", "NXM_NX_ARP_THA", "NXM_NX_ARP_THA", 48},
	FieldTCPSrc:   {"tcp_src", "NXM_OF_TCP_SRC", "OXM_OF_TCP_SRC", 16},
	FieldTCPDst:   {"tcp_dst", "NXM_OF_TCP_DST", "OXM_OF_TCP_DST", 16},
	FieldUDPSrc:   {"udp_src", "NXM_OF_UDP_SRC", "OXM_OF_UDP_SRC", 16},
	FieldUDPDst:   {"udp_dst", "NXM_OF_UDP_DST", "OXM_OF_UDP_DST", 16},
	FieldTCPFlags: {"tcp_flags", "NXM_NX_TCP_FLAGS", "NXM_NX_TCP_FLAGS", 16},
	FieldICMPType: {"icmp_type", "NXM_OF_ICMP_TYPE", "OXM_OF_ICMPV4_TYPE", 8},
	FieldCTState:  {"ct_state", "NXM_NX_CT_STATE", "NXM_NX_CT_STATE", 32},
	FieldCTMark:   {"ct_mark", "NXM_NX_CT_MARK", "NXM_NX_CT_MARK", 32},
	FieldCTLabel:  {"ct_label", "NXM_NX_CT_LABEL", "NXM_NX_CT_LABEL", 128},
	FieldTunID:    {"tun_id", "NXM_NX_TUN_ID", "NXM_NX_TUN_ID", 64},
	FieldTunSrc:   {"tun_src", "NXM_NX_TUN_IPV4_SRC", "NXM_NX_TUN_IPV4_SRC", 32},
	FieldTunDst:   {"tun_dst", "NXM_NX_TUN_IPV4_DST", "NXM_NX_TUN_IPV4_DST", 32},

	FieldIPv6Src:    {"ipv6_src", "NXM_NX_IPV6_SRC", "OXM_OF_IPV6_SRC", 128},
	FieldIPv6Dst:    {"ipv6_dst", "NXM_NX_IPV6_DST", "OXM_OF_IPV6_DST", 128},
	FieldICMPv6Type: {"icmpv6_type", "NXM_NX_ICMPV6_TYPE", "OXM_OF_ICMPV6_TYPE", 8},
	FieldICMPv6Code: {"icmpv6_code", "NXM_NX_ICMPV6_CODE", "OXM_OF_ICMPV6_CODE", 8},
	FieldNDTarget:   {"nd_target", "NXM_NX_ND_TARGET", "OXM_OF_IPV6_ND_TARGET", 128},
	FieldNDSLL:      {"nd_sll", "NXM_NX_ND_SLL", "OXM_OF_IPV6_ND_SLL", 48},
	FieldNDTLL:      {"nd_tll", "NXM_NX_ND_TLL", "OXM_OF_IPV6_ND_TLL", 48},
	// No NXM: OVS (2.11+) has these two as OXMs of class 0x1000 only (ovs-fields(7)).
	FieldNDReserved:    {"nd_reserved", "ERICOXM_OF_ICMPV6_ND_RESERVED", "ERICOXM_OF_ICMPV6_ND_RESERVED", 32},
	FieldNDOptionsType: {"nd_options_type", "ERICOXM_OF_ICMPV6_ND_OPTIONS_TYPE", "ERICOXM_OF_ICMPV6_ND_OPTIONS_TYPE", 8},
	// The IPv6 underlay's tunnel metadata (ovs-fields(7) "Tunnel Fields"): no prerequisites;
	// set on a packet received over an IPv6 tunnel, tun_src and tun_dst are 0 then.
	FieldTunIPv6Src: {"tun_ipv6_src", "NXM_NX_TUN_IPV6_SRC", "NXM_NX_TUN_IPV6_SRC", 128},
	FieldTunIPv6Dst: {"tun_ipv6_dst", "NXM_NX_TUN_IPV6_DST", "NXM_NX_TUN_IPV6_DST", 128},
}

// ericFields are the headers of the fields libOpenflow's table lacks: OXM class 0x1000
// (ERICOXM_OF_), field 1 nd_reserved (4 bytes), field 2 nd_options_type (1 byte).
var ericFields = map[string]of13.MatchField{
	"ERICOXM_OF_ICMPV6_ND_RESERVED":     {Class: 0x1000, Field: 1, Length: 4},
	"ERICOXM_OF_ICMPV6_ND_OPTIONS_TYPE": {Class: 0x1000, Field: 2, Length: 1},
}

// findField is libOpenflow's FindFieldHeaderByName with the fields of ericFields added.
func findField(name string, hasMask bool) (*of13.MatchField, error) {
	if f, ok := ericFields[name]; ok {
		if hasMask {
			return nil, fmt.Errorf("field %s is not maskable", name)
		}
		return &f, nil
	}
	return of13.FindFieldHeaderByName(name, hasMask)
}

func (f Field) info() fieldInfo {
	if f >= FieldReg0 && f < FieldReg0+16 {
		n := strconv.Itoa(int(f - FieldReg0))
		return fieldInfo{"reg" + n, "NXM_NX_REG" + n, "NXM_NX_REG" + n, 32}
	}
	if int(f) < len(fieldInfos) && fieldInfos[f].name != "" {
		return fieldInfos[f]
	}
	panic(fmt.Sprintf("openflow: unknown field %d", uint8(f)))
}

// String is the field's ovs-fields(7) name (reg0, ct_label, tcp_src...).
func (f Field) String() string { return f.info().name }

// NXM is the field's NXM name (NXM_NX_REG0, NXM_OF_ETH_SRC...), as load, move and learn write it.
func (f Field) NXM() string { return f.info().nxm }

// Bits is the field's width in bits as its NXM form has it.
func (f Field) Bits() uint16 { return f.info().bits }

// FieldRef is bits Start..End (inclusive) of a field, or the whole field (Whole), rendered in
// NXM syntax: NXM_NX_REG0[0..3], NXM_OF_ETH_SRC[] (ovs-actions(7) "Field Specifications").
type FieldRef struct {
	Field      Field
	Start, End uint16
	Whole      bool
}

// Ref is the whole of f.
func Ref(f Field) FieldRef { return FieldRef{Field: f, Start: 0, End: f.Bits() - 1, Whole: true} }

// Bits is bits start..end (inclusive) of f; the whole field is written NAME[] all the same when
// start..end covers it only if Ref is used.
func Bits(f Field, start, end uint16) FieldRef {
	if start > end || end >= f.Bits() {
		panic(fmt.Sprintf("openflow: bad bit range %s[%d..%d]", f.NXM(), start, end))
	}
	return FieldRef{Field: f, Start: start, End: end}
}

// NBits is the number of bits the reference covers.
func (r FieldRef) NBits() uint16 { return r.End - r.Start + 1 }

// AppendText appends the NXM text of the reference.
func (r FieldRef) AppendText(b []byte) []byte {
	b = append(b, r.Field.NXM()...)
	if r.Whole {
		return append(b, "[]"...)
	}
	b = append(b, '[')
	b = strconv.AppendUint(b, uint64(r.Start), 10)
	b = append(b, ".."...)
	b = strconv.AppendUint(b, uint64(r.End), 10)
	return append(b, ']')
}

// String is the NXM text of the reference.
func (r FieldRef) String() string { return string(r.AppendText(nil)) }
