package openflow

import (
	"encoding/binary"
	"fmt"
	"math/big"
	"runtime"
	"slices"
	"sync"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// OpenFlow 1.5 wire constants libOpenflow (an OpenFlow 1.3 library) does not define. The flow
// mod, match, instruction and action encodings are the same in 1.3 and 1.5 (1.5 uses 1.3's pad
// bytes of the flow mod as "importance", left 0); the group mod and bundle messages differ.
const (
	// Version is the OpenFlow version of every message: 1.5.
	Version = 6
	// TypeFlowMod and TypeGroupMod are the message types Encode returns.
	TypeFlowMod  = of13.Type_FlowMod
	TypeGroupMod = 15

	ofpgc15Add            = 0
	ofpgc15Delete         = 2
	ofpgc15InsertBucket   = 3
	ofpgc15AddOrMod       = 0x8000
	ofpg15BucketLast      = 0xfffffffe
	ofpg15BucketAll       = 0xffffffff
	ofpgbpt15Weight       = 0
	ofpgpt15Experimenter  = 0xffff
	ntrVendorID           = 0x00001540
	ntrtSelectionMethod   = 1
	ntrMaxSelectionMethod = 16
	ofpat15CopyField      = 28
	nxastSetTunnel        = 2
)

// MaxMessage is the largest OpenFlow message (its 16-bit length), header included.
const MaxMessage = 0xffff

// Encoded is a bundle's messages with their wire encoding (EncodeAll), made ahead of sending:
// Types[i] and Bodies[i] encode Msgs[i]. Err, when not nil, names the first message that does
// not encode (Types and Bodies are then nil), e.g. a group too large for one OpenFlow message;
// such a bundle can still be sent as text through ovs-ofctl.
type Encoded struct {
	Msgs   []Message
	Types  []uint8
	Bodies [][]byte
	Err    error
}

// ParallelMin is the bundle size from which EncodeAll encodes on GOMAXPROCS goroutines (each
// message's encoding is independent of the others).
var ParallelMin = 512

// EncodeAll encodes msgs (see Encoded).
func EncodeAll(msgs []Message) *Encoded {
	e := &Encoded{Msgs: msgs, Types: make([]uint8, len(msgs)), Bodies: make([][]byte, len(msgs))}
	workers := runtime.GOMAXPROCS(0)
	if len(msgs) < ParallelMin || workers < 2 {
		if i, err := encodeRange(msgs, e.Types, e.Bodies); err != nil {
			return &Encoded{Msgs: msgs, Err: messageError(msgs[i], err)}
		}
		return e
	}
	type failure struct {
		i   int
		err error
	}
	fails := make([]failure, workers)
	var wg sync.WaitGroup
	per := (len(msgs) + workers - 1) / workers
	for w := range workers {
		lo, hi := min(w*per, len(msgs)), min((w+1)*per, len(msgs))
		fails[w].i = -1
		wg.Go(func() {
			if i, err := encodeRange(msgs[lo:hi], e.Types[lo:hi], e.Bodies[lo:hi]); err != nil {
				fails[w] = failure{lo + i, err}
			}
		})
	}
	wg.Wait()
	for _, f := range fails { // the first failing message of the bundle
		if f.i >= 0 {
			return &Encoded{Msgs: msgs, Err: messageError(msgs[f.i], f.err)}
		}
	}
	return e
}

func encodeRange(msgs []Message, types []uint8, bodies [][]byte) (int, error) {
	for i, m := range msgs {
		var err error
		if types[i], bodies[i], err = m.Encode(); err != nil {
			return i, err
		}
	}
	return 0, nil
}

// messageError is err with the message's text (its first 120 bytes: a group of many buckets is
// hundreds of kB).
func messageError(m Message, err error) error {
	return fmt.Errorf("%w in %.120q", err, m.AppendText(nil))
}

// Encode encodes every message, or returns the first one's error.
func Encode(msgs []Message) (types []uint8, bodies [][]byte, err error) {
	e := EncodeAll(msgs)
	return e.Types, e.Bodies, e.Err
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// matchRank is the order match TLVs are encoded in: every field after its prerequisites
// (ovs-fields(7) "Prerequisites"), as OVS's own encoder orders them for the fields used here.
func matchRank(f Field) int {
	// Even ranks are the IPv4 pipeline's (their order fixes the bytes of every existing flow);
	// the IPv6 fields take the odd ranks next to their IPv4 counterparts.
	switch f {
	case FieldInPort:
		return 0
	case FieldEthSrc:
		return 2
	case FieldEthDst:
		return 4
	case FieldEthType:
		return 6
	case FieldIPProto:
		return 8
	case FieldIPv4Src:
		return 10
	case FieldIPv6Src:
		return 11
	case FieldIPv4Dst:
		return 12
	case FieldIPv6Dst:
		return 13
	case FieldIPFrag:
		return 14
	case FieldARPOp:
		return 16
	case FieldARPSPA:
		return 18
	case FieldARPTPA:
		return 20
	case FieldTCPSrc, FieldUDPSrc:
		return 22
	case FieldTCPDst, FieldUDPDst:
		return 24
	case FieldTCPFlags:
		return 26
	case FieldICMPType:
		return 28
	case FieldICMPv6Type:
		return 29
	case FieldICMPv6Code:
		return 31
	case FieldNDTarget: // after icmpv6_type, its prerequisite
		return 33
	case FieldNDSLL:
		return 35
	case FieldNDTLL:
		return 37
	case FieldCTState:
		return 80
	case FieldCTMark:
		return 82
	case FieldCTLabel:
		return 84
	case FieldTunID:
		return 86
	case FieldTunSrc:
		return 88
	case FieldTunIPv6Src:
		return 89
	}
	if f >= FieldReg0 && f < FieldReg0+16 {
		return 40 + 2*int(f-FieldReg0)
	}
	return 200
}

// Encode implements Message: an OFPT_FLOW_MOD. As ovs-ofctl does in OpenFlow 1.1+, an add
// carries the new flow's cookie, while a modify_strict carries cookie 0 and cookie mask 0 (it
// matches the flow whatever its cookie and leaves the cookie as it is).
//
// The message is appended into one buffer (appendFlowModHeader, appendMatch,
// appendInstructions): the same bytes as libOpenflow's FlowMod, match and instruction
// structures made (TestWireOracle, TestNativeEquivalence), without them.
func (m FlowMod) Encode() (uint8, []byte, error) {
	f := m.Flow
	var cookie uint64
	var cmd uint8
	switch m.Command {
	case FlowAdd:
		cmd, cookie = of13.FC_ADD, f.Cookie
	case FlowModifyStrict:
		cmd = of13.FC_MODIFY_STRICT
	default:
		return 0, nil, fmt.Errorf("flow mod command %d", m.Command)
	}
	b := make([]byte, 0, flowModSize(f))
	b = appendFlowModHeader(b, cookie, 0, f.Table, cmd, f.IdleTimeout, f.Priority)
	b, err := appendMatch(b, f)
	if err != nil {
		return 0, nil, err
	}
	if b, err = appendInstructions(b, f.Actions); err != nil {
		return 0, nil, err
	}
	return finishFlowMod(b)
}

// flowModSize is a guess of f's encoded size (the buffer's capacity).
func flowModSize(f *Flow) int { return 40 + 8 + 16*(len(f.Match)+2) + 8 + 48*len(f.Actions) }

// appendFlowModHeader appends the 40 bytes of an ofp13_flow_mod after the OpenFlow header
// (cookie, cookie mask, table, command, idle and hard timeouts, priority, buffer id, out_port,
// out_group, flags, pad), with what libOpenflow's NewFlowMod leaves in the others: no buffer,
// OFPP_ANY and OFPG_ANY, no flags, hard timeout 0.
func appendFlowModHeader(b []byte, cookie, cookieMask uint64, table, cmd uint8, idle, prio uint16) []byte {
	b = binary.BigEndian.AppendUint64(b, cookie)
	b = binary.BigEndian.AppendUint64(b, cookieMask)
	b = append(b, table, cmd)
	b = binary.BigEndian.AppendUint16(b, idle)
	b = binary.BigEndian.AppendUint16(b, 0) // hard timeout
	b = binary.BigEndian.AppendUint16(b, prio)
	b = binary.BigEndian.AppendUint32(b, 0xffffffff) // buffer id: none
	b = binary.BigEndian.AppendUint32(b, of13.P_ANY)
	b = binary.BigEndian.AppendUint32(b, of13.P_ANY) // out_group (OFPG_ANY, the same value)
	return append(b, 0, 0, 0, 0)                     // flags, pad
}

// finishFlowMod checks the flow mod body b against the largest OpenFlow message.
func finishFlowMod(b []byte) (uint8, []byte, error) {
	if 8+len(b) > MaxMessage {
		return 0, nil, fmt.Errorf("flow mod of %d bytes too long for OpenFlow", 8+len(b))
	}
	return of13.Type_FlowMod, b, nil
}

// oxmHeader is the OXM/NXM header of one field: class, field number and payload length
// (value and mask), from libOpenflow's table of field names.
type oxmHeader struct {
	class  uint16
	field  uint8
	length uint8
}

// oxmHeaders caches oxmHeaderOf by name and mask (libOpenflow's lookup upper-cases the name and
// allocates a header each time).
var oxmHeaders sync.Map // oxmKey -> oxmHeader

type oxmKey struct {
	name    string
	hasMask bool
}

func oxmHeaderOf(name string, hasMask bool) (oxmHeader, error) {
	k := oxmKey{name, hasMask}
	if h, ok := oxmHeaders.Load(k); ok {
		return h.(oxmHeader), nil
	}
	f, err := findField(name, hasMask)
	if err != nil {
		return oxmHeader{}, err
	}
	fld := f.Field << 1
	if hasMask {
		fld |= 1
	}
	h := oxmHeader{class: f.Class, field: fld, length: f.Length}
	oxmHeaders.Store(k, h)
	return h, nil
}

// appendTLV appends one match TLV: the header of name, value and mask (nil: unmasked).
func appendTLV(b []byte, name string, value, mask []byte) ([]byte, error) {
	h, err := oxmHeaderOf(name, mask != nil)
	if err != nil {
		return nil, err
	}
	if int(h.length) != len(value)+len(mask) {
		return nil, fmt.Errorf("field %s is %d bytes, not %d", name, h.length, len(value)+len(mask))
	}
	b = binary.BigEndian.AppendUint16(b, h.class)
	b = append(b, h.field, h.length)
	b = append(b, value...)
	return append(b, mask...), nil
}

// matchTLV is one TLV of a match before they are ordered: its rank (matchRank) and its
// name, value and mask.
type matchTLV struct {
	rank        int
	name        string
	value, mask []byte
}

// appendMatch appends f's ofp_match: type OXM, length (without padding), the TLVs (the
// protocol's eth_type and ip_proto, then each field, ordered by matchRank, stable), padded to
// a multiple of 8.
func appendMatch(b []byte, f *Flow) ([]byte, error) {
	var arr [12]matchTLV
	tlvs := arr[:0]
	pi := protoInfos[f.Protocol]
	if pi.ethType >= 0 {
		tlvs = append(tlvs, matchTLV{matchRank(FieldEthType), "OXM_OF_ETH_TYPE", be16(uint16(pi.ethType)), nil})
	}
	if pi.ipProto >= 0 {
		tlvs = append(tlvs, matchTLV{matchRank(FieldIPProto), "OXM_OF_IP_PROTO", []byte{byte(pi.ipProto)}, nil})
	}
	var seen [4]uint64 // ranks (< 256) already matched
	for _, mt := range f.Match {
		r := matchRank(mt.Field())
		if seen[r/64]&(1<<(r%64)) != 0 {
			return nil, fmt.Errorf("field %s matched twice", mt.Field())
		}
		seen[r/64] |= 1 << (r % 64)
		name, v, mask, err := mt.tlv(f.Protocol)
		if err != nil {
			return nil, err
		}
		tlvs = append(tlvs, matchTLV{r, name, v, mask})
	}
	slices.SortStableFunc(tlvs, func(a, b matchTLV) int { return a.rank - b.rank })
	start := len(b)
	b = append(b, 0, 1, 0, 0) // OFPMT_OXM, length below
	for _, t := range tlvs {
		var err error
		if b, err = appendTLV(b, t.name, t.value, t.mask); err != nil {
			return nil, err
		}
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	for (len(b)-start)%8 != 0 {
		b = append(b, 0)
	}
	return b, nil
}

// Encode implements Message: an OFPFC_DELETE in every table with cookie mask all ones.
func (m DeleteCookie) Encode() (uint8, []byte, error) {
	b := make([]byte, 0, 48)
	b = appendFlowModHeader(b, m.Cookie, ^uint64(0), of13.OFPTT_ALL, of13.FC_DELETE, 0, 0)
	b = append(b, 0, 1, 0, 4, 0, 0, 0, 0) // an empty OXM match, padded
	return finishFlowMod(b)
}

// appendInstructions appends an action list's instructions: one apply-actions instruction with
// every action, then goto-table if the list ends with one; drop (alone) is no instruction at
// all. Output, Group, Move and CT are appended directly (direct.go), the others through
// libOpenflow's actions (encodeAction).
func appendInstructions(b []byte, acts []Action) ([]byte, error) {
	if len(acts) == 1 {
		if _, ok := acts[0].(Drop); ok {
			return b, nil
		}
	}
	goto_, hasGoto := GotoTable{}, false
	if n := len(acts); n > 0 {
		if g, ok := acts[n-1].(GotoTable); ok {
			goto_, hasGoto = g, true
			acts = acts[:n-1]
		}
	}
	if len(acts) > 0 {
		start := len(b)
		b = append(b, 0, of13.InstrType_APPLY_ACTIONS, 0, 0, 0, 0, 0, 0) // type, length below, pad
		for _, a := range acts {
			switch a.(type) {
			case Output, Group, Move, CT:
				var err error
				if b, err = appendAction(b, a); err != nil {
					return nil, err
				}
			default:
				e, err := encodeAction(a)
				if err != nil {
					return nil, err
				}
				eb, err := e.MarshalBinary()
				if err != nil {
					return nil, err
				}
				if len(eb) != int(e.Len()) {
					return nil, fmt.Errorf("action %T encodes %d bytes, not %d", a, len(eb), e.Len())
				}
				b = append(b, eb...)
			}
		}
		binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	}
	if hasGoto {
		b = append(b, 0, of13.InstrType_GOTO_TABLE, 0, 8, goto_.Table, 0, 0, 0)
	}
	return b, nil
}

// header returns libOpenflow's field header of r's field (NXM) and r's offset and width.
func header(r FieldRef) (*of13.MatchField, uint16, uint16, error) {
	f, err := findField(r.Field.NXM(), false)
	if err != nil {
		return nil, 0, 0, err
	}
	if r.End >= uint16(f.Length)*8 || r.Start > r.End {
		return nil, 0, 0, fmt.Errorf("bad bit range %s", r)
	}
	return f, r.Start, r.NBits(), nil
}

func ofsNbits(ofs, n uint16) uint16 { return ofs<<6 | (n - 1) }

// encodeAction encodes one action as a libOpenflow action: those of direct.go as their bytes.
func encodeAction(a Action) (of13.Action, error) {
	switch a := a.(type) {
	case Output, Group, Move, CT, Resubmit:
		b, err := appendAction(nil, a)
		if err != nil {
			return nil, err
		}
		return rawAction(b), nil
	case OutputField:
		f, ofs, n, err := header(a.Src)
		if err != nil {
			return nil, err
		}
		return of13.NewOutputFromField(f, ofsNbits(ofs, n)), nil
	case Load:
		f, ofs, n, err := header(a.Dst)
		if err != nil {
			return nil, err
		}
		return loadValue(a.Value, f, ofs, n)
	case SetField:
		if err := a.check(); err != nil {
			return nil, err
		}
		f, _, n, err := header(Ref(a.Field))
		if err != nil {
			return nil, err
		}
		if a.ip && a.addr.Is6() {
			return setBytes(f, a.addr.AsSlice()), nil
		}
		return loadValue(a.Value, f, 0, n)
	case ModDLSrc:
		return setMAC(FieldEthSrc, a.MAC)
	case ModDLDst:
		return setMAC(FieldEthDst, a.MAC)
	case SetTunnel:
		if a.ID > 0xffffffff {
			return nil, fmt.Errorf("set_tunnel:%#x wider than 32 bits", a.ID)
		}
		h := of13.NewNxActionHeader(nxastSetTunnel)
		h.Length = 16
		return &setTunnel{NXActionHeader: h, tunID: uint32(a.ID)}, nil
	case Learn:
		return encodeLearn(a)
	case Drop:
		return nil, fmt.Errorf("drop with other actions")
	case GotoTable:
		return nil, fmt.Errorf("goto_table not last")
	}
	return nil, fmt.Errorf("action %T has no encoding", a)
}

func setMAC(f Field, mac []byte) (of13.Action, error) {
	if len(mac) != 6 {
		return nil, fmt.Errorf("MAC %x is not 6 bytes", mac)
	}
	h, _, n, err := header(Ref(f))
	if err != nil {
		return nil, err
	}
	return loadValue(binary.BigEndian.Uint64(append([]byte{0, 0}, mac...)), h, 0, n)
}

// loadValue builds the OpenFlow 1.5 set-field action that writes value into field bits
// [ofs, ofs+n) (ovs-actions(7) "load" and "set_field": ovs-ofctl sends both as set-field in
// OpenFlow 1.5, masked when not the whole field; OVS refuses NXAST_REG_LOAD in OpenFlow 1.5).
func loadValue(value uint64, f *of13.MatchField, ofs, n uint16) (of13.Action, error) {
	if n > 64 {
		return nil, fmt.Errorf("load wider than 64 bits")
	}
	if n < 64 && value>>n != 0 {
		return nil, fmt.Errorf("value %#x does not fit in %d bits", value, n)
	}
	width := int(f.Length)
	v := new(big.Int).Lsh(new(big.Int).SetUint64(value), uint(ofs)).FillBytes(make([]byte, width))
	field := *f
	field.Value = &of13.ByteArrayField{Data: v, Length: uint8(width)}
	if int(n) != width*8 {
		all := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(n)), big.NewInt(1))
		m := new(big.Int).Lsh(all, uint(ofs)).FillBytes(make([]byte, width))
		field.HasMask = true
		field.Mask = &of13.ByteArrayField{Data: m, Length: uint8(width)}
		field.Length = uint8(2 * width)
	}
	return of13.NewActionSetField(field), nil
}

// setBytes builds the OpenFlow 1.5 set-field action that writes v (the whole field, network
// byte order: an IPv6 address) into f.
func setBytes(f *of13.MatchField, v []byte) of13.Action {
	field := *f
	field.Value = &of13.ByteArrayField{Data: v, Length: uint8(len(v))}
	return of13.NewActionSetField(field)
}

// setTunnel is NXAST_SET_TUNNEL (struct nx_action_set_tunnel: Nicira header, subtype 2, pad,
// 32-bit tun_id), what ovs-ofctl sends for set_tunnel with a value of 32 bits or less.
type setTunnel struct {
	*of13.NXActionHeader
	tunID uint32
}

func (a *setTunnel) Len() uint16 { return 16 }

func (a *setTunnel) MarshalBinary() ([]byte, error) {
	h, err := a.NXActionHeader.MarshalBinary()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 16)
	copy(b, h) // 10 bytes: type, length, vendor, subtype
	binary.BigEndian.PutUint32(b[12:], a.tunID)
	return b, nil
}

func (a *setTunnel) UnmarshalBinary([]byte) error {
	return fmt.Errorf("setTunnel: decode not supported")
}

// learnValue is an immediate value of a learn spec: n bits, right-aligned in 2*ceil(n/16) bytes.
func learnValue(v uint64, n uint16) ([]byte, error) {
	if n > 64 {
		return nil, fmt.Errorf("learn immediate wider than 64 bits")
	}
	if n < 64 && v>>n != 0 {
		return nil, fmt.Errorf("learn value %#x does not fit in %d bits", v, n)
	}
	b := be64(v)
	return b[8-int(2*((n+15)/16)):], nil
}

// encodeLearn encodes NXAST_LEARN with libOpenflow's learn specs.
func encodeLearn(l Learn) (of13.Action, error) {
	a := of13.NewNXActionLearn()
	a.TableID = l.Table
	a.Priority = l.Priority
	a.IdleTimeout = l.IdleTimeout
	a.HardTimeout = l.HardTimeout
	a.Cookie = l.Cookie
	for _, s := range l.Specs {
		switch s.Kind {
		case LearnMatch, LearnLoad:
			df, dofs, dn, err := header(s.Dst)
			if err != nil {
				return nil, err
			}
			spec := &of13.NXLearnSpec{DstField: &of13.NXLearnSpecField{Field: df, Ofs: dofs}}
			if s.FromField {
				sf, sofs, sn, err := header(s.Src)
				if err != nil {
					return nil, err
				}
				if sn != dn {
					return nil, fmt.Errorf("learn spec of %d bits into %d", sn, dn)
				}
				spec.SrcField = &of13.NXLearnSpecField{Field: sf, Ofs: sofs}
				if s.Kind == LearnMatch {
					spec.Header = of13.NewLearnHeaderMatchFromField(dn)
				} else {
					spec.Header = of13.NewLearnHeaderLoadFromField(dn)
				}
			} else {
				if spec.SrcValue, err = learnValue(s.Value, dn); err != nil {
					return nil, err
				}
				if s.Kind == LearnMatch {
					spec.Header = of13.NewLearnHeaderMatchFromValue(dn)
				} else {
					spec.Header = of13.NewLearnHeaderLoadFromValue(dn)
				}
			}
			a.LearnSpecs = append(a.LearnSpecs, spec)
		case LearnOutput:
			sf, sofs, sn, err := header(s.Src)
			if err != nil {
				return nil, err
			}
			a.LearnSpecs = append(a.LearnSpecs, &of13.NXLearnSpec{Header: of13.NewLearnHeaderOutputFromField(sn),
				SrcField: &of13.NXLearnSpecField{Field: sf, Ofs: sofs}})
		default:
			return nil, fmt.Errorf("learn spec kind %d", s.Kind)
		}
	}
	a.Length = a.Len()
	return a, nil
}

// finishGroupMod fills in the 16-byte ofp15_group_mod header at the start of b, which holds the
// header's room and then the buckets (the properties are appended after it).
func finishGroupMod(b []byte, cmd uint16, typ uint8, id, cmdBucket uint32) []byte {
	bucketsLen := len(b) - 16
	binary.BigEndian.PutUint16(b[0:], cmd)
	b[2] = typ
	binary.BigEndian.PutUint32(b[4:], id)
	binary.BigEndian.PutUint16(b[8:], uint16(bucketsLen))
	binary.BigEndian.PutUint32(b[12:], cmdBucket)
	return b
}

// Encode implements Message: an OFPT_GROUP_MOD of OpenFlow 1.5 (ofp15_group_mod, its buckets,
// and for a select group with SelectionFields the Netronome selection-method property).
func (m GroupMod) Encode() (uint8, []byte, error) {
	g := m.Group
	body := make([]byte, 16, 16+len(m.Buckets)*96+64)
	var err error
	for i := range m.Buckets {
		if body, err = appendBucket(body, &m.Buckets[i]); err != nil {
			return 0, nil, err
		}
	}
	var out []byte
	switch m.Command {
	case GroupInsertBuckets:
		out = finishGroupMod(body, ofpgc15InsertBucket, 0, g.ID, ofpg15BucketLast)
	case GroupAdd, GroupAddOrMod:
		cmd := uint16(ofpgc15Add)
		if m.Command == GroupAddOrMod {
			cmd = ofpgc15AddOrMod
		}
		out = finishGroupMod(body, cmd, uint8(g.Type), g.ID, ofpg15BucketAll)
		if len(g.SelectionFields) > 0 {
			if g.Type != GroupSelect {
				return 0, nil, fmt.Errorf("group %d: selection fields on a non-select group", g.ID)
			}
			if out, err = appendSelectionMethodProp(out, "hash", g.SelectionParam, g.SelectionFields); err != nil {
				return 0, nil, err
			}
		}
	default:
		return 0, nil, fmt.Errorf("group mod command %d", m.Command)
	}
	// In a bundle the message is wrapped in a 16-byte bundle-add message.
	if 8+len(out)+16 > MaxMessage {
		return 0, nil, fmt.Errorf("group %d: message of %d bytes too long for OpenFlow", g.ID, 8+len(out))
	}
	return TypeGroupMod, out, nil
}

// Encode implements Message: OFPGC15_DELETE of one group.
func (m DeleteGroup) Encode() (uint8, []byte, error) {
	return TypeGroupMod, finishGroupMod(make([]byte, 16), ofpgc15Delete, 0, m.ID, ofpg15BucketAll), nil
}

// appendHashField appends one field of a select group's fields(...): an OXM TLV whose value is
// the mask of the bits hashed, all ones here (OVS's ntr_group_prop_selection_method).
func appendHashField(b []byte, f Field) ([]byte, error) {
	switch f {
	case FieldIPv4Src, FieldIPv4Dst:
		return appendTLV(b, f.info().oxm, []byte{0xff, 0xff, 0xff, 0xff}, nil)
	case FieldIPv6Src, FieldIPv6Dst:
		return appendTLV(b, f.info().oxm, slices.Repeat([]byte{0xff}, 16), nil)
	case FieldTCPSrc, FieldTCPDst, FieldUDPSrc, FieldUDPDst:
		return appendTLV(b, f.info().oxm, []byte{0xff, 0xff}, nil)
	}
	return nil, fmt.Errorf("hash field %s not encoded", f)
}

// appendSelectionMethodProp appends the Netronome selection-method group property (OVS
// Documentation/group-selection-method-property.txt): 40 bytes (the method name at 16, the
// 64-bit selection_method_param at 32), then the field TLVs, padded to a multiple of 8; its
// length excludes the padding.
func appendSelectionMethodProp(b []byte, method string, param uint64, fields []Field) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, 40)...)
	p := b[start:]
	binary.BigEndian.PutUint16(p[0:], ofpgpt15Experimenter)
	binary.BigEndian.PutUint32(p[4:], ntrVendorID)
	binary.BigEndian.PutUint32(p[8:], ntrtSelectionMethod)
	copy(p[16:16+ntrMaxSelectionMethod], method)
	binary.BigEndian.PutUint64(p[32:], param)
	for _, f := range fields {
		var err error
		if b, err = appendHashField(b, f); err != nil {
			return nil, err
		}
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	for (len(b)-start)%8 != 0 {
		b = append(b, 0)
	}
	return b, nil
}

// appendBucket appends one ofp15_bucket: header, actions, weight property.
func appendBucket(dst []byte, bk *Bucket) ([]byte, error) {
	if bk.ID > 0xffffff00 {
		return nil, fmt.Errorf("bad bucket_id %d", bk.ID)
	}
	start := len(dst)
	dst = append(dst, make([]byte, 8)...) // the bucket header, filled in below
	if !(len(bk.Actions) == 1 && isDrop(bk.Actions[0])) {
		for _, a := range bk.Actions {
			var err error
			if dst, err = appendAction(dst, a); err != nil {
				return nil, err
			}
		}
	}
	b := dst[start:]
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)-8))
	binary.BigEndian.PutUint32(b[4:], bk.ID)
	var p [8]byte
	binary.BigEndian.PutUint16(p[0:], ofpgbpt15Weight)
	binary.BigEndian.PutUint16(p[2:], 8)
	binary.BigEndian.PutUint16(p[4:], bk.Weight)
	dst = append(dst, p[:]...)
	b = dst[start:]
	binary.BigEndian.PutUint16(b[0:], uint16(len(b)))
	return dst, nil
}

func isDrop(a Action) bool { _, ok := a.(Drop); return ok }
