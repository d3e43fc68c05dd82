package openflow

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
)

// Protocol is the ovs-fields(7) protocol shorthand a flow matches on (eth_type and ip_proto).
type Protocol uint8

// Protocols. The IPv6 ones are numbered after the IPv4 ones and ARP; V6 and V4 map a protocol
// to its twin of the other family, ForAddr to the twin of an address's family.
const (
	ProtoNone  Protocol = iota
	ProtoIP             // ip: eth_type=0x0800
	ProtoTCP            // tcp: ip, ip_proto=6
	ProtoUDP            // udp: ip, ip_proto=17
	ProtoICMP           // icmp: ip, ip_proto=1
	ProtoARP            // arp: eth_type=0x0806
	ProtoIPv6           // ipv6: eth_type=0x86dd
	ProtoTCP6           // tcp6: ipv6, ip_proto=6
	ProtoUDP6           // udp6: ipv6, ip_proto=17
	ProtoICMP6          // icmp6: ipv6, ip_proto=58 (ICMPv6, RFC 4443)
)

var protoInfos = [...]struct {
	name    string
	ethType int
	ipProto int
}{
	ProtoNone:  {"", -1, -1},
	ProtoIP:    {"ip", 0x0800, -1},
	ProtoTCP:   {"tcp", 0x0800, 6},
	ProtoUDP:   {"udp", 0x0800, 17},
	ProtoICMP:  {"icmp", 0x0800, 1},
	ProtoARP:   {"arp", 0x0806, -1},
	ProtoIPv6:  {"ipv6", 0x86dd, -1},
	ProtoTCP6:  {"tcp6", 0x86dd, 6},
	ProtoUDP6:  {"udp6", 0x86dd, 17},
	ProtoICMP6: {"icmp6", 0x86dd, 58},
}

// String is the shorthand ("tcp", "tcp6"), empty for ProtoNone.
func (p Protocol) String() string { return protoInfos[p].name }

// EthType is the protocol's eth_type (0x0800, 0x86dd, 0x0806), 0 for ProtoNone.
func (p Protocol) EthType() uint16 { return uint16(max(protoInfos[p].ethType, 0)) }

// IPProto is the protocol's ip_proto (6, 17, 1, 58), 0 when it matches none (ip, ipv6, arp).
func (p Protocol) IPProto() uint8 { return uint8(max(protoInfos[p].ipProto, 0)) }

// IsIPv6 reports an IPv6 protocol (ipv6, tcp6, udp6, icmp6).
func (p Protocol) IsIPv6() bool { return protoInfos[p].ethType == 0x86dd }

// IsIPv4 reports an IPv4 protocol (ip, tcp, udp, icmp).
func (p Protocol) IsIPv4() bool { return protoInfos[p].ethType == 0x0800 }

// IsTCP reports tcp or tcp6; IsUDP udp or udp6.
func (p Protocol) IsTCP() bool { return p == ProtoTCP || p == ProtoTCP6 }

// IsUDP reports udp or udp6.
func (p Protocol) IsUDP() bool { return p == ProtoUDP || p == ProtoUDP6 }

// V6 is the IPv6 twin of p: ip -> ipv6, tcp -> tcp6, udp -> udp6, icmp -> icmp6 (ICMPv6 is
// another protocol with other types: a flow matching icmp_type needs icmpv6_type instead); an
// IPv6 protocol is itself, ProtoNone and ProtoARP (no IPv6 twin; IPv6 resolves neighbors with
// ICMPv6) are ProtoNone.
func (p Protocol) V6() Protocol {
	switch p {
	case ProtoIP, ProtoIPv6:
		return ProtoIPv6
	case ProtoTCP, ProtoTCP6:
		return ProtoTCP6
	case ProtoUDP, ProtoUDP6:
		return ProtoUDP6
	case ProtoICMP, ProtoICMP6:
		return ProtoICMP6
	}
	return ProtoNone
}

// V4 is the IPv4 twin of p (the inverse of V6): an IPv4 protocol is itself, ProtoARP is
// ProtoARP, ProtoNone is ProtoNone.
func (p Protocol) V4() Protocol {
	switch p {
	case ProtoIPv6:
		return ProtoIP
	case ProtoTCP6:
		return ProtoTCP
	case ProtoUDP6:
		return ProtoUDP
	case ProtoICMP6:
		return ProtoICMP
	}
	return p
}

// ForAddr is p's twin of a's family: V4 for an IPv4 address, V6 for any other (an IPv4-mapped
// IPv6 address is IPv6, as netip.Addr.Is4 has it).
func (p Protocol) ForAddr(a netip.Addr) Protocol {
	if a.Is4() {
		return p.V4()
	}
	return p.V6()
}

// IPSrcField is the source address field of p's family: FieldIPv4Src (ip_src) for an IPv4
// protocol, FieldIPv6Src (ipv6_src) for an IPv6 one; 0 (no field) for ProtoNone and ProtoARP.
func (p Protocol) IPSrcField() Field {
	switch {
	case p.IsIPv4():
		return FieldIPv4Src
	case p.IsIPv6():
		return FieldIPv6Src
	}
	return 0
}

// IPDstField is the destination address field of p's family (ip_dst or ipv6_dst; see
// IPSrcField).
func (p Protocol) IPDstField() Field {
	switch {
	case p.IsIPv4():
		return FieldIPv4Dst
	case p.IsIPv6():
		return FieldIPv6Dst
	}
	return 0
}

// Reserved OpenFlow 1.1+ port numbers (ofp_port_no).
const (
	PortInPort uint32 = 0xfffffff8 // IN_PORT: the packet's input port
	PortNormal uint32 = 0xfffffffa // NORMAL: the L2 switch
	PortLocal  uint32 = 0xfffffffe // LOCAL: the bridge's internal port
)

// Match is one field of a flow's match, with its value and optional mask. It renders in
// ovs-ofctl(8) syntax (AppendText) and as the OXM/NXM TLV the encoder writes.
type Match interface {
	// AppendText appends "key=value" to b.
	AppendText(b []byte) []byte
	// Field is the field matched.
	Field() Field
	// tlv returns the libOpenflow field name, value and mask (nil: exact), network byte order;
	// proto is the flow's protocol (tp_src and tp_dst are TCP or UDP ports by it).
	tlv(proto Protocol) (name string, value, mask []byte, err error)
	// check is tlv's error without the encoding.
	check(proto Protocol) error
}

func (inPortMatch) check(Protocol) error { return nil }
func (m macMatch) check(proto Protocol) error {
	if len(m.mac) != 6 {
		return fmt.Errorf("%s: MAC %v is not 6 bytes", m.f, m.mac)
	}
	return m.checkProto(proto)
}
func (m macMatch) checkProto(proto Protocol) error {
	if (m.f == FieldNDSLL || m.f == FieldNDTLL) && proto != ProtoICMP6 {
		return fmt.Errorf("%s without icmp6", m.f)
	}
	return nil
}
func (m ipMatch) check(proto Protocol) error {
	if m.f.Bits() == 128 {
		if !m.p.IsValid() || !m.p.Addr().Is6() {
			return fmt.Errorf("%s: %v is no IPv6 address or prefix", m.f, m.p)
		}
		switch {
		case m.f == FieldTunIPv6Src:
			// Tunnel metadata: no prerequisites (an IPv4 or IPv6 inner packet, or none).
		case m.f == FieldNDTarget && proto != ProtoICMP6:
			return fmt.Errorf("nd_target without icmp6")
		case !proto.IsIPv6():
			return fmt.Errorf("%s without an IPv6 protocol (ipv6, tcp6, udp6, icmp6)", m.f)
		}
		return nil
	}
	if !m.p.IsValid() || !m.p.Addr().Is4() {
		return fmt.Errorf("%s: %v is no IPv4 address or prefix", m.f, m.p)
	}
	if (m.f == FieldIPv4Src || m.f == FieldIPv4Dst) && proto.IsIPv6() {
		return fmt.Errorf("%s with an IPv6 protocol (ipv6_src, ipv6_dst are its fields)", m.f)
	}
	return nil
}
func (m u16Match) check(proto Protocol) error {
	switch {
	case (m.f == FieldTCPSrc || m.f == FieldTCPDst) && !proto.IsTCP() && !proto.IsUDP():
		return fmt.Errorf("tp_src or tp_dst without tcp or udp")
	case (m.f == FieldICMPv6Type || m.f == FieldICMPv6Code) && proto != ProtoICMP6:
		return fmt.Errorf("%s without icmp6", m.f)
	}
	return nil
}
func (m flagsMatch) check(proto Protocol) error {
	if m.f == FieldTCPFlags && !proto.IsTCP() {
		return fmt.Errorf("tcp_flags without tcp")
	}
	return nil
}
func (fragMatch) check(Protocol) error  { return nil }
func (u32Match) check(Protocol) error   { return nil }
func (labelMatch) check(Protocol) error { return nil }
func (tunIDMatch) check(Protocol) error { return nil }

type inPortMatch uint32

// InPort matches the input port: in_port=N, in_port=LOCAL for PortLocal.
func InPort(port uint32) Match { return inPortMatch(port) }

func (m inPortMatch) Field() Field { return FieldInPort }
func (m inPortMatch) AppendText(b []byte) []byte {
	b = append(b, "in_port="...)
	if uint32(m) == PortLocal {
		return append(b, "LOCAL"...)
	}
	return strconv.AppendUint(b, uint64(m), 10)
}
func (m inPortMatch) tlv(Protocol) (string, []byte, []byte, error) {
	return "OXM_OF_IN_PORT", be32(uint32(m)), nil, nil
}

type macMatch struct {
	f   Field
	mac net.HardwareAddr
}

// EthSrc matches the Ethernet source (dl_src=MAC).
func EthSrc(mac net.HardwareAddr) Match { return newMAC(FieldEthSrc, mac) }

// EthDst matches the Ethernet destination (dl_dst=MAC).
func EthDst(mac net.HardwareAddr) Match { return newMAC(FieldEthDst, mac) }

// newMAC keeps a copy of mac; one that is not 6 bytes fails Check and Encode.
func newMAC(f Field, mac net.HardwareAddr) macMatch { return macMatch{f, slices.Clone(mac)} }

// NDSLL matches the source link-layer address option of a Neighbor Solicitation (nd_sll=MAC;
// icmp6 with icmpv6_type=135).
func NDSLL(mac net.HardwareAddr) Match { return newMAC(FieldNDSLL, mac) }

// NDTLL matches the target link-layer address option of a Neighbor Advertisement (nd_tll=MAC;
// icmp6 with icmpv6_type=136).
func NDTLL(mac net.HardwareAddr) Match { return newMAC(FieldNDTLL, mac) }

func (m macMatch) Field() Field { return m.f }
func (m macMatch) AppendText(b []byte) []byte {
	switch m.f {
	case FieldEthSrc:
		b = append(b, "dl_src="...)
	case FieldEthDst:
		b = append(b, "dl_dst="...)
	default:
		b = append(append(b, m.f.String()...), '=')
	}
	return append(b, m.mac.String()...)
}
func (m macMatch) tlv(proto Protocol) (string, []byte, []byte, error) {
	if err := m.check(proto); err != nil {
		return "", nil, nil, err
	}
	return m.f.info().oxm, slices.Clone(m.mac), nil, nil
}

type ipMatch struct {
	f    Field
	p    netip.Prefix
	addr bool // written as an address, not a prefix
}

// IPv4Src matches the IPv4 source address (nw_src=A.B.C.D).
func IPv4Src(a netip.Addr) Match { return newIP(FieldIPv4Src, netip.PrefixFrom(a, 32), true) }

// IPv4Dst matches the IPv4 destination address (nw_dst=A.B.C.D).
func IPv4Dst(a netip.Addr) Match { return newIP(FieldIPv4Dst, netip.PrefixFrom(a, 32), true) }

// IPv4SrcPrefix matches IPv4 sources in p (nw_src=A.B.C.D/N, the prefix as given).
func IPv4SrcPrefix(p netip.Prefix) Match { return newIP(FieldIPv4Src, p, false) }

// IPv4DstPrefix matches IPv4 destinations in p (nw_dst=A.B.C.D/N).
func IPv4DstPrefix(p netip.Prefix) Match { return newIP(FieldIPv4Dst, p, false) }

// IPv6Src matches the IPv6 source address (ipv6_src=2001:db8::1; an IPv6 protocol).
func IPv6Src(a netip.Addr) Match { return newIP(FieldIPv6Src, netip.PrefixFrom(a, 128), true) }

// IPv6Dst matches the IPv6 destination address (ipv6_dst=2001:db8::1; an IPv6 protocol).
func IPv6Dst(a netip.Addr) Match { return newIP(FieldIPv6Dst, netip.PrefixFrom(a, 128), true) }

// IPv6SrcPrefix matches IPv6 sources in p (ipv6_src=2001:db8::/64, the prefix as given).
func IPv6SrcPrefix(p netip.Prefix) Match { return newIP(FieldIPv6Src, p, false) }

// IPv6DstPrefix matches IPv6 destinations in p (ipv6_dst=2001:db8::/64).
func IPv6DstPrefix(p netip.Prefix) Match { return newIP(FieldIPv6Dst, p, false) }

// NDTarget matches the target address of a Neighbor Solicitation or Advertisement
// (nd_target=2001:db8::1; icmp6 with icmpv6_type 135 or 136).
func NDTarget(a netip.Addr) Match { return newIP(FieldNDTarget, netip.PrefixFrom(a, 128), true) }

// IPSrc matches the source address in a's family: IPv4Src for an IPv4 address, IPv6Src for
// any other (the flow's protocol must be of that family: Protocol.ForAddr).
func IPSrc(a netip.Addr) Match {
	if a.Is4() {
		return IPv4Src(a)
	}
	return IPv6Src(a)
}

// IPDst matches the destination address in a's family (IPv4Dst or IPv6Dst; see IPSrc).
func IPDst(a netip.Addr) Match {
	if a.Is4() {
		return IPv4Dst(a)
	}
	return IPv6Dst(a)
}

// IPSrcPrefix matches sources in p in its family (IPv4SrcPrefix or IPv6SrcPrefix; see IPSrc).
func IPSrcPrefix(p netip.Prefix) Match {
	if p.Addr().Is4() {
		return IPv4SrcPrefix(p)
	}
	return IPv6SrcPrefix(p)
}

// IPDstPrefix matches destinations in p in its family (IPv4DstPrefix or IPv6DstPrefix).
func IPDstPrefix(p netip.Prefix) Match {
	if p.Addr().Is4() {
		return IPv4DstPrefix(p)
	}
	return IPv6DstPrefix(p)
}

// ARPSPA matches the ARP sender protocol address (arp_spa=A.B.C.D).
func ARPSPA(a netip.Addr) Match { return newIP(FieldARPSPA, netip.PrefixFrom(a, 32), true) }

// ARPTPA matches the ARP target protocol address (arp_tpa=A.B.C.D).
func ARPTPA(a netip.Addr) Match { return newIP(FieldARPTPA, netip.PrefixFrom(a, 32), true) }

// ARPSPAPrefix matches ARP sender protocol addresses in p.
func ARPSPAPrefix(p netip.Prefix) Match { return newIP(FieldARPSPA, p, false) }

// ARPTPAPrefix matches ARP target protocol addresses in p.
func ARPTPAPrefix(p netip.Prefix) Match { return newIP(FieldARPTPA, p, false) }

// TunSrc matches the tunnel's outer IPv4 source (tun_src=A.B.C.D).
func TunSrc(a netip.Addr) Match { return newIP(FieldTunSrc, netip.PrefixFrom(a, 32), true) }

// TunIPv6Src matches the tunnel's outer IPv6 source (tun_ipv6_src=2001:db8::1; ovs-fields(7):
// no prerequisites, any protocol).
func TunIPv6Src(a netip.Addr) Match { return newIP(FieldTunIPv6Src, netip.PrefixFrom(a, 128), true) }

// TunSrcAddr matches the tunnel's outer source in a's family: TunSrc for an IPv4 address,
// TunIPv6Src for an IPv6 one.
func TunSrcAddr(a netip.Addr) Match {
	if a.Is4() {
		return TunSrc(a)
	}
	return TunIPv6Src(a)
}

// newIP keeps p; one of the wrong family for f fails Check and Encode.
func newIP(f Field, p netip.Prefix, addr bool) ipMatch { return ipMatch{f, p, addr} }

var ipKeys = map[Field]string{FieldIPv4Src: "nw_src=", FieldIPv4Dst: "nw_dst=", FieldARPSPA: "arp_spa=",
	FieldARPTPA: "arp_tpa=", FieldTunSrc: "tun_src=", FieldIPv6Src: "ipv6_src=", FieldIPv6Dst: "ipv6_dst=",
	FieldNDTarget: "nd_target=", FieldTunIPv6Src: "tun_ipv6_src="}

func (m ipMatch) Field() Field { return m.f }
func (m ipMatch) AppendText(b []byte) []byte {
	b = append(b, ipKeys[m.f]...)
	if m.addr {
		return m.p.Addr().AppendTo(b)
	}
	return m.p.AppendTo(b)
}
func (m ipMatch) tlv(proto Protocol) (string, []byte, []byte, error) {
	if err := m.check(proto); err != nil {
		return "", nil, nil, err
	}
	a := m.p.Masked().Addr().AsSlice()
	width := len(a) * 8
	if m.p.Bits() == width {
		return m.f.info().oxm, a, nil, nil
	}
	mask := net.CIDRMask(m.p.Bits(), width)
	return m.f.info().oxm, a, []byte(mask), nil
}

type u16Match struct {
	f Field
	v uint16
}

// ARPOp matches the ARP opcode (arp_op=N).
func ARPOp(op uint16) Match { return u16Match{FieldARPOp, op} }

// TPSrc matches the transport source port (tp_src=N): tcp_src or udp_src by the flow's protocol.
func TPSrc(port uint16) Match { return u16Match{FieldTCPSrc, port} }

// TPDst matches the transport destination port (tp_dst=N): tcp_dst or udp_dst by the protocol.
func TPDst(port uint16) Match { return u16Match{FieldTCPDst, port} }

// TPDstMasked matches the transport destination port under mask (tp_dst=0xV/0xM,
// ovs-fields(7) "tcp_dst" and "udp_dst" are maskable): the ports p with p&mask == port&mask, an
// aligned power-of-two block when mask is its complement (0xffe0: 32 ports). An all-ones mask
// is TPDst(port). It renders as ovs-ofctl dump-flows prints it (hex value and mask, the value
// masked).
func TPDstMasked(port, mask uint16) Match {
	if mask == 0xffff {
		return TPDst(port)
	}
	return portMaskMatch{u16Match{FieldTCPDst, port & mask}, mask}
}

// portMaskMatch is a u16Match of tp_dst under a mask other than all ones.
type portMaskMatch struct {
	u16Match
	mask uint16
}

func (m portMaskMatch) AppendText(b []byte) []byte {
	b = append(b, "tp_dst=0x"...)
	b = strconv.AppendUint(b, uint64(m.v), 16)
	b = append(b, "/0x"...)
	return strconv.AppendUint(b, uint64(m.mask), 16)
}
func (m portMaskMatch) tlv(proto Protocol) (string, []byte, []byte, error) {
	name, v, _, err := m.u16Match.tlv(proto)
	if err != nil {
		return "", nil, nil, err
	}
	return name, v, be16(m.mask), nil
}

// ICMPType matches the ICMPv4 type (icmp_type=N).
func ICMPType(t uint8) Match { return u16Match{FieldICMPType, uint16(t)} }

// ICMPv6Type matches the ICMPv6 type (icmpv6_type=N; icmp6): 1 Destination Unreachable, 2
// Packet Too Big, 3 Time Exceeded, 4 Parameter Problem, 135 Neighbor Solicitation, 136
// Neighbor Advertisement (RFC 4443, RFC 4861).
func ICMPv6Type(t uint8) Match { return u16Match{FieldICMPv6Type, uint16(t)} }

// ICMPv6Code matches the ICMPv6 code (icmpv6_code=N; icmp6).
func ICMPv6Code(c uint8) Match { return u16Match{FieldICMPv6Code, uint16(c)} }

func (m u16Match) Field() Field { return m.f }
func (m u16Match) AppendText(b []byte) []byte {
	switch m.f {
	case FieldARPOp:
		b = append(b, "arp_op="...)
	case FieldTCPSrc:
		b = append(b, "tp_src="...)
	case FieldTCPDst:
		b = append(b, "tp_dst="...)
	case FieldICMPType:
		b = append(b, "icmp_type="...)
	case FieldICMPv6Type:
		b = append(b, "icmpv6_type="...)
	case FieldICMPv6Code:
		b = append(b, "icmpv6_code="...)
	}
	return strconv.AppendUint(b, uint64(m.v), 10)
}
func (m u16Match) tlv(proto Protocol) (string, []byte, []byte, error) {
	switch m.f {
	case FieldARPOp:
		return "OXM_OF_ARP_OP", be16(m.v), nil, nil
	case FieldICMPType:
		return "OXM_OF_ICMPV4_TYPE", []byte{byte(m.v)}, nil, nil
	case FieldICMPv6Type, FieldICMPv6Code:
		if err := m.check(proto); err != nil {
			return "", nil, nil, err
		}
		return m.f.info().oxm, []byte{byte(m.v)}, nil, nil
	}
	dir := "SRC"
	if m.f == FieldTCPDst {
		dir = "DST"
	}
	switch {
	case proto.IsTCP():
		return "OXM_OF_TCP_" + dir, be16(m.v), nil, nil
	case proto.IsUDP():
		return "OXM_OF_UDP_" + dir, be16(m.v), nil, nil
	}
	return "", nil, nil, fmt.Errorf("tp_%s without tcp or udp", map[string]string{"SRC": "src", "DST": "dst"}[dir])
}

// CTFlag is one bit of ct_state (ovs-fields(7) "Connection Tracking Fields").
type CTFlag uint32

// ct_state bits.
const (
	CTNew         CTFlag = 0x01
	CTEstablished CTFlag = 0x02
	CTRelated     CTFlag = 0x04
	CTReply       CTFlag = 0x08
	CTInvalid     CTFlag = 0x10
	CTTracked     CTFlag = 0x20
	CTSNAT        CTFlag = 0x40
	CTDNAT        CTFlag = 0x80
)

var ctFlagNames = map[CTFlag]string{CTNew: "new", CTEstablished: "est", CTRelated: "rel", CTReply: "rpl",
	CTInvalid: "inv", CTTracked: "trk", CTSNAT: "snat", CTDNAT: "dnat"}

// TCPFlag is one bit of tcp_flags (ovs-fields(7) "TCP flags").
type TCPFlag uint32

// tcp_flags bits.
const (
	TCPFin TCPFlag = 0x001
	TCPSyn TCPFlag = 0x002
	TCPRst TCPFlag = 0x004
	TCPPsh TCPFlag = 0x008
	TCPAck TCPFlag = 0x010
	TCPUrg TCPFlag = 0x020
	TCPEce TCPFlag = 0x040
	TCPCwr TCPFlag = 0x080
	TCPNs  TCPFlag = 0x100
)

var tcpFlagNames = map[TCPFlag]string{TCPFin: "fin", TCPSyn: "syn", TCPRst: "rst", TCPPsh: "psh", TCPAck: "ack",
	TCPUrg: "urg", TCPEce: "ece", TCPCwr: "cwr", TCPNs: "ns"}

// FlagBit is one flag a ct_state or tcp_flags match requires set (+name) or clear (-name).
type FlagBit struct {
	bit  uint32
	name string
	set  bool
}

// Set requires the flag set (+name).
func (f CTFlag) Set() FlagBit { return FlagBit{uint32(f), ctFlagNames[f], true} }

// Unset requires the flag clear (-name).
func (f CTFlag) Unset() FlagBit { return FlagBit{uint32(f), ctFlagNames[f], false} }

// Set requires the flag set (+name).
func (f TCPFlag) Set() FlagBit { return FlagBit{uint32(f), tcpFlagNames[f], true} }

// Unset requires the flag clear (-name).
func (f TCPFlag) Unset() FlagBit { return FlagBit{uint32(f), tcpFlagNames[f], false} }

type flagsMatch struct {
	f    Field
	bits []FlagBit
}

// CTState matches ct_state flags, in the order given: ct_state=+trk+est-rpl.
func CTState(bits ...FlagBit) Match { return flagsMatch{FieldCTState, bits} }

// TCPFlags matches tcp_flags, in the order given: tcp_flags=+syn-ack.
func TCPFlags(bits ...FlagBit) Match { return flagsMatch{FieldTCPFlags, bits} }

func (m flagsMatch) Field() Field { return m.f }
func (m flagsMatch) AppendText(b []byte) []byte {
	b = append(b, m.f.String()...)
	b = append(b, '=')
	for _, fb := range m.bits {
		if fb.set {
			b = append(b, '+')
		} else {
			b = append(b, '-')
		}
		b = append(b, fb.name...)
	}
	return b
}
func (m flagsMatch) tlv(proto Protocol) (string, []byte, []byte, error) {
	var v, mask uint32
	for _, fb := range m.bits {
		mask |= fb.bit
		if fb.set {
			v |= fb.bit
		}
	}
	if m.f == FieldTCPFlags {
		if !proto.IsTCP() {
			return "", nil, nil, fmt.Errorf("tcp_flags without tcp")
		}
		return "NXM_NX_TCP_FLAGS", be16(uint16(v)), be16(uint16(mask)), nil
	}
	return "NXM_NX_CT_STATE", be32(v), be32(mask), nil
}

// Frag is a value of nw_frag (ovs-fields(7) "nw_frag").
type Frag uint8

// nw_frag values.
const (
	FragYes Frag = iota + 1 // every fragment, the first one included
	FragNo                  // not a fragment
	FragFirst
	FragLater
	FragNotLater
)

var fragInfos = map[Frag]struct {
	name        string
	value, mask byte
}{FragYes: {"yes", 1, 1}, FragNo: {"no", 0, 1}, FragFirst: {"first", 1, 3}, FragLater: {"later", 3, 3},
	FragNotLater: {"not_later", 0, 2}}

type fragMatch Frag

// IPFrag matches the fragment type (nw_frag=yes).
func IPFrag(f Frag) Match { return fragMatch(f) }

func (m fragMatch) Field() Field { return FieldIPFrag }
func (m fragMatch) AppendText(b []byte) []byte {
	return append(append(b, "nw_frag="...), fragInfos[Frag(m)].name...)
}
func (m fragMatch) tlv(proto Protocol) (string, []byte, []byte, error) {
	fi := fragInfos[Frag(m)]
	return "NXM_NX_IP_FRAG", []byte{fi.value}, []byte{fi.mask}, nil
}

type u32Match struct {
	f       Field
	v, mask uint32
	masked  bool
}

// RegMatch matches register f (Reg(n)) against v under mask: reg0=0x1/0xf.
func RegMatch(f Field, v, mask uint32) Match { return u32Match{f, v, mask, true} }

// RegExact matches register f exactly: reg3=0xc0000232.
func RegExact(f Field, v uint32) Match { return u32Match{f, v, 0, false} }

// CTMark matches ct_mark against v under mask (ct_mark=0x00000002/0x0000000f; mask 0: exact).
func CTMark(v, mask uint32) Match { return u32Match{FieldCTMark, v, mask, mask != 0} }

func (m u32Match) Field() Field { return m.f }
func (m u32Match) AppendText(b []byte) []byte {
	b = append(b, m.f.String()...)
	b = append(b, '=')
	if m.f == FieldCTMark {
		b = appendHexPad(b, uint64(m.v), 8)
		if m.masked {
			b = appendHexPad(append(b, '/'), uint64(m.mask), 8)
		}
		return b
	}
	b = appendHex(b, uint64(m.v))
	if m.masked {
		b = appendHex(append(b, '/'), uint64(m.mask))
	}
	return b
}
func (m u32Match) tlv(Protocol) (string, []byte, []byte, error) {
	if !m.masked {
		return m.f.info().oxm, be32(m.v), nil, nil
	}
	return m.f.info().oxm, be32(m.v), be32(m.mask), nil
}

// U128 is a 128-bit value (ct_label): Hi is bits 127..64, Lo bits 63..0.
type U128 struct{ Hi, Lo uint64 }

type labelMatch struct{ v, mask U128 }

// CTLabel matches ct_label against v under mask: ct_label=0xc000020c/0xffffffff.
func CTLabel(v, mask U128) Match { return labelMatch{v, mask} }

func (m labelMatch) Field() Field { return FieldCTLabel }
func (m labelMatch) AppendText(b []byte) []byte {
	b = append(b, "ct_label="...)
	b = appendHex128(b, m.v)
	return appendHex128(append(b, '/'), m.mask)
}
func (m labelMatch) tlv(Protocol) (string, []byte, []byte, error) {
	return "NXM_NX_CT_LABEL", append(be64(m.v.Hi), be64(m.v.Lo)...), append(be64(m.mask.Hi), be64(m.mask.Lo)...), nil
}

type tunIDMatch struct {
	v, mask uint64
	masked  bool
}

// TunID matches the tunnel id (Geneve VNI) exactly: tun_id=0x1.
func TunID(v uint64) Match { return tunIDMatch{v: v} }

// TunIDMasked matches the tunnel id under mask: tun_id=0x1/0xff.
func TunIDMasked(v, mask uint64) Match { return tunIDMatch{v, mask, true} }

func (m tunIDMatch) Field() Field { return FieldTunID }
func (m tunIDMatch) AppendText(b []byte) []byte {
	b = appendHex(append(b, "tun_id="...), m.v)
	if m.masked {
		b = appendHex(append(b, '/'), m.mask)
	}
	return b
}
func (m tunIDMatch) tlv(Protocol) (string, []byte, []byte, error) {
	if !m.masked {
		return "NXM_NX_TUN_ID", be64(m.v), nil, nil
	}
	return "NXM_NX_TUN_ID", be64(m.v), be64(m.mask), nil
}

// appendHex appends v as %#x does (0x0 for zero).
func appendHex(b []byte, v uint64) []byte {
	return strconv.AppendUint(append(b, "0x"...), v, 16)
}

// appendHexPad appends v as 0x%0Nx.
func appendHexPad(b []byte, v uint64, n int) []byte {
	b = append(b, "0x"...)
	s := strconv.FormatUint(v, 16)
	for i := len(s); i < n; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// appendHex128 appends v in hex, 0x-prefixed, without leading zeros.
func appendHex128(b []byte, v U128) []byte {
	if v.Hi == 0 {
		return appendHex(b, v.Lo)
	}
	b = appendHex(b, v.Hi)
	s := strconv.FormatUint(v.Lo, 16)
	for i := len(s); i < 16; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}
