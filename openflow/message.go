package openflow

import (
	"fmt"
	"net/netip"
	"strconv"
)

// Flow is one OpenFlow rule: where it sits (table, priority), its match and its actions.
type Flow struct {
	Table       uint8
	Priority    uint16
	IdleTimeout uint16
	// Cookie is the flow's cookie; 0 is not rendered.
	Cookie   uint64
	Protocol Protocol
	// Match is the match, in the order the text renders it (the encoder orders the TLVs by
	// their prerequisites).
	Match   []Match
	Actions []Action
}

// AppendMatchText appends the flow's match as the text renders it: the protocol, then each
// field, comma-separated ("tcp,nw_dst=192.0.2.11,tp_dst=80"); nothing for a flow matching all.
func (f *Flow) AppendMatchText(b []byte) []byte {
	first := true
	if f.Protocol != ProtoNone {
		b = append(b, f.Protocol.String()...)
		first = false
	}
	for _, m := range f.Match {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = m.AppendText(b)
	}
	return b
}

// AppendText appends the flow in ovs-ofctl(8) flow syntax, in the order go-openvswitch's
// ovs.Flow.MarshalText writes it (which the golden files hold):
// priority=P[,MATCH],table=T,idle_timeout=I[,cookie=0x%016x],actions=A.
func (f *Flow) AppendText(b []byte) []byte {
	b = strconv.AppendUint(append(b, "priority="...), uint64(f.Priority), 10)
	if f.Protocol != ProtoNone || len(f.Match) > 0 {
		b = f.AppendMatchText(append(b, ','))
	}
	b = strconv.AppendUint(append(b, ",table="...), uint64(f.Table), 10)
	b = strconv.AppendUint(append(b, ",idle_timeout="...), uint64(f.IdleTimeout), 10)
	if f.Cookie != 0 {
		b = appendHexPad(append(b, ",cookie="...), f.Cookie, 16)
	}
	return AppendActions(append(b, ",actions="...), f.Actions)
}

// String is the flow's text.
func (f *Flow) String() string { return string(f.AppendText(nil)) }

// Check reports a flow that ovs-ofctl would refuse or Encode cannot encode (see CheckActions;
// matches: an address field given the other family, an IPv4 field on an IPv6 protocol or an
// IPv6 field without one, a MAC that is not 6 bytes, tp_src/tp_dst without tcp or udp, ND and
// ICMPv6 fields without icmp6, a field twice; a ct nat address of the other family than the
// flow's protocol), without encoding it.
func (f *Flow) Check() error {
	seen := map[int]bool{}
	for _, m := range f.Match {
		r := matchRank(m.Field())
		if seen[r] {
			return fmt.Errorf("field %s matched twice", m.Field())
		}
		seen[r] = true
		if err := m.check(f.Protocol); err != nil {
			return err
		}
	}
	if err := checkNATFamily(f.Protocol, f.Actions); err != nil {
		return err
	}
	return CheckActions(f.Actions)
}

// checkNATFamily reports an action that uses an address family other than proto's: a ct nat
// address, or a set_field or move of an IPv4 or IPv6 header field (OVS refuses nat(dst=[v6]) in
// an ip flow as inconsistent with the match, and a set_field or move without its field's
// prerequisites); no IP protocol, no check.
func checkNATFamily(proto Protocol, acts []Action) error {
	if !proto.IsIPv4() && !proto.IsIPv6() {
		return nil
	}
	wrong := func(f Field) bool {
		switch f {
		case FieldIPv4Src, FieldIPv4Dst:
			return proto.IsIPv6()
		case FieldIPv6Src, FieldIPv6Dst, FieldICMPv6Type, FieldICMPv6Code, FieldNDTarget, FieldNDSLL, FieldNDTLL,
			FieldNDReserved, FieldNDOptionsType:
			return proto.IsIPv4()
		}
		return false
	}
	for _, a := range acts {
		switch a := a.(type) {
		case CT:
			if a.NAT == nil {
				continue
			}
			for _, addr := range []netip.Addr{a.NAT.Dst.Addr(), a.NAT.Src} {
				if addr.IsValid() && addr.Is4() != proto.IsIPv4() {
					return fmt.Errorf("ct: nat address %v in a %s flow", addr, proto)
				}
			}
		case SetField:
			if wrong(a.Field) {
				return fmt.Errorf("set_field of %s in a %s flow", a.Field, proto)
			}
		case Move:
			if wrong(a.Src.Field) || wrong(a.Dst.Field) {
				return fmt.Errorf("move %s->%s in a %s flow", a.Src, a.Dst, proto)
			}
		}
	}
	return nil
}

// GroupType is an OpenFlow group type.
type GroupType uint8

// Group types (ofp_group_type).
const (
	GroupAll      GroupType = 0
	GroupSelect   GroupType = 1
	GroupIndirect GroupType = 2
)

var groupTypeNames = [...]string{"all", "select", "indirect"}

// String is the type's ovs-ofctl name.
func (t GroupType) String() string { return groupTypeNames[t] }

// GroupDesc is an OpenFlow 1.5 group (ovs-ofctl(8) "Group Syntax").
type GroupDesc struct {
	ID   uint32
	Type GroupType
	// SelectionFields, when set, are hashed to pick a bucket (selection_method=hash, a select
	// group only): FieldIPv4Src or FieldIPv6Src (ip_src, ipv6_src: all their bits), FieldTCPSrc,
	// FieldUDPSrc... (FieldIPv4Src names itself ip_src).
	SelectionFields []Field
	// SelectionParam is the hash basis of a select group with SelectionFields
	// (selection_method_param, a 64-bit unsigned integer; 0: none, the text omits it): the same
	// fields hash to another bucket under another basis.
	SelectionParam uint64
	Buckets        []Bucket
}

// Bucket is one bucket of a group (ofp15_bucket with a weight property).
type Bucket struct {
	ID      uint32
	Weight  uint16
	Actions []Action
}

// AppendText appends "bucket=bucket_id:ID,weight:W,actions=A".
func (bk *Bucket) AppendText(b []byte) []byte {
	b = strconv.AppendUint(append(b, "bucket=bucket_id:"...), uint64(bk.ID), 10)
	b = strconv.AppendUint(append(b, ",weight:"...), uint64(bk.Weight), 10)
	return AppendActions(append(b, ",actions="...), bk.Actions)
}

// AppendHead appends the group's header:
// group_id=N,type=T[,selection_method=hash[,selection_method_param=P],fields(F,...)].
func (g *GroupDesc) AppendHead(b []byte) []byte {
	b = strconv.AppendUint(append(b, "group_id="...), uint64(g.ID), 10)
	b = append(append(b, ",type="...), g.Type.String()...)
	if len(g.SelectionFields) > 0 {
		b = append(b, ",selection_method=hash"...)
		if g.SelectionParam != 0 {
			b = strconv.AppendUint(append(b, ",selection_method_param="...), g.SelectionParam, 10)
		}
		b = append(b, ",fields("...)
		for i, f := range g.SelectionFields {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, f.String()...)
		}
		b = append(b, ')')
	}
	return b
}

// AppendText appends the whole group in ovs-ofctl(8) group syntax: the header, then each
// bucket, comma-separated.
func (g *GroupDesc) AppendText(b []byte) []byte {
	b = g.AppendHead(b)
	for i := range g.Buckets {
		b = g.Buckets[i].AppendText(append(b, ','))
	}
	return b
}

// Message is one message of a bundle. It renders as a line of an `ovs-ofctl bundle` file
// (AppendText) and encodes as an OpenFlow 1.5 message body (Encode).
type Message interface {
	// AppendText appends the bundle file line ("flow add ...", "group delete ...").
	AppendText(b []byte) []byte
	// Encode returns the message's OpenFlow type and its body (without the 8-byte header).
	Encode() (typ uint8, body []byte, err error)
}

// FlowCommand is the command of a FlowMod.
type FlowCommand uint8

// Flow mod commands.
const (
	// FlowAdd adds the flow, replacing one with the same match and priority (cookie included).
	FlowAdd FlowCommand = iota
	// FlowModifyStrict replaces the actions of the flow with exactly this match and priority,
	// whatever its cookie; it keeps the cookie and the counters and adds nothing.
	FlowModifyStrict
)

// FlowMod adds or modifies (strictly) one flow.
type FlowMod struct {
	Command FlowCommand
	Flow    *Flow
}

// AppendText implements Message: "flow add FLOW" or "flow modify_strict FLOW".
func (m FlowMod) AppendText(b []byte) []byte {
	if m.Command == FlowModifyStrict {
		b = append(b, "flow modify_strict "...)
	} else {
		b = append(b, "flow add "...)
	}
	return m.Flow.AppendText(b)
}

// DeleteCookie deletes, in every table, the flows whose cookie is exactly Cookie.
type DeleteCookie struct{ Cookie uint64 }

// AppendText implements Message: "flow delete cookie=0x.../-1".
func (m DeleteCookie) AppendText(b []byte) []byte {
	return append(appendHex(append(b, "flow delete cookie="...), m.Cookie), "/-1"...)
}

// GroupCommand is the command of a GroupMod.
type GroupCommand uint8

// Group mod commands (OpenFlow 1.5 ofp15_group_mod_command, OVS's add_or_mod extension).
const (
	// GroupAdd adds a group that must not exist.
	GroupAdd GroupCommand = iota
	// GroupAddOrMod adds the group or replaces it (its buckets included).
	GroupAddOrMod
	// GroupInsertBuckets appends Buckets after the group's last bucket (command_bucket_id=last).
	GroupInsertBuckets
)

// GroupMod adds (or replaces) a group, or appends buckets to it. Buckets are the message's
// buckets (Group.Buckets is not read), so a large group can be written as a GroupAddOrMod with
// its first buckets followed by GroupInsertBuckets messages with the rest.
type GroupMod struct {
	Command GroupCommand
	Group   *GroupDesc
	Buckets []Bucket
}

// AppendText implements Message.
func (m GroupMod) AppendText(b []byte) []byte {
	switch m.Command {
	case GroupInsertBuckets:
		b = strconv.AppendUint(append(b, "group insert_bucket group_id="...), uint64(m.Group.ID), 10)
		b = append(b, ",command_bucket_id=last"...)
	case GroupAdd:
		b = m.Group.AppendHead(append(b, "group add "...))
	default:
		b = m.Group.AppendHead(append(b, "group add_or_mod "...))
	}
	for i := range m.Buckets {
		b = m.Buckets[i].AppendText(append(b, ','))
	}
	return b
}

// DeleteGroup deletes group ID (and, in OVS, the flows that output to it).
type DeleteGroup struct{ ID uint32 }

// AppendText implements Message: "group delete group_id=N".
func (m DeleteGroup) AppendText(b []byte) []byte {
	return strconv.AppendUint(append(b, "group delete group_id="...), uint64(m.ID), 10)
}

// Text renders messages as the lines of an `ovs-ofctl -O OpenFlow15 bundle` file.
func Text(msgs []Message) []string {
	out := make([]string, len(msgs))
	var b []byte
	for i, m := range msgs {
		b = m.AppendText(b[:0])
		out[i] = string(b)
	}
	return out
}

// String is the group's text.
func (g *GroupDesc) String() string { return string(g.AppendText(nil)) }
