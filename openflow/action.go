package openflow

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// Action is one action of a flow's or a bucket's action list (ovs-actions(7)). It renders in
// ovs-ofctl(8) syntax; Encode turns a whole list into OpenFlow 1.5 instructions or actions.
type Action interface {
	// AppendText appends the action's text to b.
	AppendText(b []byte) []byte
	isAction()
}

// AppendActions appends acts comma-separated, "drop" for none.
func AppendActions(b []byte, acts []Action) []byte {
	if len(acts) == 0 {
		return append(b, "drop"...)
	}
	for i, a := range acts {
		if i > 0 {
			b = append(b, ',')
		}
		b = a.AppendText(b)
	}
	return b
}

// Output outputs to a port: output:N; LOCAL, IN_PORT and normal for the reserved ports
// PortLocal, PortInPort and PortNormal.
type Output struct{ Port uint32 }

func (Output) isAction() {}

// AppendText implements Action.
func (a Output) AppendText(b []byte) []byte {
	switch a.Port {
	case PortLocal:
		return append(b, "LOCAL"...)
	case PortInPort:
		return append(b, "IN_PORT"...)
	case PortNormal:
		return append(b, "normal"...)
	}
	return strconv.AppendUint(append(b, "output:"...), uint64(a.Port), 10)
}

// OutputField outputs to the port number held in a field: output:NXM_NX_REG1[].
type OutputField struct{ Src FieldRef }

func (OutputField) isAction() {}

// AppendText implements Action.
func (a OutputField) AppendText(b []byte) []byte { return a.Src.AppendText(append(b, "output:"...)) }

// Drop is the empty action list ("drop"; alone only). Reason is the caller's label of why the
// flow drops; it is neither rendered nor encoded.
type Drop struct{ Reason string }

func (Drop) isAction() {}

// AppendText implements Action.
func (Drop) AppendText(b []byte) []byte { return append(b, "drop"...) }

// GotoTable continues in table Table (the OpenFlow 1.1+ goto-table instruction; last only).
type GotoTable struct{ Table uint8 }

func (GotoTable) isAction() {}

// AppendText implements Action.
func (a GotoTable) AppendText(b []byte) []byte {
	return strconv.AppendUint(append(b, "goto_table:"...), uint64(a.Table), 10)
}

// Resubmit looks the packet up in table Table (with its current fields, in_port unchanged),
// runs the actions of the flow it finds (none on a miss) and then continues with the actions
// after it: resubmit(,N) (ovs-actions(7) "The resubmit action"; sent as NXAST_RESUBMIT_TABLE
// with in_port OFPP_IN_PORT, as ovs-ofctl does). Unlike GotoTable it may appear anywhere in the
// list and may name any table.
type Resubmit struct{ Table uint8 }

func (Resubmit) isAction() {}

// AppendText implements Action.
func (a Resubmit) AppendText(b []byte) []byte {
	b = strconv.AppendUint(append(b, "resubmit(,"...), uint64(a.Table), 10)
	return append(b, ')')
}

// Group sends the packet to group ID: group:N.
type Group struct{ ID uint32 }

func (Group) isAction() {}

// AppendText implements Action.
func (a Group) AppendText(b []byte) []byte {
	return strconv.AppendUint(append(b, "group:"...), uint64(a.ID), 10)
}

// Load writes Value into Dst: load:0x2->NXM_OF_ARP_OP[] (sent as an OpenFlow 1.5 set-field,
// masked when Dst is part of its field, as ovs-ofctl does). Value must fit Dst (at most 64 bits).
type Load struct {
	Value uint64
	Dst   FieldRef
}

func (Load) isAction() {}

// AppendText implements Action.
func (a Load) AppendText(b []byte) []byte {
	b = appendHex(append(b, "load:"...), a.Value)
	return a.Dst.AppendText(append(b, "->"...))
}

// Move copies Src into Dst (same width): move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47] (sent as
// OpenFlow 1.5 copy-field).
type Move struct{ Src, Dst FieldRef }

func (Move) isAction() {}

// AppendText implements Action.
func (a Move) AppendText(b []byte) []byte {
	b = a.Src.AppendText(append(b, "move:"...))
	return a.Dst.AppendText(append(b, "->"...))
}

// SetField sets a whole field: set_field:192.0.2.12->tun_dst, set_field:0->tcp_dst,
// set_field:2001:db8::1->ipv6_src. Build it with SetTunDst, SetTCPDst, SetAddr, SetIPSrc,
// SetIPDst, SetMAC or SetValue, which fix the value's rendering.
type SetField struct {
	Field Field
	Value uint64
	ip    bool       // render addr (an IPv4 address is also in Value)
	addr  netip.Addr // when ip
	mac   bool       // render Value as a MAC
}

func (SetField) isAction() {}

// SetTunDst sets the tunnel's outer IPv4 destination (an address that is not IPv4 fails Check
// and Encode).
func SetTunDst(a netip.Addr) SetField { return SetAddr(FieldTunDst, a) }

// SetTunIPv6Dst sets the tunnel's outer IPv6 destination, set_field:2001:db8::12->tun_ipv6_dst
// (an address that is not IPv6 fails Check and Encode): the packet output to a flow-based tunnel
// port then leaves over IPv6 (ovs-fields(7) "tun_ipv6_dst").
func SetTunIPv6Dst(a netip.Addr) SetField { return SetAddr(FieldTunIPv6Dst, a) }

// SetTunDstAddr sets the tunnel's outer destination in a's family: SetTunDst for an IPv4
// address, SetTunIPv6Dst for an IPv6 one.
func SetTunDstAddr(a netip.Addr) SetField {
	if a.Is4() {
		return SetTunDst(a)
	}
	return SetTunIPv6Dst(a)
}

// SetAddr sets an address field to a: ip_src, ip_dst and tun_dst take an IPv4 address,
// ipv6_src, ipv6_dst, nd_target and tun_ipv6_dst an IPv6 one; another family (or a field that holds no
// address) fails Check and Encode. ovs-fields(7) prerequisites apply to the flow it runs in.
func SetAddr(f Field, a netip.Addr) SetField {
	s := SetField{Field: f, ip: true, addr: a}
	if a.Is4() {
		b := a.As4()
		s.Value = uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])
	}
	return s
}

// SetIPSrc sets the source address in a's family: ip_src for an IPv4 address, ipv6_src for
// any other.
func SetIPSrc(a netip.Addr) SetField {
	if a.Is4() {
		return SetAddr(FieldIPv4Src, a)
	}
	return SetAddr(FieldIPv6Src, a)
}

// SetIPDst sets the destination address in a's family (ip_dst or ipv6_dst).
func SetIPDst(a netip.Addr) SetField {
	if a.Is4() {
		return SetAddr(FieldIPv4Dst, a)
	}
	return SetAddr(FieldIPv6Dst, a)
}

// SetMAC sets a 48-bit MAC field (eth_src, eth_dst, arp_sha, arp_tha, nd_sll, nd_tll):
// set_field:02:00:c0:00:02:0b->nd_tll. A MAC that is not 6 bytes fails Check and Encode.
func SetMAC(f Field, mac net.HardwareAddr) SetField {
	s := SetField{Field: f, mac: true}
	if len(mac) == 6 {
		s.Value = binary.BigEndian.Uint64(append([]byte{0, 0}, mac...))
	} else {
		s.Value = 1 << 63 // marks the bad length for check
	}
	return s
}

// SetValue sets an integer field of at most 64 bits (icmpv6_type, tcp_src, reg0...) to v,
// rendered in decimal: set_field:136->icmpv6_type. A value wider than the field fails Check
// and Encode.
func SetValue(f Field, v uint64) SetField { return SetField{Field: f, Value: v} }

// SetTCPDst sets the TCP destination port.
func SetTCPDst(port uint16) SetField { return SetValue(FieldTCPDst, uint64(port)) }

// check reports a value of the wrong family, length or width for the field.
func (a SetField) check() error {
	bits := a.Field.Bits()
	switch {
	case a.ip:
		switch {
		case bits == 32 && !a.addr.Is4():
			return fmt.Errorf("set_field: %v is no IPv4 address (%s)", a.addr, a.Field)
		case bits == 128 && !a.addr.Is6():
			return fmt.Errorf("set_field: %v is no IPv6 address (%s)", a.addr, a.Field)
		case bits != 32 && bits != 128:
			return fmt.Errorf("set_field: %s holds no address", a.Field)
		}
	case a.mac:
		if bits != 48 {
			return fmt.Errorf("set_field: %s holds no MAC", a.Field)
		}
		if a.Value>>48 != 0 {
			return fmt.Errorf("set_field: MAC is not 6 bytes")
		}
	case bits > 64:
		return fmt.Errorf("set_field: %s is wider than 64 bits", a.Field)
	case bits < 64 && a.Value>>bits != 0:
		return fmt.Errorf("set_field: %d does not fit %s", a.Value, a.Field)
	}
	return nil
}

// AppendText implements Action.
func (a SetField) AppendText(b []byte) []byte {
	b = append(b, "set_field:"...)
	switch {
	case a.ip:
		b = a.addr.AppendTo(b)
	case a.mac:
		var m [8]byte
		binary.BigEndian.PutUint64(m[:], a.Value)
		b = append(b, net.HardwareAddr(m[2:]).String()...)
	default:
		b = strconv.AppendUint(b, a.Value, 10)
	}
	return append(append(b, "->"...), a.Field.String()...)
}

// ModDLSrc sets the Ethernet source: mod_dl_src:MAC.
type ModDLSrc struct{ MAC net.HardwareAddr }

// ModDLDst sets the Ethernet destination: mod_dl_dst:MAC.
type ModDLDst struct{ MAC net.HardwareAddr }

func (ModDLSrc) isAction() {}
func (ModDLDst) isAction() {}

// AppendText implements Action.
func (a ModDLSrc) AppendText(b []byte) []byte {
	return append(append(b, "mod_dl_src:"...), a.MAC.String()...)
}

// AppendText implements Action.
func (a ModDLDst) AppendText(b []byte) []byte {
	return append(append(b, "mod_dl_dst:"...), a.MAC.String()...)
}

// SetTunnel sets the tunnel id (Geneve VNI): set_tunnel:0x3 (NXAST_SET_TUNNEL; at most 32 bits).
type SetTunnel struct{ ID uint64 }

func (SetTunnel) isAction() {}

// AppendText implements Action.
func (a SetTunnel) AppendText(b []byte) []byte { return appendHex(append(b, "set_tunnel:"...), a.ID) }

// CT is the conntrack action (ovs-actions(7) "The ct action"):
// ct([commit,][table=N,]zone=N[,nat[(...)]][,exec(...)]).
type CT struct {
	// Commit commits the connection (required for a NAT with an address and for Exec).
	Commit bool
	// Table, when HasTable, recirculates the packet to that table after conntrack.
	Table    uint8
	HasTable bool
	// Zone is the conntrack zone (immediate).
	Zone uint16
	// NAT, when set, applies NAT (see NAT).
	NAT *NAT
	// Exec are the actions run on the committed connection (Load and Move into ct_mark and
	// ct_label).
	Exec []Action
}

// NAT is the nat argument of CT: the zero NAT is "nat" (apply the connection's translation);
// Dst (address and port) installs a DNAT, Src (address; the port is kept) an SNAT. With
// SrcPortMin..SrcPortMax (both non-zero, Min <= Max) the SNAT also maps the source port into
// that range (nat(src=IP:MIN-MAX); conntrack keeps the original port when it is in the range
// and free, else takes a free one of the range).
type NAT struct {
	Dst                    netip.AddrPort
	Src                    netip.Addr
	SrcPortMin, SrcPortMax uint16
}

// srcPorts reports whether n carries a source port range.
func (n *NAT) srcPorts() bool { return n.SrcPortMin != 0 || n.SrcPortMax != 0 }

func (CT) isAction() {}

// Check reports a CT that ovs-ofctl would refuse (NAT with an address or exec without commit).
func (c CT) Check() error {
	if c.NAT != nil && (c.NAT.Dst.IsValid() || c.NAT.Src.IsValid()) && !c.Commit {
		return fmt.Errorf("ct: nat with an address requires commit")
	}
	if len(c.Exec) > 0 && !c.Commit {
		return fmt.Errorf("ct: exec requires commit")
	}
	if c.NAT != nil && c.NAT.srcPorts() && (!c.NAT.Src.IsValid() || c.NAT.Dst.IsValid() ||
		c.NAT.SrcPortMin == 0 || c.NAT.SrcPortMin > c.NAT.SrcPortMax) {
		return fmt.Errorf("ct: nat source port range %d-%d needs a source address and 0 < min <= max", c.NAT.SrcPortMin, c.NAT.SrcPortMax)
	}
	return nil
}

// AppendText implements Action.
func (c CT) AppendText(b []byte) []byte {
	b = append(b, "ct("...)
	if c.Commit {
		b = append(b, "commit,"...)
	}
	if c.HasTable {
		b = strconv.AppendUint(append(b, "table="...), uint64(c.Table), 10)
		b = append(b, ',')
	}
	b = strconv.AppendUint(append(b, "zone="...), uint64(c.Zone), 10)
	if c.NAT != nil {
		switch {
		case c.NAT.Src.IsValid() && !c.NAT.Dst.IsValid() && c.NAT.srcPorts():
			if c.NAT.Src.Is4() {
				b = c.NAT.Src.AppendTo(append(b, ",nat(src="...))
			} else {
				b = append(c.NAT.Src.AppendTo(append(b, ",nat(src=["...)), ']')
			}
			b = strconv.AppendUint(append(b, ':'), uint64(c.NAT.SrcPortMin), 10)
			b = strconv.AppendUint(append(b, '-'), uint64(c.NAT.SrcPortMax), 10)
			b = append(b, ')')
		case c.NAT.Src.IsValid() && !c.NAT.Dst.IsValid():
			b = c.NAT.Src.AppendTo(append(b, ",nat(src="...))
			b = append(b, ')')
		case !c.NAT.Dst.IsValid():
			b = append(b, ",nat"...)
		case c.NAT.Dst.Addr().Is4():
			b = c.NAT.Dst.Addr().AppendTo(append(b, ",nat(dst="...))
			b = strconv.AppendUint(append(b, ':'), uint64(c.NAT.Dst.Port()), 10)
			b = append(b, ')')
		default:
			b = c.NAT.Dst.Addr().AppendTo(append(b, ",nat(dst=["...))
			b = strconv.AppendUint(append(b, "]:"...), uint64(c.NAT.Dst.Port()), 10)
			b = append(b, ')')
		}
	}
	if len(c.Exec) > 0 {
		b = AppendActions(append(b, ",exec("...), c.Exec)
		b = append(b, ')')
	}
	return append(b, ')')
}

// Learn is the learn action (ovs-actions(7) "The learn action"): it adds the flow its specs
// describe, built from the packet being processed.
type Learn struct {
	Table                    uint8
	Priority                 uint16
	IdleTimeout, HardTimeout uint16
	Cookie                   uint64
	Specs                    []LearnSpec
}

// LearnKind says what a LearnSpec does.
type LearnKind uint8

// Learn spec kinds.
const (
	// LearnMatch: the learned flow matches Dst against Value or (FromField) Src of this packet.
	LearnMatch LearnKind = iota + 1
	// LearnLoad: the learned flow loads Value or (FromField) Src of this packet into Dst.
	LearnLoad
	// LearnOutput: the learned flow outputs to the port held in Src of this packet.
	LearnOutput
)

// LearnSpec is one spec of a Learn. A match of a whole eth_type or ip_proto against a value is
// written with its ovs-fields(7) name (eth_type=0x800, nw_proto=6), every other Dst and Src in
// NXM syntax; values of matches are written in decimal (eth_type in hex), of loads in hex.
type LearnSpec struct {
	Kind      LearnKind
	Dst, Src  FieldRef
	FromField bool
	Value     uint64
}

func (Learn) isAction() {}

// AppendText implements Action.
func (l Learn) AppendText(b []byte) []byte {
	b = strconv.AppendUint(append(b, "learn(table="...), uint64(l.Table), 10)
	b = strconv.AppendUint(append(b, ",priority="...), uint64(l.Priority), 10)
	if l.IdleTimeout != 0 {
		b = strconv.AppendUint(append(b, ",idle_timeout="...), uint64(l.IdleTimeout), 10)
	}
	if l.HardTimeout != 0 {
		b = strconv.AppendUint(append(b, ",hard_timeout="...), uint64(l.HardTimeout), 10)
	}
	b = appendHex(append(b, ",cookie="...), l.Cookie)
	for _, s := range l.Specs {
		b = append(b, ',')
		switch s.Kind {
		case LearnMatch:
			switch {
			case !s.FromField && s.Dst.Whole && s.Dst.Field == FieldEthType:
				b = appendHex(append(b, "eth_type="...), s.Value)
				continue
			case !s.FromField && s.Dst.Whole && s.Dst.Field == FieldIPProto:
				b = strconv.AppendUint(append(b, "nw_proto="...), s.Value, 10)
				continue
			}
			b = append(s.Dst.AppendText(b), '=')
			if s.FromField {
				b = s.Src.AppendText(b)
			} else {
				b = strconv.AppendUint(b, s.Value, 10)
			}
		case LearnLoad:
			b = append(b, "load:"...)
			if s.FromField {
				b = s.Src.AppendText(b)
			} else {
				b = appendHex(b, s.Value)
			}
			b = s.Dst.AppendText(append(b, "->"...))
		case LearnOutput:
			b = s.Src.AppendText(append(b, "output:"...))
		}
	}
	return append(b, ')')
}

// CheckActions reports an action list that ovs-ofctl would refuse or Encode cannot encode: drop
// or goto_table out of place, a ct that needs commit, an address or MAC of the wrong family or
// length.
func CheckActions(acts []Action) error {
	for i, a := range acts {
		switch a := a.(type) {
		case Drop:
			if len(acts) > 1 {
				return fmt.Errorf("drop with other actions")
			}
		case GotoTable:
			if i != len(acts)-1 {
				return fmt.Errorf("goto_table:%d not last", a.Table)
			}
		case CT:
			if err := a.Check(); err != nil {
				return err
			}
			if a.NAT != nil && a.NAT.Dst.IsValid() && a.NAT.Src.IsValid() && a.NAT.Dst.Addr().Is4() != a.NAT.Src.Is4() {
				return fmt.Errorf("ct: nat addresses of two families")
			}
			if err := CheckActions(a.Exec); err != nil {
				return err
			}
		case SetField:
			if err := a.check(); err != nil {
				return err
			}
		case ModDLSrc:
			if len(a.MAC) != 6 {
				return fmt.Errorf("mod_dl_src: MAC %v is not 6 bytes", a.MAC)
			}
		case ModDLDst:
			if len(a.MAC) != 6 {
				return fmt.Errorf("mod_dl_dst: MAC %v is not 6 bytes", a.MAC)
			}
		}
	}
	return nil
}
