// Package ofctltest provides an in-memory stand-in for ofctl's OpenFlow client, for tests of the
// code that drives bridges and conntrack (like net/http/httptest for net/http). It starts no
// process and needs no Open vSwitch; package ofctl/ovstest starts real OVS daemons instead.
package ofctltest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// ErrInjected is the cause of a Fake bundle failure requested with FailNext.
var ErrInjected = errors.New("injected failure")

// Fake is an in-memory FlowBridge (and Conntrack) for reconciler tests. It understands only the line shapes of
// flows.Plan.Lines and applies a bundle atomically: a bad line or an injected failure applies
// nothing and returns an *ofctl.Error. Like OVS it keys flows by table, priority and match (a flow add
// with an installed key overwrites that flow, cookie included), deletes by exact cookie, and
// deleting a group also deletes the flows whose actions output to it. Safe for concurrent use.
type Fake struct {
	mu       sync.Mutex
	flows    map[string]fakeFlow // by key
	groups   map[uint32]string   // group text by id
	failNext int
	reject   []string
	bundles  int
	// rejections counts the bundles that failed on a line.
	rejections int
	lines      int
	conns      []Conn
	flushes    []flows.ConntrackFilter
	// prepared are the slices given to Prepare not yet bundled; preparedN and preparedUsed
	// count the Prepare calls and the Bundle calls that found their slice prepared.
	prepared                map[*string]int
	preparedN, preparedUsed int
}

// Prepare records lines as prepared (ofctl.OpenFlow.Prepare encodes them): a later Bundle call
// with the same slice counts as one that used its preparation (see Prepared).
func (f *Fake) Prepare(lines []string) {
	if len(lines) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.prepared == nil {
		f.prepared = map[*string]int{}
	}
	f.prepared[&lines[0]] = len(lines)
	f.preparedN++
}

// Prepared returns how many bundles were prepared and how many Bundle calls used a preparation.
func (f *Fake) Prepared() (prepared, used int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.preparedN, f.preparedUsed
}

// Conn is one conntrack entry of a Fake (AddConn): its zone, protocol, original destination and
// reply source; Closed entries (TCP TIME_WAIT) are not counted as live.
type Conn struct {
	Zone     uint16
	Protocol flows.Protocol
	OrigDst  netip.AddrPort
	ReplySrc netip.AddrPort
	Closed   bool
}

// AddConn adds a conntrack entry.
func (f *Fake) AddConn(c Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns = append(f.conns, c)
}

// Conns returns the conntrack entries.
func (f *Fake) Conns() []Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.conns)
}

// Flushes returns the filters of the FlushConntrack calls so far.
func (f *Fake) Flushes() []flows.ConntrackFilter {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.flushes)
}

// FlushConntrack deletes the matching entries like ofctl.OpenFlow.FlushConntrack.
func (f *Fake) FlushConntrack(_ context.Context, fl flows.ConntrackFilter) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushes = append(f.flushes, fl)
	f.conns = slices.DeleteFunc(f.conns, func(c Conn) bool {
		return c.Zone == fl.Zone && c.Protocol == fl.Protocol && c.ReplySrc == fl.ReplySrc &&
			(!fl.OrigDst.IsValid() || c.OrigDst == fl.OrigDst)
	})
	return nil
}

// ConntrackDestinations counts the live entries of zone like ofctl.OpenFlow.ConntrackDestinations.
func (f *Fake) ConntrackDestinations(_ context.Context, zone uint16) (map[flows.EntryPoint]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[flows.EntryPoint]int{}
	for _, c := range f.conns {
		if c.Zone != zone || c.Closed || (c.Protocol != flows.TCP && c.Protocol != flows.UDP) {
			continue
		}
		out[flows.EntryPoint{Protocol: c.Protocol, Addr: c.OrigDst}]++
	}
	return out, nil
}

type fakeFlow struct {
	cookie flows.Cookie
	text   string
}

// NewFake returns an empty Fake bridge.
func NewFake() *Fake {
	return &Fake{flows: map[string]fakeFlow{}, groups: map[uint32]string{}}
}

// FailNext makes the next n bundles fail with ErrInjected (nothing applied, not counted).
func (f *Fake) FailNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = n
}

// RejectLines makes every later bundle that has a line containing one of substrs fail like OVS
// rejecting a message: nothing applied, an *ofctl.Error whose Rejected() is true (stderr
// "-:N: OFPBAC_BAD_ARGUMENT: ..."). No arguments: reject nothing again. Rejected bundles are not
// counted by Applied; Rejections counts them.
func (f *Fake) RejectLines(substrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reject = slices.Clone(substrs)
}

// Applied returns how many non-empty bundles were applied successfully and their total lines.
func (f *Fake) Applied() (bundles, lines int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bundles, f.lines
}

// Rejections returns how many bundles failed on one of their lines (RejectLines or a bad line).
func (f *Fake) Rejections() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rejections
}

// GroupBuckets returns the number of buckets of group id (0 when it does not exist).
func (f *Fake) GroupBuckets(id uint32) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Count(f.groups[id], ",bucket=")
}

// Flows returns the installed flow texts (as given to "flow add"), sorted.
func (f *Fake) Flows() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.flows))
	for _, fl := range f.flows {
		out = append(out, fl.text)
	}
	slices.Sort(out)
	return out
}

// Groups returns the installed group ids (owned or not), sorted.
func (f *Fake) Groups() []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.groups))
}

// Bundle applies lines atomically; see Fake. Empty lines do nothing and are not counted.
func (f *Fake) Bundle(_ context.Context, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.prepared[&lines[0]]; ok && n == len(lines) {
		delete(f.prepared, &lines[0])
		f.preparedUsed++
	}
	fail := func(i int, err error) error {
		f.rejections++
		return &ofctl.Error{Cmd: []string{"fake", "bundle"}, Stderr: fmt.Sprintf("-:%d: %v", i+1, err), Err: err}
	}
	if f.failNext > 0 {
		// Like a switch that cannot be reached: not a rejection of the lines.
		f.failNext--
		return &ofctl.Error{Cmd: []string{"fake", "bundle"}, Stderr: "fake: " + ErrInjected.Error(), Err: ErrInjected}
	}
	fl := maps.Clone(f.flows)
	gr := maps.Clone(f.groups)
	for i, l := range lines {
		for _, r := range f.reject {
			if strings.Contains(l, r) {
				return fail(i, fmt.Errorf("OFPBAC_BAD_ARGUMENT: rejected line %q", r))
			}
		}
		if err := applyLine(fl, gr, l); err != nil {
			return fail(i, err)
		}
	}
	f.flows, f.groups = fl, gr
	f.bundles++
	f.lines += len(lines)
	return nil
}

func applyLine(fl map[string]fakeFlow, gr map[uint32]string, l string) error {
	switch {
	case strings.HasPrefix(l, "group add_or_mod "), strings.HasPrefix(l, "group add "):
		body := strings.TrimPrefix(strings.TrimPrefix(l, "group add_or_mod "), "group add ")
		id, err := groupID(body)
		if err != nil {
			return err
		}
		if _, exists := gr[id]; exists && strings.HasPrefix(l, "group add ") {
			return fmt.Errorf("OFPGMFC_GROUP_EXISTS: group %d", id)
		}
		gr[id] = body
	case strings.HasPrefix(l, "group insert_bucket "):
		body := strings.TrimPrefix(l, "group insert_bucket ")
		id, err := groupID(body)
		if err != nil {
			return err
		}
		g, ok := gr[id]
		if !ok {
			return fmt.Errorf("OFPGMFC_UNKNOWN_GROUP: group %d", id)
		}
		_, buckets, ok := strings.Cut(body, ",command_bucket_id=last,")
		if !ok {
			return fmt.Errorf("fake supports only insert_bucket with command_bucket_id=last first: %q", l)
		}
		gr[id] = g + "," + buckets
	case strings.HasPrefix(l, "group delete "):
		id, err := groupID(strings.TrimPrefix(l, "group delete "))
		if err != nil {
			return err
		}
		delete(gr, id)
		ref := "group:" + strconv.FormatUint(uint64(id), 10)
		maps.DeleteFunc(fl, func(_ string, f fakeFlow) bool {
			_, acts, _ := strings.Cut(f.text, "actions=")
			return slices.ContainsFunc(strings.Split(acts, ","), func(a string) bool { return a == ref })
		})
	case strings.HasPrefix(l, "flow add "):
		text := strings.TrimPrefix(l, "flow add ")
		key, cookie, err := flowKey(text)
		if err != nil {
			return err
		}
		_, acts, _ := strings.Cut(text, "actions=")
		for _, a := range strings.Split(acts, ",") {
			if g, ok := strings.CutPrefix(a, "group:"); ok {
				id, err := strconv.ParseUint(g, 10, 32)
				if err != nil || gr[uint32(id)] == "" {
					return fmt.Errorf("OFPBAC_BAD_OUT_GROUP: %s", a)
				}
			}
		}
		fl[key] = fakeFlow{cookie: cookie, text: text}
	case strings.HasPrefix(l, "flow modify_strict "):
		// OpenFlow 1.1+ modify: changes an installed flow with exactly this match and priority,
		// adds nothing.
		text := strings.TrimPrefix(l, "flow modify_strict ")
		key, cookie, err := flowKey(text)
		if err != nil {
			return err
		}
		if _, ok := fl[key]; ok {
			fl[key] = fakeFlow{cookie: cookie, text: text}
		}
	case strings.HasPrefix(l, "flow delete cookie="):
		spec := strings.TrimPrefix(l, "flow delete cookie=")
		c, ok := strings.CutSuffix(spec, "/-1")
		if !ok {
			return fmt.Errorf("fake supports only exact cookie deletes: %q", l)
		}
		v, err := strconv.ParseUint(c, 0, 64)
		if err != nil {
			return fmt.Errorf("bad cookie %q: %w", c, err)
		}
		maps.DeleteFunc(fl, func(_ string, f fakeFlow) bool { return f.cookie == flows.Cookie(v) })
	default:
		return fmt.Errorf("unsupported bundle line %q", l)
	}
	return nil
}

// groupID parses "group_id=N[,...]".
func groupID(s string) (uint32, error) {
	v, ok := strings.CutPrefix(s, "group_id=")
	if !ok {
		return 0, fmt.Errorf("missing group_id in %q", s)
	}
	v, _, _ = strings.Cut(v, ",")
	id, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("bad group_id in %q: %w", s, err)
	}
	return uint32(id), nil
}

// flowKey returns the table/priority/match key of a flow text (the part before actions=,
// without cookie= and timeouts, with table=0 and priority=32768 made explicit) and its cookie.
func flowKey(text string) (string, flows.Cookie, error) {
	match, _, ok := strings.Cut(text, "actions=")
	if !ok {
		return "", 0, fmt.Errorf("flow without actions: %q", text)
	}
	var (
		cookie   flows.Cookie
		table    = "table=0"
		priority = "priority=32768"
		rest     []string
	)
	for _, tok := range strings.Split(match, ",") {
		tok = strings.TrimSpace(tok)
		switch {
		case tok == "":
		case strings.HasPrefix(tok, "cookie="):
			v, err := strconv.ParseUint(strings.TrimPrefix(tok, "cookie="), 0, 64)
			if err != nil {
				return "", 0, fmt.Errorf("bad cookie in %q: %w", text, err)
			}
			cookie = flows.Cookie(v)
		case strings.HasPrefix(tok, "idle_timeout="), strings.HasPrefix(tok, "hard_timeout="):
		case strings.HasPrefix(tok, "table="):
			table = tok
		case strings.HasPrefix(tok, "priority="):
			priority = tok
		default:
			rest = append(rest, tok)
		}
	}
	slices.Sort(rest)
	return table + "," + priority + "," + strings.Join(rest, ","), cookie, nil
}

// Inventory counts the installed flows per owned cookie and lists the owned groups, like
// ofctl.OpenFlow.Inventory.
func (f *Fake) Inventory(context.Context) (flows.Inventory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	inv := flows.Inventory{Flows: map[flows.Cookie]int{}, Groups: map[uint32]bool{}}
	for _, fl := range f.flows {
		if fl.cookie.Owned() {
			inv.Flows[fl.cookie]++
		}
	}
	inv.Buckets = map[uint32]int{}
	for id, g := range f.groups {
		if flows.OwnedGroup(id) {
			inv.Groups[id] = true
			inv.Buckets[id] = strings.Count(g, ",bucket=")
		}
	}
	return inv, nil
}
