package ofctl

import (
	"encoding/binary"
	"fmt"
	"math/big"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// This file translates the agent's bundle lines (flows.Plan.Lines, the ovs-ofctl(8) "bundle"
// file syntax) into OpenFlow 1.5 messages built from libOpenflow's structures (flow mods,
// OXM/NXM match fields, instructions, OpenFlow and Nicira actions). It knows a closed set of
// keywords (those the flows package writes; see ovs-fields(7), ovs-actions(7)); any other
// keyword, or a shape it does not know (e.g. note, resubmit, conjunction, a masked tp_dst), makes
// translate return an *untranslatable error so that the caller sends that whole bundle through
// ovs-ofctl instead. Correctness therefore never depends on the coverage of this file, only on
// what it does translate being exact, which TestNativeEquivalence checks against ovs-ofctl on
// a real ovs-vswitchd.

// OpenFlow 1.5 wire constants that libOpenflow (an OpenFlow 1.3 library) does not define. The
// flow mod, match, instruction and action encodings are the same in 1.3 and 1.5 (1.5 uses 1.3's
// pad bytes of the flow mod as "importance", left 0); the group mod and bundle messages differ.
const (
	ofp15Version          = 6
	ofpt15GroupMod        = 15
	ofpt15BundleControl   = 33
	ofpt15BundleAdd       = 34
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
)

// untranslatable is the reason a bundle goes through ovs-ofctl instead of the native encoder.
type untranslatable struct{ reason string }

func (u *untranslatable) Error() string { return u.reason }

func cannot(format string, args ...any) error {
	return &untranslatable{reason: fmt.Sprintf(format, args...)}
}

// ofMessage is one message of a bundle: its encoding without header (body) and the header type.
type ofMessage struct {
	typ  uint8
	body []byte
	line string
}

// translate encodes every line of a bundle, or returns an *untranslatable error naming the first
// line it cannot encode exactly.
// Bundles of at least parallelTranslateMin lines (a cold start's chunks) are encoded on
// GOMAXPROCS goroutines: each line's encoding is independent of the others.
func translate(lines []string) ([]ofMessage, error) {
	workers := runtime.GOMAXPROCS(0)
	if len(lines) < parallelTranslateMin || workers < 2 {
		return translateSerial(lines)
	}
	type failure struct {
		i   int
		err error
	}
	out := make([]ofMessage, len(lines))
	fails := make([]failure, workers)
	var wg sync.WaitGroup
	per := (len(lines) + workers - 1) / workers
	for w := range workers {
		lo, hi := min(w*per, len(lines)), min((w+1)*per, len(lines))
		fails[w].i = -1
		wg.Go(func() {
			if i, err := translateRange(lines[lo:hi], out[lo:hi]); err != nil {
				fails[w] = failure{lo + i, err}
			}
		})
	}
	wg.Wait()
	for _, f := range fails { // the first failing line of the bundle
		if f.i >= 0 {
			return nil, lineError(f.err, lines[f.i])
		}
	}
	return out, nil
}

// translateSerial is translate on the calling goroutine only.
func translateSerial(lines []string) ([]ofMessage, error) {
	out := make([]ofMessage, len(lines))
	if i, err := translateRange(lines, out); err != nil {
		return nil, lineError(err, lines[i])
	}
	return out, nil
}

// tooLongError is the size of a message too long for OpenFlow; its line (a group of many
// buckets, hundreds of kB) is quoted by its first 80 bytes only.
type tooLongError int

func (n tooLongError) Error() string {
	return fmt.Sprintf("message of %d bytes too long for OpenFlow", int(n))
}

// lineError is the untranslatable error of line.
func lineError(err error, line string) error {
	if _, ok := err.(tooLongError); ok {
		return cannot("%v in line %.80q...", err, line)
	}
	return cannot("%v in line %q", err, line)
}

// parallelTranslateMin is the bundle size from which translate uses several goroutines.
var parallelTranslateMin = 512

// translateRange encodes lines into out (same length); on failure it returns the index of the
// line and its error.
func translateRange(lines []string, out []ofMessage) (int, error) {
	for i, l := range lines {
		m, err := translateLine(l)
		if err != nil {
			return i, err
		}
		// An OpenFlow message is at most 65,535 bytes, and in a bundle it is wrapped in a 16-byte
		// bundle-add message: a longer one (a group of too many buckets for one message, see
		// flows.MaxGroupBuckets) goes through ovs-ofctl, which behaves as it always did with it.
		if 8+len(m.body)+16 > 0xffff {
			return i, tooLongError(8 + len(m.body))
		}
		m.line = l
		out[i] = m
	}
	return 0, nil
}

func translateLine(l string) (ofMessage, error) {
	switch {
	case strings.HasPrefix(l, "flow add "):
		return flowMod(of13.FC_ADD, strings.TrimPrefix(l, "flow add "))
	case strings.HasPrefix(l, "flow modify_strict "):
		return flowMod(of13.FC_MODIFY_STRICT, strings.TrimPrefix(l, "flow modify_strict "))
	case strings.HasPrefix(l, "flow delete "):
		return flowDeleteCookie(strings.TrimPrefix(l, "flow delete "))
	case strings.HasPrefix(l, "group add_or_mod "):
		return groupMod(ofpgc15AddOrMod, strings.TrimPrefix(l, "group add_or_mod "))
	case strings.HasPrefix(l, "group add "):
		return groupMod(ofpgc15Add, strings.TrimPrefix(l, "group add "))
	case strings.HasPrefix(l, "group insert_bucket "):
		return groupMod(ofpgc15InsertBucket, strings.TrimPrefix(l, "group insert_bucket "))
	case strings.HasPrefix(l, "group delete "):
		return groupDelete(strings.TrimPrefix(l, "group delete "))
	}
	return ofMessage{}, cannot("unknown command")
}

// splitTop splits s at commas outside parentheses.
func splitTop(s string) []string {
	out := make([]string, 0, strings.Count(s, ",")+1)
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

func parseUint(s string, bits int) (uint64, error) {
	return strconv.ParseUint(s, 0, bits)
}

// flowDeleteCookie encodes "cookie=0x.../-1" (the only delete shape the agent writes): an
// OFPFC_DELETE in every table of the flows with exactly that cookie.
func flowDeleteCookie(spec string) (ofMessage, error) {
	v, ok := strings.CutPrefix(spec, "cookie=")
	if !ok || !strings.HasSuffix(v, "/-1") || strings.Contains(v, ",") {
		return ofMessage{}, cannot("flow delete other than cookie=C/-1")
	}
	c, err := parseUint(strings.TrimSuffix(v, "/-1"), 64)
	if err != nil {
		return ofMessage{}, err
	}
	fm := of13.NewFlowMod()
	fm.Command = of13.FC_DELETE
	fm.TableId = of13.OFPTT_ALL
	fm.Cookie = c
	fm.CookieMask = ^uint64(0)
	fm.Priority = 0
	return marshalFlowMod(fm)
}

func marshalFlowMod(fm *of13.FlowMod) (ofMessage, error) {
	b, err := fm.MarshalBinary()
	if err != nil {
		return ofMessage{}, err
	}
	return ofMessage{typ: of13.Type_FlowMod, body: b[8:]}, nil
}

// matchSpec collects a flow's match before encoding it in prerequisite order.
type matchSpec struct {
	ethType, ipProto int // -1: not matched
	fields           map[string]of13.MatchField
}

// field returns the NXM/OXM field name (as libOpenflow's FindFieldHeaderByName knows it) with
// value (and mask, if not nil) in network byte order.
func newField(name string, value, mask []byte) (of13.MatchField, error) {
	h, err := of13.FindFieldHeaderByName(name, mask != nil)
	if err != nil {
		return of13.MatchField{}, err
	}
	f := *h
	f.Value = &of13.ByteArrayField{Data: value, Length: uint8(len(value))}
	if mask != nil {
		f.Mask = &of13.ByteArrayField{Data: mask, Length: uint8(len(mask))}
	}
	if int(f.Length) != len(value)+len(mask) {
		return of13.MatchField{}, fmt.Errorf("field %s is %d bytes, not %d", name, f.Length, len(value)+len(mask))
	}
	return f, nil
}

// order is the order match fields are encoded in: every field after its prerequisites
// (ovs-fields(7) "Prerequisites").
var order = []string{"in_port", "dl_src", "dl_dst", "eth_type", "ip_proto", "nw_src", "nw_dst",
	"nw_frag", "arp_op", "arp_spa", "arp_tpa", "tp_src", "tp_dst", "tcp_flags", "icmp_type",
	"reg0", "reg1", "reg2", "reg3", "reg4", "reg5", "reg6", "reg7",
	"ct_state", "ct_mark", "ct_label", "tun_id", "tun_src"}

// protocols are the ovs-fields(7) protocol shorthands: eth_type and ip_proto (-1: none).
var protocols = map[string][2]int{"ip": {0x0800, -1}, "tcp": {0x0800, 6}, "udp": {0x0800, 17},
	"icmp": {0x0800, 1}, "arp": {0x0806, -1}}

// flowMod encodes "flow add KEY=VALUE,...,actions=..." (OFPFC_ADD) or "flow modify_strict
// ..." (OFPFC_MODIFY_STRICT). As ovs-ofctl does in OpenFlow 1.1+, the cookie of an add is the
// new flow's cookie, while a modify carries cookie 0 and cookie mask 0: it matches the flow
// whatever its cookie and leaves the cookie as it is (the text's unmasked cookie only says
// what to set, which OpenFlow 1.5 cannot express in a modify).
func flowMod(command uint8, spec string) (ofMessage, error) {
	i := strings.Index(spec, "actions=")
	if i < 0 || (i > 0 && spec[i-1] != ',') {
		return ofMessage{}, cannot("no actions")
	}
	matchText, actText := strings.TrimSuffix(spec[:i], ","), spec[i+len("actions="):]
	fm := of13.NewFlowMod()
	fm.Command = command
	fm.Priority = 32768 // ovs-ofctl's default (OFP_DEFAULT_PRIORITY)
	fm.BufferId = 0xffffffff
	m := matchSpec{ethType: -1, ipProto: -1, fields: map[string]of13.MatchField{}}
	type pending struct{ k, v string }
	var later []pending
	for _, tok := range splitTop(matchText) {
		k, v, hasV := strings.Cut(tok, "=")
		var err error
		switch k {
		case "ip", "tcp", "udp", "icmp", "arp":
			if hasV {
				return ofMessage{}, cannot("%s=", k)
			}
			et, proto := protocols[k][0], protocols[k][1]
			if m.ethType != -1 && m.ethType != et || m.ipProto != -1 && proto != -1 && m.ipProto != proto {
				return ofMessage{}, cannot("conflicting protocols")
			}
			m.ethType = et
			if proto != -1 {
				m.ipProto = proto
			}
		case "priority":
			var p uint64
			p, err = parseUint(v, 16)
			fm.Priority = uint16(p)
		case "table":
			var t uint64
			t, err = parseUint(v, 8)
			fm.TableId = uint8(t)
		case "idle_timeout":
			var t uint64
			t, err = parseUint(v, 16)
			fm.IdleTimeout = uint16(t)
		case "hard_timeout":
			var t uint64
			t, err = parseUint(v, 16)
			fm.HardTimeout = uint16(t)
		case "cookie":
			if strings.Contains(v, "/") {
				return ofMessage{}, cannot("masked cookie in flow add")
			}
			fm.Cookie, err = parseUint(v, 64)
		default:
			if !hasV {
				return ofMessage{}, cannot("unknown match keyword %q", k)
			}
			later = append(later, pending{k, v})
		}
		if err != nil {
			return ofMessage{}, fmt.Errorf("%s: %w", k, err)
		}
	}
	for _, p := range later {
		if err := m.add(p.k, p.v); err != nil {
			return ofMessage{}, err
		}
	}
	if m.ethType != -1 {
		m.fields["eth_type"], _ = newField("OXM_OF_ETH_TYPE", be16(uint16(m.ethType)), nil)
	}
	if m.ipProto != -1 {
		m.fields["ip_proto"], _ = newField("OXM_OF_IP_PROTO", []byte{byte(m.ipProto)}, nil)
	}
	added := 0
	for _, name := range order {
		if f, ok := m.fields[name]; ok {
			fm.Match.AddField(f)
			added++
		}
	}
	if added != len(m.fields) {
		for name := range m.fields {
			if !slices.Contains(order, name) {
				return ofMessage{}, fmt.Errorf("internal: field %s has no order", name)
			}
		}
	}
	if command != of13.FC_ADD {
		fm.Cookie = 0
	}
	instrs, err := parseInstructions(actText)
	if err != nil {
		return ofMessage{}, err
	}
	for _, in := range instrs {
		fm.AddInstruction(in)
	}
	return marshalFlowMod(fm)
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// valueMask parses "V" or "V/M" as unsigned integers of bits bits.
func valueMask(s string, bits int) (uint64, *uint64, error) {
	vs, ms, masked := strings.Cut(s, "/")
	v, err := parseUint(vs, bits)
	if err != nil {
		return 0, nil, err
	}
	if !masked {
		return v, nil, nil
	}
	mk, err := parseUint(ms, bits)
	if err != nil {
		return 0, nil, err
	}
	return v, &mk, nil
}

func intBytes(v uint64, n int) []byte {
	b := be64(v)
	return b[8-n:]
}

// ipv4Mask parses "A.B.C.D", "A.B.C.D/LEN" or "A.B.C.D/MASK".
func ipv4Mask(s string) ([]byte, []byte, error) {
	as, ms, masked := strings.Cut(s, "/")
	ip := net.ParseIP(as).To4()
	if ip == nil {
		return nil, nil, fmt.Errorf("bad IPv4 address %q", as)
	}
	if !masked {
		return ip, nil, nil
	}
	if n, err := strconv.Atoi(ms); err == nil {
		if n < 0 || n > 32 {
			return nil, nil, fmt.Errorf("bad prefix length %q", ms)
		}
		mask := net.CIDRMask(n, 32)
		if n == 32 {
			return ip, nil, nil
		}
		return ip.Mask(mask), []byte(mask), nil
	}
	mask := net.ParseIP(ms).To4()
	if mask == nil {
		return nil, nil, fmt.Errorf("bad IPv4 mask %q", ms)
	}
	return ip.Mask(net.IPMask(mask)), mask, nil
}

func (m *matchSpec) set(key, name string, value, mask []byte) error {
	if _, dup := m.fields[key]; dup {
		return cannot("field %s twice", key)
	}
	f, err := newField(name, value, mask)
	if err != nil {
		return err
	}
	m.fields[key] = f
	return nil
}

// ctStateBits are the ct_state flags (ovs-fields(7) "Connection Tracking Fields").
var ctStateBits = map[string]uint32{"new": 0x01, "est": 0x02, "rel": 0x04, "rpl": 0x08, "inv": 0x10,
	"trk": 0x20, "snat": 0x40, "dnat": 0x80}

// tcpFlagBits are the tcp_flags names (ovs-fields(7) "TCP flags").
var tcpFlagBits = map[string]uint16{"fin": 0x001, "syn": 0x002, "rst": 0x004, "psh": 0x008, "ack": 0x010,
	"urg": 0x020, "ece": 0x040, "cwr": 0x080, "ns": 0x100}

// plusMinus parses "+a-b+c" flags against names.
func plusMinus[T uint16 | uint32](s string, names map[string]T) (v, mask T, err error) {
	for s != "" {
		sign := s[0]
		if sign != '+' && sign != '-' {
			return 0, 0, cannot("flags %q not in +flag-flag form", s)
		}
		s = s[1:]
		j := strings.IndexAny(s, "+-")
		if j < 0 {
			j = len(s)
		}
		bit, ok := names[s[:j]]
		if !ok {
			return 0, 0, cannot("unknown flag %q", s[:j])
		}
		mask |= bit
		if sign == '+' {
			v |= bit
		}
		s = s[j:]
	}
	return v, mask, nil
}

// add encodes one KEY=VALUE match field.
func (m *matchSpec) add(k, v string) error {
	isIP := m.ethType == 0x0800
	isARP := m.ethType == 0x0806
	switch {
	case k == "in_port":
		p, err := parseUint(v, 32)
		if v == "LOCAL" {
			p, err = ofppLocal, nil // the bridge's internal port (OFPP_LOCAL)
		}
		if err != nil {
			return cannot("in_port %q", v)
		}
		return m.set(k, "OXM_OF_IN_PORT", be32(uint32(p)), nil)
	case k == "dl_src" || k == "dl_dst":
		as, ms, masked := strings.Cut(v, "/")
		mac, err := net.ParseMAC(as)
		if err != nil || len(mac) != 6 {
			return fmt.Errorf("bad MAC %q", v)
		}
		var mask []byte
		if masked {
			mk, err := net.ParseMAC(ms)
			if err != nil || len(mk) != 6 {
				return fmt.Errorf("bad MAC mask %q", v)
			}
			mask = mk
		}
		name := map[string]string{"dl_src": "OXM_OF_ETH_SRC", "dl_dst": "OXM_OF_ETH_DST"}[k]
		return m.set(k, name, mac, mask)
	case (k == "nw_src" || k == "nw_dst") && isIP, (k == "arp_spa" || k == "arp_tpa") && isARP:
		ip, mask, err := ipv4Mask(v)
		if err != nil {
			return err
		}
		name := map[string]string{"nw_src": "OXM_OF_IPV4_SRC", "nw_dst": "OXM_OF_IPV4_DST",
			"arp_spa": "OXM_OF_ARP_SPA", "arp_tpa": "OXM_OF_ARP_TPA"}[k]
		return m.set(k, name, ip, mask)
	case k == "arp_op" && isARP:
		op, err := parseUint(v, 16)
		if err != nil {
			return err
		}
		return m.set(k, "OXM_OF_ARP_OP", be16(uint16(op)), nil)
	case (k == "tp_src" || k == "tp_dst") && (m.ipProto == 6 || m.ipProto == 17):
		if strings.Contains(v, "/") {
			return cannot("masked %s", k)
		}
		p, err := parseUint(v, 16)
		if err != nil {
			return err
		}
		proto := map[int]string{6: "TCP", 17: "UDP"}[m.ipProto]
		dir := map[string]string{"tp_src": "SRC", "tp_dst": "DST"}[k]
		return m.set(k, "OXM_OF_"+proto+"_"+dir, be16(uint16(p)), nil)
	case k == "tcp_flags" && m.ipProto == 6:
		val, mask, err := plusMinus(v, tcpFlagBits)
		if err != nil {
			return err
		}
		return m.set(k, "NXM_NX_TCP_FLAGS", be16(val), be16(mask))
	case k == "icmp_type" && m.ipProto == 1:
		t, err := parseUint(v, 8)
		if err != nil {
			return err
		}
		return m.set(k, "OXM_OF_ICMPV4_TYPE", []byte{byte(t)}, nil)
	case k == "nw_frag" && isIP:
		// ovs-fields(7) "nw_frag": bit 0 = fragment, bit 1 = later fragment.
		vm, ok := map[string][2]byte{"no": {0, 1}, "yes": {1, 1}, "first": {1, 3}, "later": {3, 3}, "not_later": {0, 2}}[v]
		if !ok {
			return cannot("nw_frag=%s", v)
		}
		return m.set(k, "NXM_NX_IP_FRAG", []byte{vm[0]}, []byte{vm[1]})
	case len(k) == 4 && strings.HasPrefix(k, "reg") && k[3] >= '0' && k[3] <= '7':
		val, mask, err := valueMask(v, 32)
		if err != nil {
			return err
		}
		name := "NXM_NX_REG" + k[3:]
		if mask == nil {
			return m.set(k, name, be32(uint32(val)), nil)
		}
		return m.set(k, name, be32(uint32(val)), be32(uint32(*mask)))
	case k == "ct_state":
		val, mask, err := plusMinus(v, ctStateBits)
		if err != nil {
			return err
		}
		return m.set(k, "NXM_NX_CT_STATE", be32(val), be32(mask))
	case k == "ct_mark":
		val, mask, err := valueMask(v, 32)
		if err != nil {
			return err
		}
		if mask == nil {
			return m.set(k, "NXM_NX_CT_MARK", be32(uint32(val)), nil)
		}
		return m.set(k, "NXM_NX_CT_MARK", be32(uint32(val)), be32(uint32(*mask)))
	case k == "ct_label":
		vs, ms, masked := strings.Cut(v, "/")
		val, err := hex128(vs)
		if err != nil {
			return err
		}
		if !masked {
			return m.set(k, "NXM_NX_CT_LABEL", val, nil)
		}
		mask, err := hex128(ms)
		if err != nil {
			return err
		}
		return m.set(k, "NXM_NX_CT_LABEL", val, mask)
	case k == "tun_id":
		val, mask, err := valueMask(v, 64)
		if err != nil {
			return err
		}
		if mask == nil {
			return m.set(k, "NXM_NX_TUN_ID", be64(val), nil)
		}
		return m.set(k, "NXM_NX_TUN_ID", be64(val), be64(*mask))
	case k == "tun_src":
		ip, mask, err := ipv4Mask(v)
		if err != nil {
			return err
		}
		return m.set(k, "NXM_NX_TUN_IPV4_SRC", ip, mask)
	}
	return cannot("unknown match field %s=%s", k, v)
}

// hex128 parses a 0x-prefixed hex number of at most 128 bits into 16 bytes.
func hex128(s string) ([]byte, error) {
	h, ok := strings.CutPrefix(s, "0x")
	if !ok {
		return nil, cannot("128-bit value %q not in hex", s)
	}
	n, ok := new(big.Int).SetString(h, 16)
	if !ok || n.BitLen() > 128 {
		return nil, fmt.Errorf("bad 128-bit value %q", s)
	}
	return n.FillBytes(make([]byte, 16)), nil
}

// parseInstructions encodes an action list: one apply-actions instruction with every action,
// then goto_table if the list ends with one; "drop" (alone) is no instruction at all.
func parseInstructions(s string) ([]of13.Instruction, error) {
	if s == "drop" {
		return nil, nil
	}
	toks := splitTop(s)
	var gotoTable *of13.InstrGotoTable
	if last := toks[len(toks)-1]; strings.HasPrefix(last, "goto_table:") {
		t, err := parseUint(strings.TrimPrefix(last, "goto_table:"), 8)
		if err != nil {
			return nil, err
		}
		gotoTable = of13.NewInstrGotoTable(uint8(t))
		toks = toks[:len(toks)-1]
	}
	var out []of13.Instruction
	if len(toks) > 0 {
		acts, err := parseActions(toks)
		if err != nil {
			return nil, err
		}
		apply := of13.NewInstrApplyActions()
		for _, a := range acts {
			if err := apply.AddAction(a, false); err != nil {
				return nil, err
			}
		}
		out = append(out, apply)
	}
	if gotoTable != nil {
		out = append(out, gotoTable)
	}
	return out, nil
}

// Reserved port numbers (OpenFlow 1.1+ ofp_port_no).
const (
	ofppInPort = 0xfffffff8
	ofppNormal = 0xfffffffa
	ofppLocal  = 0xfffffffe
)

func outputAction(port uint32) *of13.ActionOutput {
	a := of13.NewActionOutput(port)
	a.MaxLen = 0 // what ovs-ofctl sends for any port but CONTROLLER
	return a
}

func parseActions(toks []string) ([]of13.Action, error) {
	var out []of13.Action
	for _, t := range toks {
		a, err := parseAction(t)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// fieldRange parses "NXM_NX_REG0[]", "NXM_NX_REG0[3]" or "NXM_NX_REG0[0..3]": the field and its
// bit offset and width.
func fieldRange(s string) (*of13.MatchField, uint16, uint16, error) {
	name, rng, ok := strings.Cut(s, "[")
	if !ok || !strings.HasSuffix(rng, "]") {
		return nil, 0, 0, cannot("field %q has no [bits]", s)
	}
	f, err := of13.FindFieldHeaderByName(name, false)
	if err != nil || !strings.HasPrefix(name, "NXM_") {
		return nil, 0, 0, cannot("unknown field %q", name)
	}
	bits := uint16(f.Length) * 8
	rng = strings.TrimSuffix(rng, "]")
	if rng == "" {
		return f, 0, bits, nil
	}
	lo, hi, isRange := strings.Cut(rng, "..")
	if !isRange {
		hi = lo
	}
	l, err1 := strconv.ParseUint(lo, 10, 16)
	h, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil || h < l || uint16(h) >= bits {
		return nil, 0, 0, fmt.Errorf("bad bit range %q", s)
	}
	return f, uint16(l), uint16(h - l + 1), nil
}

func ofsNbits(ofs, n uint16) uint16 { return ofs<<6 | (n - 1) }

// setFieldNames maps set_field's field names (ovs-fields(7)) to NXM names.
var setFieldNames = map[string]string{"tun_dst": "NXM_NX_TUN_IPV4_DST", "tcp_dst": "NXM_OF_TCP_DST",
	"tcp_src": "NXM_OF_TCP_SRC", "udp_dst": "NXM_OF_UDP_DST", "udp_src": "NXM_OF_UDP_SRC",
	"eth_src": "NXM_OF_ETH_SRC", "eth_dst": "NXM_OF_ETH_DST", "tun_id": "NXM_NX_TUN_ID",
	"ip_src": "NXM_OF_IP_SRC", "ip_dst": "NXM_OF_IP_DST"}

// loadValue builds the OpenFlow 1.5 set-field action that writes value into field bits
// [ofs, ofs+n) (ovs-actions(7) "load" and "set_field": ovs-ofctl sends both as set-field in
// OpenFlow 1.5, masked when not the whole field; OVS refuses NXAST_REG_LOAD in OpenFlow 1.5).
func loadValue(value uint64, f *of13.MatchField, ofs, n uint16) (of13.Action, error) {
	if n > 64 {
		return nil, cannot("load wider than 64 bits")
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

// copyField is the OpenFlow 1.5 copy-field action (OFPAT_COPY_FIELD, struct
// ofp15_action_copy_field: n_bits, src_offset, dst_offset, pad, source and destination OXM
// headers, padded to 24 bytes). It is what ovs-ofctl sends for "move" in OpenFlow 1.5; OVS
// refuses NXAST_REG_MOVE in OpenFlow 1.5 and libOpenflow (an OpenFlow 1.3 library) has no
// copy-field, so this one action is encoded here, with libOpenflow's field headers.
type copyField struct {
	of13.ActionHeader
	nBits, srcOfs, dstOfs uint16
	src, dst              *of13.MatchField
}

const ofpat15CopyField = 28

func newCopyField(nBits, srcOfs, dstOfs uint16, src, dst *of13.MatchField) *copyField {
	return &copyField{ActionHeader: of13.ActionHeader{Type: ofpat15CopyField, Length: 24},
		nBits: nBits, srcOfs: srcOfs, dstOfs: dstOfs, src: src, dst: dst}
}

func (a *copyField) Len() uint16 { return 24 }

func (a *copyField) MarshalBinary() ([]byte, error) {
	b := make([]byte, 24)
	binary.BigEndian.PutUint16(b[0:], a.Type)
	binary.BigEndian.PutUint16(b[2:], 24)
	binary.BigEndian.PutUint16(b[4:], a.nBits)
	binary.BigEndian.PutUint16(b[6:], a.srcOfs)
	binary.BigEndian.PutUint16(b[8:], a.dstOfs)
	binary.BigEndian.PutUint32(b[12:], a.src.MarshalHeader())
	binary.BigEndian.PutUint32(b[16:], a.dst.MarshalHeader())
	return b, nil
}

func (a *copyField) UnmarshalBinary([]byte) error {
	return fmt.Errorf("copyField: decode not supported")
}

// setTunnel is NXAST_SET_TUNNEL (struct nx_action_set_tunnel: Nicira header, subtype 2, pad,
// 32-bit tun_id; ovs-actions(7) "set_tunnel"), what ovs-ofctl sends for set_tunnel with a
// value of 32 bits or less; built on libOpenflow's Nicira action header, which has no such
// action.
type setTunnel struct {
	*of13.NXActionHeader
	tunID uint32
}

func newSetTunnel(id uint32) *setTunnel {
	h := of13.NewNxActionHeader(2) // NXAST_SET_TUNNEL
	h.Length = 16
	return &setTunnel{NXActionHeader: h, tunID: id}
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

func macValue(s string) (uint64, error) {
	mac, err := net.ParseMAC(s)
	if err != nil || len(mac) != 6 {
		return 0, fmt.Errorf("bad MAC %q", s)
	}
	return binary.BigEndian.Uint64(append([]byte{0, 0}, mac...)), nil
}

func parseAction(t string) (of13.Action, error) {
	switch t {
	case "LOCAL":
		return outputAction(ofppLocal), nil
	case "IN_PORT":
		return outputAction(ofppInPort), nil
	case "normal", "NORMAL":
		return outputAction(ofppNormal), nil
	}
	name, arg, _ := strings.Cut(t, ":")
	if i := strings.IndexByte(t, '('); i >= 0 && (strings.IndexByte(t, ':') < 0 || i < strings.IndexByte(t, ':')) {
		name, arg = t[:i], t[i:]
	}
	switch name {
	case "output":
		if strings.HasPrefix(arg, "NXM_") {
			f, ofs, n, err := fieldRange(arg)
			if err != nil {
				return nil, err
			}
			return of13.NewOutputFromField(f, ofsNbits(ofs, n)), nil
		}
		p, err := parseUint(arg, 32)
		if err != nil || p >= 0xffffff00 {
			return nil, cannot("output port %q", arg)
		}
		return outputAction(uint32(p)), nil
	case "group":
		g, err := parseUint(arg, 32)
		if err != nil {
			return nil, err
		}
		return of13.NewActionGroup(uint32(g)), nil
	case "load":
		vs, dst, ok := strings.Cut(arg, "->")
		if !ok {
			return nil, fmt.Errorf("load without ->")
		}
		if !strings.HasPrefix(vs, "0x") && (vs == "" || vs[0] < '0' || vs[0] > '9') {
			return nil, cannot("load from a field")
		}
		v, err := parseUint(vs, 64)
		if err != nil {
			return nil, cannot("load value %q", vs)
		}
		f, ofs, n, err := fieldRange(dst)
		if err != nil {
			return nil, err
		}
		return loadValue(v, f, ofs, n)
	case "move":
		src, dst, ok := strings.Cut(arg, "->")
		if !ok {
			return nil, fmt.Errorf("move without ->")
		}
		sf, sofs, sn, err := fieldRange(src)
		if err != nil {
			return nil, err
		}
		df, dofs, dn, err := fieldRange(dst)
		if err != nil {
			return nil, err
		}
		if sn != dn {
			return nil, fmt.Errorf("move of %d bits into %d bits", sn, dn)
		}
		return newCopyField(sn, sofs, dofs, sf, df), nil
	case "set_field":
		vs, dst, ok := strings.Cut(arg, "->")
		if !ok || strings.Contains(vs, "/") {
			return nil, cannot("set_field %q", arg)
		}
		nxm, ok := setFieldNames[dst]
		if !ok {
			return nil, cannot("set_field to %s", dst)
		}
		f, _ := of13.FindFieldHeaderByName(nxm, false)
		var v uint64
		var err error
		switch f.Length {
		case 4:
			if ip := net.ParseIP(vs).To4(); ip != nil && strings.Contains(vs, ".") {
				v = uint64(binary.BigEndian.Uint32(ip))
			} else {
				v, err = parseUint(vs, 32)
			}
		case 6:
			v, err = macValue(vs)
		default:
			v, err = parseUint(vs, int(f.Length)*8)
		}
		if err != nil {
			return nil, fmt.Errorf("set_field value %q: %w", vs, err)
		}
		return loadValue(v, f, 0, uint16(f.Length)*8)
	case "mod_dl_src", "mod_dl_dst":
		v, err := macValue(arg)
		if err != nil {
			return nil, err
		}
		f, _ := of13.FindFieldHeaderByName(map[string]string{"mod_dl_src": "NXM_OF_ETH_SRC", "mod_dl_dst": "NXM_OF_ETH_DST"}[name], false)
		return loadValue(v, f, 0, 48)
	case "ct":
		return parseCT(arg)
	case "learn":
		return parseLearn(arg)
	case "set_tunnel":
		v, err := parseUint(arg, 64)
		if err != nil || v > 0xffffffff {
			return nil, cannot("set_tunnel:%s", arg) // ovs-ofctl sends NXAST_SET_TUNNEL64 then
		}
		return newSetTunnel(uint32(v)), nil
	}
	return nil, cannot("unknown action %q", t)
}

// parseCT encodes "(commit,table=N,zone=N,nat[(...)],exec(...))" as NXAST_CT with its nested
// NXAST_NAT and exec actions (ovs-actions(7) "The ct action").
func parseCT(arg string) (of13.Action, error) {
	if !strings.HasPrefix(arg, "(") || !strings.HasSuffix(arg, ")") {
		return nil, cannot("ct%s", arg)
	}
	ct := of13.NewNXActionConnTrack()
	var nat *of13.NXActionCTNAT
	var exec []of13.Action
	for _, t := range splitTop(arg[1 : len(arg)-1]) {
		k, v, _ := strings.Cut(t, "=")
		switch {
		case t == "commit":
			ct.Commit()
		case k == "table":
			n, err := parseUint(v, 8)
			if err != nil {
				return nil, err
			}
			ct.Table(uint8(n))
		case k == "zone":
			n, err := parseUint(v, 16)
			if err != nil {
				return nil, cannot("zone %q", v)
			}
			ct.ZoneImm(uint16(n))
		case t == "nat":
			nat = of13.NewNXActionCTNAT()
		case strings.HasPrefix(t, "nat(") && strings.HasSuffix(t, ")"):
			var err error
			if nat, err = parseNAT(t[4 : len(t)-1]); err != nil {
				return nil, err
			}
		case strings.HasPrefix(t, "exec(") && strings.HasSuffix(t, ")"):
			acts, err := parseActions(splitTop(t[5 : len(t)-1]))
			if err != nil {
				return nil, err
			}
			exec = acts
		default:
			return nil, cannot("ct argument %q", t)
		}
	}
	if nat != nil {
		ct.AddAction(nat)
	}
	ct.AddAction(exec...)
	return ct, nil
}

// parseNAT encodes "dst=IP[:PORT]" or "src=IP[:PORT]" (one address, one port).
func parseNAT(s string) (*of13.NXActionCTNAT, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || strings.ContainsAny(v, ",-[]") {
		return nil, cannot("nat(%s)", s)
	}
	nat := of13.NewNXActionCTNAT()
	var err error
	switch k {
	case "dst":
		err = nat.SetDNAT()
	case "src":
		err = nat.SetSNAT()
	default:
		return nil, cannot("nat(%s)", s)
	}
	if err != nil {
		return nil, err
	}
	ipText, portText, hasPort := strings.Cut(v, ":")
	ip := net.ParseIP(ipText).To4()
	if ip == nil {
		return nil, cannot("nat address %q", ipText)
	}
	nat.SetRangeIPv4Min(ip)
	if hasPort {
		p, err := parseUint(portText, 16)
		if err != nil {
			return nil, err
		}
		port := uint16(p)
		// Both ends: libOpenflow writes proto max whenever proto min is set; a range of one port
		// is what "dst=IP:PORT" means (ovs-actions(7) "nat").
		nat.SetRangeProtoMin(&port)
		nat.SetRangeProtoMax(&port)
	}
	return nat, nil
}

// groupDelete encodes "group_id=N".
func groupDelete(spec string) (ofMessage, error) {
	v, ok := strings.CutPrefix(spec, "group_id=")
	if !ok || strings.Contains(v, ",") {
		return ofMessage{}, cannot("group delete other than group_id=N")
	}
	id, err := parseUint(v, 32)
	if err != nil {
		return ofMessage{}, err
	}
	return ofMessage{typ: ofpt15GroupMod, body: finishGroupMod(make([]byte, 16), ofpgc15Delete, 0, uint32(id), ofpg15BucketAll, nil)}, nil
}

// finishGroupMod fills in the 16-byte ofp15_group_mod header at the start of b, which holds the
// header's room and then the buckets, and appends the properties.
func finishGroupMod(b []byte, cmd uint16, typ uint8, id, cmdBucket uint32, props []byte) []byte {
	bucketsLen := len(b) - 16
	binary.BigEndian.PutUint16(b[0:], cmd)
	b[2] = typ
	binary.BigEndian.PutUint32(b[4:], id)
	binary.BigEndian.PutUint16(b[8:], uint16(bucketsLen))
	binary.BigEndian.PutUint32(b[12:], cmdBucket)
	return append(b, props...)
}

// groupMod encodes "group_id=N,type=T[,selection_method=M][,fields(F,...)],bucket=...,..."
// (add, add_or_mod) or "group_id=N,command_bucket_id=last,bucket=..." (insert_bucket).
func groupMod(cmd uint16, spec string) (ofMessage, error) {
	toks := splitTop(spec)
	var (
		id, cmdBucket uint32 = 0, ofpg15BucketAll
		haveID        bool
		typ           = -1
		method        string
		fields        []of13.MatchField
		// body is the group mod's 16-byte header (filled in last) and then the buckets, encoded
		// in place: the binary form is shorter than the text.
		body = make([]byte, 16, 16+len(spec))
	)
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		k, v, _ := strings.Cut(t, "=")
		switch {
		case k == "group_id":
			n, err := parseUint(v, 32)
			if err != nil {
				return ofMessage{}, err
			}
			id, haveID = uint32(n), true
		case k == "type" && cmd != ofpgc15InsertBucket:
			t, ok := map[string]int{"all": 0, "select": 1, "indirect": 2}[v]
			if !ok {
				return ofMessage{}, cannot("group type %q", v)
			}
			typ = t
		case k == "selection_method" && cmd != ofpgc15InsertBucket:
			if v != "hash" && v != "dp_hash" {
				return ofMessage{}, cannot("selection_method=%s", v)
			}
			method = v
		case strings.HasPrefix(t, "fields(") && strings.HasSuffix(t, ")") && cmd != ofpgc15InsertBucket:
			for _, name := range strings.Split(t[7:len(t)-1], ",") {
				f, err := hashField(name)
				if err != nil {
					return ofMessage{}, err
				}
				fields = append(fields, f)
			}
		case k == "command_bucket_id" && cmd == ofpgc15InsertBucket:
			if v != "last" {
				return ofMessage{}, cannot("command_bucket_id=%s", v)
			}
			cmdBucket = ofpg15BucketLast
		case k == "bucket":
			// A bucket is "bucket=bucket_id:N,weight:N,actions=A,A,..." up to the next "bucket=".
			j := i + 1
			for j < len(toks) && !strings.HasPrefix(toks[j], "bucket=") {
				j++
			}
			toks[i] = v
			var err error
			if body, err = appendBucket(body, toks[i:j]); err != nil {
				return ofMessage{}, err
			}
			i = j - 1
		default:
			return ofMessage{}, cannot("group keyword %q", t)
		}
	}
	if !haveID {
		return ofMessage{}, fmt.Errorf("no group_id")
	}
	if cmd == ofpgc15InsertBucket {
		if cmdBucket != ofpg15BucketLast {
			return ofMessage{}, cannot("insert_bucket without command_bucket_id=last")
		}
		return ofMessage{typ: ofpt15GroupMod, body: finishGroupMod(body, cmd, 0, id, cmdBucket, nil)}, nil
	}
	if typ < 0 {
		return ofMessage{}, cannot("group without type")
	}
	if (method != "" || len(fields) > 0) && typ != 1 {
		return ofMessage{}, cannot("selection method on a non-select group")
	}
	if len(fields) > 0 && method != "hash" {
		return ofMessage{}, cannot("fields without selection_method=hash")
	}
	var props []byte
	if method != "" {
		props = selectionMethodProp(method, fields)
	}
	return ofMessage{typ: ofpt15GroupMod, body: finishGroupMod(body, cmd, uint8(typ), id, ofpg15BucketAll, props)}, nil
}

// hashField is one field of a select group's fields(...): an OXM TLV whose value is the mask of
// the bits hashed, all ones here (OVS's ntr_group_prop_selection_method).
func hashField(name string) (of13.MatchField, error) {
	switch name {
	case "ip_src", "nw_src":
		return newField("OXM_OF_IPV4_SRC", []byte{0xff, 0xff, 0xff, 0xff}, nil)
	case "ip_dst", "nw_dst":
		return newField("OXM_OF_IPV4_DST", []byte{0xff, 0xff, 0xff, 0xff}, nil)
	case "tcp_src", "tcp_dst", "udp_src", "udp_dst":
		return newField("OXM_OF_"+strings.ToUpper(name), []byte{0xff, 0xff}, nil)
	}
	return of13.MatchField{}, cannot("hash field %q", name)
}

// selectionMethodProp is the Netronome selection-method group property (OVS
// Documentation/group-selection-method-property.txt): 40 bytes, then the field TLVs, padded to
// a multiple of 8; its length excludes the padding.
func selectionMethodProp(method string, fields []of13.MatchField) []byte {
	b := make([]byte, 40)
	binary.BigEndian.PutUint16(b[0:], ofpgpt15Experimenter)
	binary.BigEndian.PutUint32(b[4:], ntrVendorID)
	binary.BigEndian.PutUint32(b[8:], ntrtSelectionMethod)
	copy(b[16:16+ntrMaxSelectionMethod], method)
	for _, f := range fields {
		fb, _ := f.MarshalBinary()
		b = append(b, fb...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// bucket encodes one ofp15_bucket from "bucket_id:N", "weight:N", "actions=A", "A"... tokens.
func appendBucket(dst []byte, toks []string) ([]byte, error) {
	var (
		id      uint64
		haveID  bool
		weight  = -1
		actToks []string
		inActs  bool
	)
	for _, t := range toks {
		switch {
		case inActs:
			actToks = append(actToks, t)
		case strings.HasPrefix(t, "bucket_id:"):
			n, err := parseUint(strings.TrimPrefix(t, "bucket_id:"), 32)
			if err != nil || n > 0xffffff00 {
				return nil, fmt.Errorf("bad bucket_id %q", t)
			}
			id, haveID = n, true
		case strings.HasPrefix(t, "weight:"):
			n, err := parseUint(strings.TrimPrefix(t, "weight:"), 16)
			if err != nil {
				return nil, err
			}
			weight = int(n)
		case strings.HasPrefix(t, "actions="):
			inActs = true
			actToks = append(actToks, strings.TrimPrefix(t, "actions="))
		default:
			return nil, cannot("bucket keyword %q", t)
		}
	}
	if weight < 0 {
		// ovs-ofctl gives select buckets a default weight; only explicit weights are translated.
		return nil, cannot("bucket without weight")
	}
	if !haveID {
		// ovs-ofctl numbers such buckets itself; only explicit ids are translated.
		return nil, cannot("bucket without bucket_id")
	}
	start := len(dst)
	dst = append(dst, make([]byte, 8)...) // the bucket header, filled in below
	templated := false
	if len(actToks) == 1 {
		dst, templated = appendNATActions(dst, actToks[0])
	}
	if !templated && !(len(actToks) == 1 && actToks[0] == "drop") && len(actToks) > 0 {
		list, err := parseActions(actToks)
		if err != nil {
			return nil, err
		}
		for _, a := range list {
			ab, err := a.MarshalBinary()
			if err != nil {
				return nil, err
			}
			dst = append(dst, ab...)
		}
	}
	b := dst[start:]
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)-8))
	binary.BigEndian.PutUint32(b[4:], uint32(id))
	if weight >= 0 {
		var p [8]byte
		binary.BigEndian.PutUint16(p[0:], ofpgbpt15Weight)
		binary.BigEndian.PutUint16(p[2:], 8)
		binary.BigEndian.PutUint16(p[4:], uint16(weight))
		dst = append(dst, p[:]...)
		b = dst[start:]
	}
	binary.BigEndian.PutUint16(b[0:], uint16(len(b)))
	return dst, nil
}

// learnFieldNames maps the ovs-fields(7) names allowed as "name=value" in learn to NXM names.
var learnFieldNames = map[string]string{"eth_type": "NXM_OF_ETH_TYPE", "dl_type": "NXM_OF_ETH_TYPE",
	"nw_proto": "NXM_OF_IP_PROTO", "ip_proto": "NXM_OF_IP_PROTO"}

// learnValue is an immediate value of a learn spec: n bits, right-aligned in 2*ceil(n/16) bytes.
func learnValue(s string, n uint16) ([]byte, error) {
	if n > 64 {
		return nil, cannot("learn immediate wider than 64 bits")
	}
	v, err := parseUint(s, 64)
	if err != nil {
		return nil, cannot("learn value %q", s)
	}
	if n < 64 && v>>n != 0 {
		return nil, fmt.Errorf("learn value %q does not fit in %d bits", s, n)
	}
	return intBytes(v, int(2*((n+15)/16))), nil
}

// parseLearn encodes "(table=N,priority=N,idle_timeout=N,hard_timeout=N,cookie=N,SPEC,...)" as
// NXAST_LEARN with libOpenflow's learn specs (ovs-actions(7) "The learn action"): FIELD=VALUE
// and DST[..]=SRC[..] match specs, load:VALUE->DST[..] and load:SRC[..]->DST[..] load specs,
// output:SRC[..].
func parseLearn(arg string) (of13.Action, error) {
	if !strings.HasPrefix(arg, "(") || !strings.HasSuffix(arg, ")") {
		return nil, cannot("learn%s", arg)
	}
	l := of13.NewNXActionLearn()
	l.TableID = 1 // ovs-ofctl's defaults
	l.Priority = 32768
	for _, t := range splitTop(arg[1 : len(arg)-1]) {
		k, v, hasV := strings.Cut(t, "=")
		num := func(bits int) (uint64, error) { return parseUint(v, bits) }
		var err error
		var n uint64
		switch {
		case k == "table" && hasV:
			n, err = num(8)
			l.TableID = uint8(n)
		case k == "priority" && hasV:
			n, err = num(16)
			l.Priority = uint16(n)
		case k == "idle_timeout" && hasV:
			n, err = num(16)
			l.IdleTimeout = uint16(n)
		case k == "hard_timeout" && hasV:
			n, err = num(16)
			l.HardTimeout = uint16(n)
		case k == "cookie" && hasV:
			l.Cookie, err = num(64)
		case strings.HasPrefix(t, "load:"):
			src, dst, ok := strings.Cut(strings.TrimPrefix(t, "load:"), "->")
			if !ok {
				return nil, fmt.Errorf("learn load without ->")
			}
			df, dofs, dn, err := fieldRange(dst)
			if err != nil {
				return nil, err
			}
			spec := &of13.NXLearnSpec{DstField: &of13.NXLearnSpecField{Field: df, Ofs: dofs}}
			if strings.HasPrefix(src, "NXM_") {
				sf, sofs, sn, err := fieldRange(src)
				if err != nil {
					return nil, err
				}
				if sn != dn {
					return nil, fmt.Errorf("learn load of %d bits into %d", sn, dn)
				}
				spec.Header = of13.NewLearnHeaderLoadFromField(dn)
				spec.SrcField = &of13.NXLearnSpecField{Field: sf, Ofs: sofs}
			} else {
				if spec.SrcValue, err = learnValue(src, dn); err != nil {
					return nil, err
				}
				spec.Header = of13.NewLearnHeaderLoadFromValue(dn)
			}
			l.LearnSpecs = append(l.LearnSpecs, spec)
		case strings.HasPrefix(t, "output:"):
			sf, sofs, sn, err := fieldRange(strings.TrimPrefix(t, "output:"))
			if err != nil {
				return nil, err
			}
			l.LearnSpecs = append(l.LearnSpecs, &of13.NXLearnSpec{Header: of13.NewLearnHeaderOutputFromField(sn),
				SrcField: &of13.NXLearnSpecField{Field: sf, Ofs: sofs}})
		case hasV:
			var df *of13.MatchField
			var dofs, dn uint16
			if name, ok := learnFieldNames[k]; ok {
				df, _ = of13.FindFieldHeaderByName(name, false)
				dn = uint16(df.Length) * 8
			} else if df, dofs, dn, err = fieldRange(k); err != nil {
				return nil, err
			}
			spec := &of13.NXLearnSpec{DstField: &of13.NXLearnSpecField{Field: df, Ofs: dofs}}
			if strings.HasPrefix(v, "NXM_") {
				sf, sofs, sn, err := fieldRange(v)
				if err != nil {
					return nil, err
				}
				if sn != dn {
					return nil, fmt.Errorf("learn match of %d bits against %d", dn, sn)
				}
				spec.Header = of13.NewLearnHeaderMatchFromField(dn)
				spec.SrcField = &of13.NXLearnSpecField{Field: sf, Ofs: sofs}
			} else {
				if spec.SrcValue, err = learnValue(v, dn); err != nil {
					return nil, err
				}
				spec.Header = of13.NewLearnHeaderMatchFromValue(dn)
			}
			l.LearnSpecs = append(l.LearnSpecs, spec)
		default:
			return nil, cannot("learn argument %q", t)
		}
		if err != nil {
			return nil, fmt.Errorf("learn %s: %w", k, err)
		}
	}
	l.Length = l.Len()
	return l, nil
}

// EncodeText encodes bundle lines with this text encoder: each message's OpenFlow type and body.
// It is the reference the typed encoder (package openflow) is checked against, byte for byte,
// by flows' TestWireOracle.
func EncodeText(lines []string) ([]uint8, [][]byte, error) {
	msgs, err := translateSerial(lines)
	if err != nil {
		return nil, nil, err
	}
	types, bodies := make([]uint8, len(msgs)), make([][]byte, len(msgs))
	for i, m := range msgs {
		types[i], bodies[i] = m.typ, m.body
	}
	return types, bodies, nil
}
