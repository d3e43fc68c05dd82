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
	"strings"
	"sync"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

// ErrInjected is the cause of a Fake bundle failure requested with FailNext.
var ErrInjected = errors.New("injected failure")

// Fake is an in-memory FlowBridge (and Conntrack) for reconciler tests. It applies the typed
// messages of flows.Plan.Messages atomically: a message OVS would refuse (an add of an existing
// group, a flow to a missing group, a message RejectLines names) or an injected failure applies
// nothing and returns an *ofctl.Error. Like OVS it keys flows by table, priority and match (a flow
// add with an installed key overwrites that flow, cookie included), deletes by exact cookie, and
// deleting a group also deletes the flows whose actions output to it. Safe for concurrent use.
type Fake struct {
	mu       sync.Mutex
	flows    map[string]fakeFlow           // by key (flowKey)
	groups   map[uint32]openflow.GroupDesc // by id, with every bucket inserted
	failNext int
	reject   []string
	bundles  int
	// rejections counts the bundles that failed on a message.
	rejections int
	lines      int
	conns      []Conn
	flushes    []flows.ConntrackFilter
	// encoded counts the bundles given already encoded (BundleEncoded).
	encoded int
}

// BundleEncoded applies e's messages like Bundle and counts the bundle as encoded ahead (see
// Encoded); the encoding itself is not used.
func (f *Fake) BundleEncoded(ctx context.Context, e *openflow.Encoded) error {
	if len(e.Msgs) > 0 {
		f.mu.Lock()
		f.encoded++
		f.mu.Unlock()
	}
	return f.Bundle(ctx, e.Msgs)
}

// Encoded returns how many non-empty bundles were given to BundleEncoded.
func (f *Fake) Encoded() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.encoded
}

// Conn is one conntrack entry of a Fake (AddConn): its zone, protocol, original destination and
// reply source; Closed entries (TCP TIME_WAIT) are not counted as live.
type Conn struct {
	Zone     uint16
	Protocol flows.Protocol
	OrigDst  netip.AddrPort
	ReplySrc netip.AddrPort
	ReplyDst netip.Addr
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
		reply := c.ReplySrc == fl.ReplySrc
		if fl.ReplyDst.IsValid() {
			reply = c.ReplyDst == fl.ReplyDst
		}
		return c.Zone == fl.Zone && c.Protocol == fl.Protocol && reply &&
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
	flow   openflow.Flow
	text   string
}

// NewFake returns an empty Fake bridge.
func NewFake() *Fake {
	return &Fake{flows: map[string]fakeFlow{}, groups: map[uint32]openflow.GroupDesc{}}
}

// FailNext makes the next n bundles fail with ErrInjected (nothing applied, not counted).
func (f *Fake) FailNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = n
}

// RejectLines makes every later bundle with a message whose text (openflow.Text) contains one of
// substrs fail like OVS rejecting a message: nothing applied, an *ofctl.Error whose Rejected() is
// true (stderr "-:N: OFPBAC_BAD_ARGUMENT: ..."). No arguments: reject nothing again. Rejected
// bundles are not counted by Applied; Rejections counts them.
func (f *Fake) RejectLines(substrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reject = slices.Clone(substrs)
}

// Applied returns how many non-empty bundles were applied successfully and their total messages.
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
	return len(f.groups[id].Buckets)
}

// Flows returns the installed flows' texts (openflow.Flow.String), sorted.
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

// InstalledFlows returns the installed flows, sorted by their text.
func (f *Fake) InstalledFlows() []openflow.Flow {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := slices.SortedFunc(maps.Values(f.flows), func(a, b fakeFlow) int { return strings.Compare(a.text, b.text) })
	out := make([]openflow.Flow, len(fl))
	for i, x := range fl {
		out[i] = x.flow
	}
	return out
}

// Groups returns the installed group ids (owned or not), sorted.
func (f *Fake) Groups() []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.groups))
}

// Bundle applies msgs atomically; see Fake. No messages do nothing and are not counted.
func (f *Fake) Bundle(_ context.Context, msgs []openflow.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(i int, err error) error {
		f.rejections++
		return &ofctl.Error{Cmd: []string{"fake", "bundle"}, Stderr: fmt.Sprintf("-:%d: %v", i+1, err), Err: err}
	}
	if f.failNext > 0 {
		// Like a switch that cannot be reached: not a rejection of the messages.
		f.failNext--
		return &ofctl.Error{Cmd: []string{"fake", "bundle"}, Stderr: "fake: " + ErrInjected.Error(), Err: ErrInjected}
	}
	fl := maps.Clone(f.flows)
	gr := maps.Clone(f.groups)
	for i, m := range msgs {
		if len(f.reject) > 0 {
			text := string(m.AppendText(nil))
			for _, r := range f.reject {
				if strings.Contains(text, r) {
					return fail(i, fmt.Errorf("OFPBAC_BAD_ARGUMENT: rejected line %q", r))
				}
			}
		}
		if err := apply(fl, gr, m); err != nil {
			return fail(i, err)
		}
	}
	f.flows, f.groups = fl, gr
	f.bundles++
	f.lines += len(msgs)
	return nil
}

func apply(fl map[string]fakeFlow, gr map[uint32]openflow.GroupDesc, m openflow.Message) error {
	switch m := m.(type) {
	case openflow.GroupMod:
		id := m.Group.ID
		switch m.Command {
		case openflow.GroupAdd, openflow.GroupAddOrMod:
			if _, exists := gr[id]; exists && m.Command == openflow.GroupAdd {
				return fmt.Errorf("OFPGMFC_GROUP_EXISTS: group %d", id)
			}
			g := *m.Group
			g.Buckets = slices.Clone(m.Buckets)
			gr[id] = g
		case openflow.GroupInsertBuckets:
			g, ok := gr[id]
			if !ok {
				return fmt.Errorf("OFPGMFC_UNKNOWN_GROUP: group %d", id)
			}
			g.Buckets = append(slices.Clip(g.Buckets), m.Buckets...)
			gr[id] = g
		default:
			return fmt.Errorf("fake: group command %d", m.Command)
		}
	case openflow.DeleteGroup:
		delete(gr, m.ID)
		maps.DeleteFunc(fl, func(_ string, f fakeFlow) bool {
			return slices.Contains(f.flow.Actions, openflow.Action(openflow.Group{ID: m.ID}))
		})
	case openflow.FlowMod:
		key := flowKey(m.Flow)
		switch m.Command {
		case openflow.FlowAdd:
			for _, a := range m.Flow.Actions {
				if g, ok := a.(openflow.Group); ok {
					if _, exists := gr[g.ID]; !exists {
						return fmt.Errorf("OFPBAC_BAD_OUT_GROUP: group:%d", g.ID)
					}
				}
			}
			fl[key] = newFakeFlow(m.Flow, m.Flow.Cookie)
		case openflow.FlowModifyStrict:
			// OpenFlow 1.1+ modify: changes the actions of an installed flow with exactly this
			// match and priority, keeps its cookie, adds nothing.
			if old, ok := fl[key]; ok {
				fl[key] = newFakeFlow(m.Flow, uint64(old.cookie))
			}
		default:
			return fmt.Errorf("fake: flow command %d", m.Command)
		}
	case openflow.DeleteCookie:
		maps.DeleteFunc(fl, func(_ string, f fakeFlow) bool { return f.cookie == flows.Cookie(m.Cookie) })
	default:
		return fmt.Errorf("fake: unsupported message %T", m)
	}
	return nil
}

func newFakeFlow(f *openflow.Flow, cookie uint64) fakeFlow {
	c := *f
	c.Cookie = cookie
	c.Match, c.Actions = slices.Clone(f.Match), slices.Clone(f.Actions)
	return fakeFlow{cookie: flows.Cookie(cookie), flow: c, text: c.String()}
}

// flowKey is the table/priority/match key of a flow: its table, priority, protocol and the text
// of each match field, sorted (two flows with the same fields in another order are one flow).
func flowKey(f *openflow.Flow) string {
	rest := make([]string, 0, len(f.Match)+1)
	if p := f.Protocol.String(); p != "" {
		rest = append(rest, p)
	}
	for _, m := range f.Match {
		rest = append(rest, string(m.AppendText(nil)))
	}
	slices.Sort(rest)
	return fmt.Sprintf("table=%d,priority=%d,%s", f.Table, f.Priority, strings.Join(rest, ","))
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
			inv.Buckets[id] = len(g.Buckets)
		}
	}
	return inv, nil
}
