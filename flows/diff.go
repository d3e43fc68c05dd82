package flows

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
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
}

// AppliedOf returns what applying fs records.
func AppliedOf(fs *FlowSet) Applied {
	return Applied{Cookie: fs.Cookie(), Groups: fs.GroupIDs(), EntryPoints: fs.EntryPoints, Endpoints: fs.Endpoints}
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
// An unchanged FlowSet (same cookie) plans nothing.
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
	for _, g := range old.Groups {
		if !keep[g] {
			p.DeleteGroups = append(p.DeleteGroups, g)
		}
	}
}

// FullDiff compares the desired FlowSets of one bridge with what the bridge holds: a FlowSet whose
// cookie has a different flow count (missing, or flows deleted by hand) or whose groups are
// missing or have another number of buckets (when Inventory.Buckets knows it) is re-added; owned cookies and groups that nothing desires are deleted.
func FullDiff(b Bridge, desired []*FlowSet, inv Inventory) Plan {
	p := Plan{Bridge: b}
	wantCookie := map[Cookie]bool{}
	wantGroup := map[uint32]bool{}
	for _, fs := range desired {
		wantCookie[fs.Cookie()] = true
		missing := inv.Flows[fs.Cookie()] != len(fs.lines)
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
		if c.Owned() && !c.Learned() && !wantCookie[c] {
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

// Lines renders the plan as an `ovs-ofctl -O OpenFlow15 bundle BRIDGE -` file (ovs-ofctl(8)
// "bundle"): groups first (flows may reference them), then flows, then deletes of old cookies
// (cookie=C/-1 matches exactly one cookie), then deletes of groups nothing references any more.
// Repair FlowSets add "group add_or_mod" lines after the added groups and "flow modify_strict"
// lines after the added flows.
// A group with more than BucketsPerMessage buckets is written as "group add_or_mod" with its first
// BucketsPerMessage buckets (which replaces every bucket it had) followed by "group insert_bucket
// group_id=N,command_bucket_id=last,..." lines with the rest, in order (OpenFlow 1.5
// OFPGC15_INSERT_BUCKET; ovs-ofctl(8) "insert-buckets"): one message each, all in the same
// bundle, so the group changes atomically.
// A flow add with the same match and priority as an installed flow overwrites it, cookie included,
// so the following delete of the old cookie removes only flows that are gone.
func (p *Plan) Lines() []string {
	var out []string
	for _, fs := range p.Add {
		out = p.groupLines(out, fs)
	}
	for _, fs := range p.Repair {
		out = p.groupLines(out, fs)
	}
	for _, fs := range p.Add {
		for _, l := range fs.lines {
			out = append(out, "flow add "+l)
		}
	}
	for _, fs := range p.Repair {
		for _, l := range fs.lines {
			out = append(out, "flow modify_strict "+l)
		}
	}
	for _, c := range p.DeleteCookies {
		out = append(out, fmt.Sprintf("flow delete cookie=%#x/-1", uint64(c)))
	}
	for _, g := range p.DeleteGroups {
		out = append(out, fmt.Sprintf("group delete group_id=%d", g))
	}
	return out
}

// groupLines appends the group messages of fs's groups to out (see Lines).
func (p *Plan) groupLines(out []string, fs *FlowSet) []string {
	per := p.BucketsPerMessage
	if per <= 0 {
		per = DefaultBucketsPerMessage
	}
	for _, gt := range fs.gparts {
		n := min(per, len(gt.buckets))
		out = append(out, gt.line("group add_or_mod ", gt.buckets[:n]))
		for rest := gt.buckets[n:]; len(rest) > 0; {
			k := min(per, len(rest))
			out = append(out, fmt.Sprintf("group insert_bucket group_id=%d,command_bucket_id=last,%s", gt.id, strings.Join(rest[:k], ",")))
			rest = rest[k:]
		}
	}
	return out
}
