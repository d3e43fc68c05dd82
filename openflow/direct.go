package openflow

import (
	"encoding/binary"
	"fmt"
	"sync"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// Direct encodings of the actions every Service bucket and most flows carry (ct with nat and
// exec, move, output, group), appended in place instead of built as libOpenflow structures: the
// same bytes (TestWireOracle), a fraction of the allocations of a cold start's encoding. Every
// other action goes through libOpenflow (encodeAction).

// rawAction is an action already encoded, for libOpenflow's apply-actions instruction.
type rawAction []byte

func (r rawAction) Header() *of13.ActionHeader {
	return &of13.ActionHeader{Type: binary.BigEndian.Uint16(r), Length: uint16(len(r))}
}
func (r rawAction) Len() uint16                    { return uint16(len(r)) }
func (r rawAction) MarshalBinary() ([]byte, error) { return r, nil }
func (r rawAction) UnmarshalBinary([]byte) error {
	return fmt.Errorf("rawAction: decode not supported")
}

// nxmHeaders are the 32-bit NXM headers of the fields (unmasked), from libOpenflow's table.
var nxmHeaders = sync.OnceValue(func() map[Field]uint32 {
	m := map[Field]uint32{}
	for f := FieldInPort; f < fieldEnd; f++ {
		if h, err := findField(f.NXM(), false); err == nil {
			m[f] = h.MarshalHeader()
		}
	}
	return m
})

// Nicira action layout (nx_action_header: type OFPAT_EXPERIMENTER, length, vendor, subtype).
const (
	ofpatExperimenter  = 0xffff
	nxastCT            = 35
	nxastNAT           = 36
	nxastResubmitTable = 14
	ofpatOutput        = 0
	ofpatGroup         = 22
)

func appendNXHeader(b []byte, length, subtype uint16) []byte {
	b = binary.BigEndian.AppendUint16(b, ofpatExperimenter)
	b = binary.BigEndian.AppendUint16(b, length)
	b = binary.BigEndian.AppendUint32(b, of13.NxExperimenterID)
	return binary.BigEndian.AppendUint16(b, subtype)
}

// appendAction appends a's OpenFlow encoding to b: directly for the actions of this file,
// through libOpenflow for the others.
func appendAction(b []byte, a Action) ([]byte, error) {
	switch a := a.(type) {
	case Output:
		if a.Port >= 0xffffff00 && a.Port != PortLocal && a.Port != PortInPort && a.Port != PortNormal {
			return nil, fmt.Errorf("output to reserved port %#x", a.Port)
		}
		// ofp_action_output: type, length 16, port, max_len 0 (what ovs-ofctl sends for any
		// port but CONTROLLER), pad.
		b = binary.BigEndian.AppendUint16(b, ofpatOutput)
		b = binary.BigEndian.AppendUint16(b, 16)
		b = binary.BigEndian.AppendUint32(b, a.Port)
		return append(b, 0, 0, 0, 0, 0, 0, 0, 0), nil
	case Resubmit:
		// nx_action_resubmit: Nicira header (subtype NXAST_RESUBMIT_TABLE), in_port
		// OFPP_IN_PORT (0xfff8: keep the packet's), table, 3 bytes pad; 16 bytes.
		b = appendNXHeader(b, 16, nxastResubmitTable)
		b = binary.BigEndian.AppendUint16(b, 0xfff8)
		return append(b, a.Table, 0, 0, 0), nil
	case Group:
		b = binary.BigEndian.AppendUint16(b, ofpatGroup)
		b = binary.BigEndian.AppendUint16(b, 8)
		return binary.BigEndian.AppendUint32(b, a.ID), nil
	case Move:
		return appendMove(b, a)
	case CT:
		return appendCT(b, a)
	}
	e, err := encodeAction(a)
	if err != nil {
		return nil, err
	}
	eb, err := e.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return append(b, eb...), nil
}

// appendMove appends OFPAT_COPY_FIELD (ofp15_action_copy_field: type, length 24, n_bits,
// src_offset, dst_offset, pad, the source and destination OXM headers, pad), what ovs-ofctl
// sends for "move" in OpenFlow 1.5.
func appendMove(b []byte, a Move) ([]byte, error) {
	hs := nxmHeaders()
	src, ok1 := hs[a.Src.Field]
	dst, ok2 := hs[a.Dst.Field]
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("move %s->%s: unknown field", a.Src, a.Dst)
	}
	if a.Src.End >= a.Src.Field.Bits() || a.Dst.End >= a.Dst.Field.Bits() || a.Src.Start > a.Src.End || a.Dst.Start > a.Dst.End {
		return nil, fmt.Errorf("move %s->%s: bad bit range", a.Src, a.Dst)
	}
	if a.Src.NBits() != a.Dst.NBits() {
		return nil, fmt.Errorf("move of %d bits into %d bits", a.Src.NBits(), a.Dst.NBits())
	}
	b = binary.BigEndian.AppendUint16(b, ofpat15CopyField)
	b = binary.BigEndian.AppendUint16(b, 24)
	b = binary.BigEndian.AppendUint16(b, a.Src.NBits())
	b = binary.BigEndian.AppendUint16(b, a.Src.Start)
	b = binary.BigEndian.AppendUint16(b, a.Dst.Start)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint32(b, src)
	b = binary.BigEndian.AppendUint32(b, dst)
	return append(b, 0, 0, 0, 0), nil
}

// appendCT appends NXAST_CT (nx_action_conntrack: Nicira header, flags, zone_src 0, the
// immediate zone, recirc_table (0xff: none), pad, alg 0; 24 bytes) followed by its NXAST_NAT
// (nx_action_nat: header, pad, flags, range_present, the IPv4 or IPv6 minimum and the port
// range, padded to 8 bytes) and its exec actions; the ct's length covers them.
func appendCT(b []byte, c CT) ([]byte, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	start := len(b)
	b = appendNXHeader(b, 0, nxastCT) // length filled in below
	var flags uint16
	if c.Commit {
		flags |= of13.NX_CT_F_COMMIT
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint32(b, 0) // zone_src: immediate
	b = binary.BigEndian.AppendUint16(b, c.Zone)
	table := uint8(of13.NX_CT_RECIRC_NONE)
	if c.HasTable {
		table = c.Table
	}
	b = append(b, table, 0, 0, 0, 0, 0) // recirc_table, pad[3], alg
	if c.NAT != nil {
		var err error
		if b, err = appendNAT(b, c.NAT); err != nil {
			return nil, err
		}
	}
	for _, a := range c.Exec {
		var err error
		if b, err = appendAction(b, a); err != nil {
			return nil, err
		}
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b, nil
}

func appendNAT(b []byte, n *NAT) ([]byte, error) {
	start := len(b)
	b = appendNXHeader(b, 0, nxastNAT)
	var flags, present uint16
	var ranges []byte
	// The ranges present follow in the order ipv4 min, ipv4 max, ipv6 min (16 bytes), ipv6
	// max, proto min, proto max; only the address minimum is written (one address), and the ports
	// as given (a DNAT's one port as min and max, an SNAT's source port range).
	switch {
	case n.Dst.IsValid():
		flags = of13.NX_NAT_F_DST
		p := n.Dst.Port()
		if n.Dst.Addr().Is4() {
			present = of13.NX_NAT_RANGE_IPV4_MIN
		} else {
			present = of13.NX_NAT_RANGE_IPV6_MIN
		}
		present |= of13.NX_NAT_RANGE_PROTO_MIN | of13.NX_NAT_RANGE_PROTO_MAX
		ranges = append(n.Dst.Addr().AsSlice(), byte(p>>8), byte(p), byte(p>>8), byte(p))
	case n.Src.IsValid():
		flags = of13.NX_NAT_F_SRC
		present = of13.NX_NAT_RANGE_IPV4_MIN
		if !n.Src.Is4() {
			present = of13.NX_NAT_RANGE_IPV6_MIN
		}
		ranges = n.Src.AsSlice()
		if n.SrcPortMin != 0 || n.SrcPortMax != 0 {
			present |= of13.NX_NAT_RANGE_PROTO_MIN | of13.NX_NAT_RANGE_PROTO_MAX
			ranges = append(ranges, byte(n.SrcPortMin>>8), byte(n.SrcPortMin), byte(n.SrcPortMax>>8), byte(n.SrcPortMax))
		}
	}
	b = append(b, 0, 0) // pad
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, present)
	b = append(b, ranges...)
	for (len(b)-start)%8 != 0 {
		b = append(b, 0)
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b, nil
}
