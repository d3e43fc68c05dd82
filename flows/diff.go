package flows

import (
	"net/netip"
	"slices"
	"sort"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// Inventory is what one bridge holds of ours, read from OVS without parsing flows: the number
// of flows per owned cookie and the owned group ids.
type Inventory struct {
	Flows  map[Cookie]int
	Groups map[uint32]bool
	// Buckets is the number of buckets of each owned group, when known (nil: not read).
	Buckets map[uint32]int
}

// Applied is what the agent last wrote successfully for one Key.
type Applied struct {
	Cookie Cookie
	Groups []uint32
	// EntryPoints and Endpoints are the FlowSet's (service-port and service-drain kinds).
	EntryPoints []EntryPoint
	Endpoints   []netip.AddrPort
	// Learned are the FlowSet's learned cookies (FlowSet.Learned).
	Learned []Cookie
}

// AppliedOf returns what applying fs records.
func AppliedOf(fs *FlowSet) Applied {
	return Applied{Cookie: fs.Cookie(), Groups: fs.GroupIDs(), EntryPoints: fs.EntryPoints, Endpoints: fs.Endpoints, Learned: fs.Learned}
}

// Plan is one atomic bundle for one bridge: add (or overwrite) the given FlowSets, then delete
// the given cookies and groups. Render it with Lines.
type Plan struct {
	Bridge        Bridge
	Add           []*FlowSet
	DeleteCookies []Cookie
	DeleteGroups  []uint32
	// Repair are FlowSets believed installed whose flows are re-sent with modify_strict (restores
	// actions edited in place, keeps counters, adds nothing) and whose groups are re-sent with
	// add_or_mod. See RepairAll.
	Repair []*FlowSet
	// BucketsPerMessage is the most buckets one group message carries (0:
	// DefaultBucketsPerMessage); see Lines.
	BucketsPerMessage int
}

// DefaultBucketsPerMessage is the default Plan.BucketsPerMessage. An OpenFlow message is at most
// 64 KiB (docs/lab-facts.md#fact-9): a Service bucket (ct commit, nat, exec move) is 88 bytes in
// OpenFlow 1.5, and OVS 3.1 takes 740 of them in one group message and refuses 750; 256 leaves
// room for buckets almost three times as large.
const DefaultBucketsPerMessage = 256

// MaxGroupBuckets is the most buckets a group of the agent has (BuildServicePort keeps the
// endpoints with the lowest bucket ids and warns). OVS 3.1 accepts more, but its group
// statistics reply, which Inventory reads, has a 16-bit length: 40 bytes plus 16 per bucket, so
// a group of more than about 4,090 buckets can no longer be read back.
const MaxGroupBuckets = 4000

// Empty reports whether the plan writes nothing.
func (p *Plan) Empty() bool {
	return len(p.Add) == 0 && len(p.DeleteCookies) == 0 && len(p.DeleteGroups) == 0 && len(p.Repair) == 0
}

// Changes reports whether the plan adds or deletes anything (a plan with only Repair does not).
func (p *Plan) Changes() bool {
	return len(p.Add) > 0 || len(p.DeleteCookies) > 0 || len(p.DeleteGroups) > 0
}

// RepairAll adds to Repair every FlowSet of desired that the plan does not already Add: the deep
// repair of a full sync, which rewrites the actions of every flow in place.
func (p *Plan) RepairAll(desired []*FlowSet) {
	adding := make(map[*FlowSet]bool, len(p.Add))
	for _, fs := range p.Add {
		adding[fs] = true
	}
	for _, fs := range desired {
		if !adding[fs] {
			p.Repair = append(p.Repair, fs)
		}
	}
}

// Replace plans the move of one Key from what was applied (nil: nothing) to fs (nil: delete).
// An unchanged FlowSet (same cookie) plans nothing. The learned cookies of old that fs does not
// name are deleted with it (an endpoint that left a sessionAffinity port, a changed timeout).
func (p *Plan) Replace(old *Applied, fs *FlowSet) {
	keep := map[uint32]bool{}
	if fs != nil {
		if old != nil && old.Cookie == fs.Cookie() {
			return
		}
		p.Add = append(p.Add, fs)
		for _, g := range fs.Groups {
			keep[g.ID] = true
		}
	}
	if old == nil {
		return
	}
	if fs == nil || old.Cookie != fs.Cookie() {
		p.DeleteCookies = append(p.DeleteCookies, old.Cookie)
	}
	for _, c := range old.Learned {
		if fs == nil || !slices.Contains(fs.Learned, c) {
			p.DeleteCookies = append(p.DeleteCookies, c)
		}
	}
	for _, g := range old.Groups {
		if !keep[g] {
			p.DeleteGroups = append(p.DeleteGroups, g)
		}
	}
}

// FullDiff compares the desired FlowSets of one bridge with what the bridge holds: a FlowSet whose
// cookie has a different flow count (missing, or flows deleted by hand) or whose groups are
// missing or have another number of buckets (when Inventory.Buckets knows it) is re-added; owned cookies and groups that nothing desires are deleted
// (learned flows: only affinity cookies that no FlowSet names in Learned; their count is OVS's).
func FullDiff(b Bridge, desired []*FlowSet, inv Inventory) Plan {
	p := Plan{Bridge: b}
	wantCookie := map[Cookie]bool{}
	wantGroup := map[uint32]bool{}
	for _, fs := range desired {
		wantCookie[fs.Cookie()] = true
		for _, c := range fs.Learned {
			wantCookie[c] = true
		}
		missing := inv.Flows[fs.Cookie()] != len(fs.Flows)
		for _, g := range fs.Groups {
			wantGroup[g.ID] = true
			if !inv.Groups[g.ID] {
				missing = true
			}
			// A group whose bucket count differs (e.g. a large group cut short) is re-sent.
			if n, ok := inv.Buckets[g.ID]; ok && n != len(g.Buckets) {
				missing = true
			}
		}
		if missing {
			p.Add = append(p.Add, fs)
		}
	}
	for c := range inv.Flows {
		if c.Owned() && c.Kind() != KindLearnedReset && !wantCookie[c] {
			p.DeleteCookies = append(p.DeleteCookies, c)
		}
	}
	for g := range inv.Groups {
		if OwnedGroup(g) && !wantGroup[g] {
			p.DeleteGroups = append(p.DeleteGroups, g)
		}
	}
	sort.Slice(p.DeleteCookies, func(i, j int) bool { return p.DeleteCookies[i] < p.DeleteCookies[j] })
	sort.Slice(p.DeleteGroups, func(i, j int) bool { return p.DeleteGroups[i] < p.DeleteGroups[j] })
	return p
}

// Messages returns the plan as one bundle's messages, in order: groups first (flows may
// reference them), then flows, then deletes of old cookies, then deletes of groups nothing
// references any more. Repair FlowSets add GroupAddOrMod messages after the added groups and
// FlowModifyStrict messages after the added flows.
// A group with more than BucketsPerMessage buckets is written as a GroupAddOrMod with its first
// BucketsPerMessage buckets (which replaces every bucket it had) followed by GroupInsertBuckets
// messages (OpenFlow 1.5 OFPGC15_INSERT_BUCKET, command_bucket_id=last; ovs-ofctl(8)
// "insert-buckets") with the rest, in order: all in the same bundle, so the group changes
// atomically.
// A flow add with the same match and priority as an installed flow overwrites it, cookie included,
// so the following delete of the old cookie removes only flows that are gone.
// The messages point into the plan's FlowSets, which must not change while they are used.
func (p *Plan) Messages() []of.Message {
	var out []of.Message
	for _, fs := range p.Add {
		out = p.groupMessages(out, fs)
	}
	for _, fs := range p.Repair {
		out = p.groupMessages(out, fs)
	}
	for _, fs := range p.Add {
		for i := range fs.Flows {
			out = append(out, of.FlowMod{Command: of.FlowAdd, Flow: &fs.Flows[i]})
		}
	}
	for _, fs := range p.Repair {
		for i := range fs.Flows {
			out = append(out, of.FlowMod{Command: of.FlowModifyStrict, Flow: &fs.Flows[i]})
		}
	}
	for _, c := range p.DeleteCookies {
		out = append(out, of.DeleteCookie{Cookie: uint64(c)})
	}
	for _, g := range p.DeleteGroups {
		out = append(out, of.DeleteGroup{ID: g})
	}
	return out
}

// Lines renders the plan's Messages as an `ovs-ofctl -O OpenFlow15 bundle BRIDGE -` file
// (ovs-ofctl(8) "bundle"), one line per message: "group add_or_mod ...", "group insert_bucket
// group_id=N,command_bucket_id=last,...", "flow add ...", "flow modify_strict ...", "flow delete
// cookie=C/-1" (cookie=C/-1 matches exactly one cookie), "group delete group_id=N".
func (p *Plan) Lines() []string { return of.Text(p.Messages()) }

// groupMessages appends the group messages of fs's groups to out (see Messages).
func (p *Plan) groupMessages(out []of.Message, fs *FlowSet) []of.Message {
	per := p.BucketsPerMessage
	if per <= 0 {
		per = DefaultBucketsPerMessage
	}
	for i := range fs.Groups {
		g := &fs.Groups[i]
		n := min(per, len(g.Buckets))
		out = append(out, of.GroupMod{Command: of.GroupAddOrMod, Group: g, Buckets: g.Buckets[:n]})
		for rest := g.Buckets[n:]; len(rest) > 0; {
			k := min(per, len(rest))
			out = append(out, of.GroupMod{Command: of.GroupInsertBuckets, Group: g, Buckets: rest[:k]})
			rest = rest[k:]
		}
	}
	return out
}
