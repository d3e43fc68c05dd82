package ofctl

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// The one reader of what `ovs-ofctl dump-flows`, `dump-groups` and `dump-group-stats` print: the
// agent's inventory (Inventory), its flow counters (FlowStats) and srcipctl read dumps through
// it. It reads the few fields it names and never parses a match or an action (ovs-ofctl
// normalises and reorders flow text).

// DefaultPriority is the priority ovs-ofctl leaves out of a dumped flow (OFP_DEFAULT_PRIORITY,
// 0x8000; ovs-ofctl(8) "priority=value").
const DefaultPriority = 32768

// DumpedFlow is one flow line of `ovs-ofctl -O OpenFlow15 dump-flows` as OVS 3.1 prints it
// (ovs-ofctl(8) "dump-flows"; with --no-stats the statistics are left out, with --names ports
// and tables are printed by name):
//
//	cookie=0x5c10000000000001, duration=3.1s, table=41, n_packets=2, n_bytes=148, idle_age=1, priority=100,ct_state=+new+trk,tcp,nw_dst=203.0.113.100,tp_dst=80 actions=group:1543503872
//
// A bundle line of the agent's ("flow add priority=100,tcp,...,table=41,idle_timeout=0,
// cookie=0x5c10...,actions=group:...", flows.Plan.Lines) reads the same way. A field ovs-ofctl leaves out has its OpenFlow default: cookie 0, table 0,
// priority DefaultPriority.
type DumpedFlow struct {
	// Cookie is cookie= (hexadecimal, 0x-prefixed in the dump).
	Cookie flows.Cookie
	// Table is table= when it is a number. TableName is table= when ovs-ofctl printed the
	// table's name (--names and a named table); Table is 0 then.
	Table     flows.Table
	TableName string
	// Priority is priority= (0..65535).
	Priority int
	// Packets and Bytes are n_packets= and n_bytes= (0 under --no-stats).
	Packets, Bytes uint64
	// Actions is the text after "actions=", to the end of the line (ovs-actions(7) syntax).
	Actions string
}

// Group returns N of the first group:N action of the flow (ovs-actions(7) "group"), false when it
// has none.
func (f *DumpedFlow) Group() (uint32, bool) {
	a := f.Actions
	for {
		i := strings.Index(a, "group:")
		if i < 0 {
			return 0, false
		}
		if i == 0 || a[i-1] == ',' || a[i-1] == '(' {
			if id, n := parseDecimal([]byte(a[i+len("group:"):])); n > 0 && id < 1<<32 {
				return uint32(id), true
			}
		}
		a = a[i+len("group:"):]
	}
}

// ParseFlowLine reads one line of dump-flows output. ok is false for a line without an actions=
// token, which is no flow (the "OFPST_FLOW reply" header, a blank line). Errors: a cookie, table number or priority that does
// not parse (a cookie is at most 16 hexadecimal digits).
func ParseFlowLine(line string) (f DumpedFlow, ok bool, err error) {
	f, actions, ok, err := parseFlow([]byte(line))
	if ok && err == nil {
		f.Actions = line[len(line)-len(actions):]
	}
	return f, ok, err
}

// ScanFlows calls fn with every flow of a dump-flows output (see ParseFlowLine) and stops at the
// first error, fn's or a line's. Lines may be up to 64 MiB long. The *DumpedFlow is reused for
// the next line: copy it to keep it.
func ScanFlows(r io.Reader, fn func(*DumpedFlow) error) error {
	return scanFlows(r, func(f *DumpedFlow, actions []byte) error {
		f.Actions = string(actions)
		return fn(f)
	})
}

// scanFlows is ScanFlows without the copy of the actions: actions is valid until fn returns.
func scanFlows(r io.Reader, fn func(f *DumpedFlow, actions []byte) error) error {
	s := newScanner(r)
	var f DumpedFlow // one for every line: fn gets it by pointer, and it would escape per line
	for s.Scan() {
		var actions []byte
		var ok bool
		var err error
		f, actions, ok, err = parseFlow(s.Bytes())
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := fn(&f, actions); err != nil {
			return err
		}
	}
	return s.Err()
}

var (
	actionsKey  = []byte("actions=")
	cookieKey   = []byte("cookie=")
	tableKey    = []byte("table=")
	priorityKey = []byte("priority=")
	packetsKey  = []byte("n_packets=")
	bytesKey    = []byte("n_bytes=")
)

// fieldIndex returns the index in head of the first token that starts with key (tokens are
// separated by ',' or ' '; key includes the '='), -1 when there is none.
func fieldIndex(head, key []byte) int {
	for off := 0; ; {
		i := bytes.Index(head[off:], key)
		if i < 0 {
			return -1
		}
		i += off
		if i == 0 || head[i-1] == ' ' || head[i-1] == ',' {
			return i
		}
		off = i + len(key)
	}
}

// dumpField returns the value of the first key=value token of head (see fieldIndex).
func dumpField(head, key []byte) ([]byte, bool) {
	i := fieldIndex(head, key)
	if i < 0 {
		return nil, false
	}
	v := head[i+len(key):]
	for e, c := range v {
		if c == ',' || c == ' ' {
			return v[:e], true
		}
	}
	return v, true
}

// parseFlow reads the fields of line before "actions=" (Actions is left empty) and returns the
// actions' text.
func parseFlow(line []byte) (f DumpedFlow, actions []byte, ok bool, err error) {
	// The actions follow " actions=" (dump-flows) or ",actions=" (bundle lines; dump-flows of a
	// flow without match fields prints ", actions=").
	i := fieldIndex(line, actionsKey)
	if i < 0 {
		return f, nil, false, nil
	}
	head, actions := line[:i], line[i+len(actionsKey):]
	f.Priority = DefaultPriority
	if v, ok := dumpField(head, cookieKey); ok {
		h, ok := bytes.CutPrefix(v, []byte("0x"))
		c, ok2 := parseHex(h)
		if !ok || !ok2 || len(h) > 16 {
			return f, nil, true, fmt.Errorf("bad cookie in dump-flows line %q", line)
		}
		f.Cookie = flows.Cookie(c)
	}
	if v, ok := dumpField(head, tableKey); ok {
		if n, l := parseDecimal(v); l > 0 && l == len(v) && n <= 255 {
			f.Table = flows.Table(n)
		} else if l > 0 || len(v) == 0 {
			return f, nil, true, fmt.Errorf("bad table in dump-flows line %q", line)
		} else {
			f.TableName = string(v)
		}
	}
	stats := head
	if i := fieldIndex(head, priorityKey); i >= 0 {
		v, _ := dumpField(head[i:], priorityKey)
		n, l := parseDecimal(v)
		if l == 0 || l != len(v) || n > 65535 {
			return f, nil, true, fmt.Errorf("bad priority in dump-flows line %q", line)
		}
		f.Priority = int(n)
		// ovs-ofctl prints the statistics before the match, which starts with the priority.
		stats = head[:i]
	}
	if v, ok := dumpField(stats, packetsKey); ok {
		f.Packets, _ = parseDecimal(v)
	}
	if v, ok := dumpField(stats, bytesKey); ok {
		f.Bytes, _ = parseDecimal(v)
	}
	return f, actions, true, nil
}

// DumpedGroup is one group line of `ovs-ofctl -O OpenFlow15 dump-groups` or `dump-group-stats` as
// OVS 3.1 prints them (ovs-ofctl(8) "dump-groups", "dump-group-stats"):
//
//	group_id=1543503873,type=select,selection_method=hash,fields(ip_src,tcp_src),bucket=bucket_id:0,actions=...,bucket=bucket_id:1,actions=...
//	group_id=1543503873,duration=1.0s,ref_count=1,packet_count=0,byte_count=0,bucket0:packet_count=0,byte_count=0,bucket1:...
type DumpedGroup struct {
	// ID is group_id= (a 32-bit OpenFlow group id).
	ID uint32
	// Buckets is the number of buckets (",bucket=" of dump-groups, ",bucketN:" of
	// dump-group-stats).
	Buckets int
}

var (
	groupToken  = []byte("group_id=")
	bucketToken = []byte(",bucket")
)

// ScanGroups calls fn with every group of a dump-groups or dump-group-stats output (lines that do
// not start with group_id=, such as the reply header, are skipped) and stops at the first error,
// fn's or a group id that does not parse.
func ScanGroups(r io.Reader, fn func(DumpedGroup) error) error {
	s := newScanner(r)
	for s.Scan() {
		line := bytes.TrimLeft(s.Bytes(), " ")
		rest, ok := bytes.CutPrefix(line, groupToken)
		if !ok {
			continue
		}
		id, n := parseDecimal(rest)
		if n == 0 || id >= 1<<32 || (n < len(rest) && rest[n] != ',') {
			return fmt.Errorf("bad group id in dump-groups line %q", line)
		}
		if err := fn(DumpedGroup{ID: uint32(id), Buckets: bytes.Count(rest, bucketToken)}); err != nil {
			return err
		}
	}
	return s.Err()
}

// scanCookies adds one to counts[cookie] for every flow of a dump-flows output with an owned
// cookie.
func scanCookies(r io.Reader, counts map[flows.Cookie]int) error {
	return scanFlows(r, func(f *DumpedFlow, _ []byte) error {
		if f.Cookie.Owned() {
			counts[f.Cookie]++
		}
		return nil
	})
}

// scanGroups records the owned group ids of a dump-groups output.
func scanGroups(r io.Reader, ids map[uint32]bool) error {
	return scanGroupStats(r, ids, nil)
}

// scanGroupStats records the owned group ids of a dump-group-stats (or dump-groups) output, and
// in buckets (if not nil) the number of buckets of each.
func scanGroupStats(r io.Reader, ids map[uint32]bool, buckets map[uint32]int) error {
	return ScanGroups(r, func(g DumpedGroup) error {
		if flows.OwnedGroup(g.ID) {
			ids[g.ID] = true
			if buckets != nil {
				buckets[g.ID] = g.Buckets
			}
		}
		return nil
	})
}

// scanFlowStats reads the flows of a dump-flows output with an owned cookie into FlowStats.
func scanFlowStats(r io.Reader) ([]flows.FlowStat, error) {
	var out []flows.FlowStat
	err := scanFlows(r, func(f *DumpedFlow, actions []byte) error {
		if f.Cookie.Owned() {
			out = append(out, flows.FlowStat{Cookie: f.Cookie, Table: f.Table, Priority: f.Priority,
				Packets: f.Packets, Bytes: f.Bytes, ToGroup: bytes.HasPrefix(actions, []byte("group:"))})
		}
		return nil
	})
	return out, err
}

// newScanner returns a line scanner that accepts lines up to 64 MiB (a select group with
// thousands of buckets is one line).
func newScanner(r io.Reader) *bufio.Scanner {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 256<<10), 64<<20)
	return s
}

// parseHex parses the hex digits at the start of b (up to 16 of them, then a non-digit or end).
func parseHex(b []byte) (uint64, bool) {
	var v uint64
	n := 0
	for ; n < len(b); n++ {
		c := b[n]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return v, n > 0
		}
		if n == 16 {
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, n > 0
}

// parseUint parses the decimal digits at the start of b and returns the value and the number of
// digits (0: none; the value saturates past 20 digits).
func parseDecimal(b []byte) (uint64, int) {
	var v uint64
	n := 0
	for ; n < len(b) && b[n] >= '0' && b[n] <= '9'; n++ {
		d := uint64(b[n] - '0')
		if v > (1<<64-1-d)/10 {
			v = 1<<64 - 1
			continue
		}
		v = v*10 + d
	}
	return v, n
}
