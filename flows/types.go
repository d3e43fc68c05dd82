package flows

import (
	"bytes"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"sync"

	of "github.com/ovs-srcip/ovs-srcip/openflow"
)

// Bridge names one of the two bridges the agent programs. The agent maps it to the real bridge
// name (flags --bridge-ex, --bridge-int).
type Bridge uint8

const (
	// BrEx is the node's external bridge: it holds the uplink NIC and the node IP.
	BrEx Bridge = iota + 1
	// BrInt is the pod (integration) bridge: pod ports, the Geneve port, the patch to br-ex.
	BrInt
)

// String returns the default bridge name.
func (b Bridge) String() string {
	switch b {
	case BrEx:
		return "br-ex"
	case BrInt:
		return "br-int"
	}
	return fmt.Sprintf("bridge(%d)", uint8(b))
}

// Key identifies the object a FlowSet serves. It is the unit of replace and delete.
type Key struct {
	Kind Kind
	// Namespace and Name identify a Pod or Service; Name alone a Node; empty for base kinds.
	Namespace, Name string
	// Port and Protocol identify a Service port (spec.ports[i].name and protocol).
	Port     string
	Protocol Protocol
	// Family is the IP family of a Service port's flow set: a dual-stack Service port has one
	// flow set (and one select group) per family, so programming its IPv6 path never changes its
	// IPv4 one. The zero value is IPv4, whose keys render as before families existed (their
	// cookies are unchanged).
	Family Family
}

// Family is an IP family, as core/v1 IPFamily ("IPv4", "IPv6") and discovery/v1 AddressType
// name it. The zero value is IPv4.
type Family uint8

// IP families.
const (
	IPv4 Family = iota
	IPv6
)

// String returns "IPv4" or "IPv6" (the core/v1 IPFamily spelling).
func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// FamilyOf returns the family of a (an IPv4-mapped IPv6 address is IPv6: callers unmap first).
func FamilyOf(a netip.Addr) Family {
	if a.Is6() {
		return IPv6
	}
	return IPv4
}

// Has reports whether a is a valid address of family f.
func (f Family) Has(a netip.Addr) bool { return a.IsValid() && FamilyOf(a) == f }

// String renders the key for logs: kind/namespace/name[:port/proto].
func (k Key) String() string {
	return string(k.appendText(nil))
}

// kindName is Kind.String, set by init: a direct call would put the registry's initialization
// (whose builders call Finish, which calls appendText) in a cycle with itself.
var kindName func(Kind) string

func init() { kindName = Kind.String }

// appendText appends the key as String renders it.
func (k Key) appendText(b []byte) []byte {
	b = append(b, kindName(k.Kind)...)
	if k.Namespace != "" {
		b = append(append(b, '/'), k.Namespace...)
	}
	if k.Name != "" {
		b = append(append(b, '/'), k.Name...)
	}
	switch k.Kind {
	case KindServicePort:
		b = append(append(append(append(b, ':'), k.Port...), '/'), k.Protocol...)
		if k.Family == IPv6 {
			b = append(b, "/IPv6"...)
		}
	case KindServiceDrain:
		b = append(append(b, '/'), k.Protocol...)
	}
	return b
}

// EntryPoint is one address external traffic of a Service port arrives at: a node address with
// the NodePort, or a LoadBalancer ingress IP or externalIP with the Service port.
type EntryPoint struct {
	Protocol Protocol
	Addr     netip.AddrPort
}

// NodePortEntry is the entry point "NodePort port on every NodePort address of the node" (its
// address is the zero netip.Addr), as Services claim it (ServicePort.Claims).
func NodePortEntry(proto Protocol, port uint16) EntryPoint {
	return EntryPoint{Protocol: proto, Addr: netip.AddrPortFrom(netip.Addr{}, port)}
}

// IsNodePort reports whether e is a NodePortEntry.
func (e EntryPoint) IsNodePort() bool { return !e.Addr.Addr().IsValid() && e.Addr.Port() != 0 }

// String renders ip:port/PROTO, or "nodePort N/PROTO" for a NodePortEntry.
func (e EntryPoint) String() string {
	if e.IsNodePort() {
		return fmt.Sprintf("nodePort %d/%s", e.Addr.Port(), e.Protocol)
	}
	return e.Addr.String() + "/" + string(e.Protocol)
}

// DrainKey is the Key of the drain flow set (KindServiceDrain) of one entry point.
func DrainKey(e EntryPoint) Key {
	return Key{Kind: KindServiceDrain, Name: e.Addr.String(), Protocol: e.Protocol}
}

// DrainEntryPoint returns the entry point of a KindServiceDrain key.
func (k Key) DrainEntryPoint() (EntryPoint, bool) {
	if k.Kind != KindServiceDrain {
		return EntryPoint{}, false
	}
	ap, err := netip.ParseAddrPort(k.Name)
	if err != nil {
		return EntryPoint{}, false
	}
	return EntryPoint{Protocol: k.Protocol, Addr: ap}, true
}

// Owner is byte 7 (the top byte) of every cookie the agent writes. Flows with another top byte
// are never touched.
const Owner uint8 = 0x5c

// Cookie is the 64-bit OpenFlow cookie of every flow of a FlowSet:
// owner (bits 63..56) | kind (55..48) | fingerprint (47..0).
// The fingerprint hashes the FlowSet's key and its rendered flows and groups, so a changed
// FlowSet gets a new cookie and an unchanged one keeps its cookie across agent restarts.
type Cookie uint64

// OwnerMask selects the owner byte of a cookie (for dump-flows cookie=C/MASK filters).
const OwnerMask Cookie = 0xff00000000000000

// NewCookie packs owner, kind and fingerprint.
func NewCookie(kind Kind, fingerprint uint64) Cookie {
	return Cookie(uint64(Owner)<<56 | uint64(kind)<<48 | fingerprint&(1<<48-1))
}

// Owned reports whether the cookie carries this agent's owner byte.
func (c Cookie) Owned() bool { return uint8(c>>56) == Owner }

// Learned reports whether the cookie is that of flows OVS learns at run time (KindLearnedReset,
// KindLearnedAffinity): owned, but no flow set's own, with as many flows as OVS learned; the
// agent never repairs them. Collision resets are left to their timeouts; affinity flows are
// deleted when the flow set that learns them stops naming their cookie (FlowSet.Learned).
func (c Cookie) Learned() bool {
	return c.Owned() && (c.Kind() == KindLearnedReset || c.Kind() == KindLearnedAffinity)
}

// Kind returns the cookie's kind byte.
func (c Cookie) Kind() Kind { return Kind(c >> 48) }

// String renders the cookie as ovs-ofctl prints it (0x-prefixed hex).
func (c Cookie) String() string { return fmt.Sprintf("%#x", uint64(c)) }

// GroupIDBase is the first OpenFlow group id the agent may use: ids 0x5c000000-0x5cffffff
// (owner byte on top) are ours; groups outside the range are never touched.
const GroupIDBase uint32 = uint32(Owner) << 24

// OwnedGroup reports whether an OpenFlow group id is in the agent's range.
func OwnedGroup(id uint32) bool { return id>>24 == uint32(Owner) }

// OFGroup is an OpenFlow 1.5 group (ovs-ofctl(8) "Group Syntax"): openflow.GroupDesc. The
// pipeline's groups are select groups whose SelectionFields (e.g. ip_src, tcp_src) are hashed
// to pick a bucket (selection_method=hash); hashing named fields lets ofproto/trace print the
// chosen bucket.
type OFGroup = of.GroupDesc

// Bucket is one group bucket: openflow.Bucket.
type Bucket = of.Bucket

// FlowSet is every flow and group serving one Key on one bridge. Its cookie is derived from
// its content (see Cookie); Finish must be called after building it.
type FlowSet struct {
	Key    Key
	Bridge Bridge
	// Flows are the typed flows; after Finish they are ordered as a reader follows the
	// pipeline (by table, then highest priority first) and carry the set's cookie.
	Flows  []of.Flow
	Groups []OFGroup
	// Warnings are problems found while building it (skipped endpoints, entry-point
	// conflicts); the agent logs them and turns them into Kubernetes Events.
	Warnings []string
	// EntryPoints are the entry points whose ExServiceLB flow the set programs (service-port and
	// service-drain kinds), sorted.
	EntryPoints []EntryPoint
	// Endpoints are the endpoints of a UDP service port's select group, sorted: when one goes away
	// the agent flushes the ZoneService conntrack entries pinned to it.
	Endpoints []netip.AddrPort
	// Declined, when not empty, says why a Service port is not served by the agent at all (the
	// flow set has no flows and no group; docs/field-cases.md#c34).
	Declined string
	// Learned are the cookies of the flows the set's actions learn at run time
	// (KindLearnedAffinity: one per endpoint of a sessionAffinity port), sorted. Replacing the
	// set deletes the learned cookies the new version no longer names; a full sync deletes
	// learned affinity cookies that no set names.
	Learned []Cookie

	cookie Cookie
	keys   []MatchKey // MatchKey of each flow
	// entryFlows are, per entry point (in the order entryFlow recorded them), its ExServiceLB
	// flow, then its ExServiceCT flows. A slice, not a map: a flow set has one to a few entry
	// points, and a full sync holds every flow set at once.
	entryFlows []entryFlows
}

// entryFlows are the flows serving one entry point (FlowSet.entryFlow).
type entryFlows struct {
	e     EntryPoint
	flows []of.Flow
}

// flowsOf returns the flows entryFlow recorded for e (nil: none).
func (fs *FlowSet) flowsOf(e EntryPoint) []of.Flow {
	for i := range fs.entryFlows {
		if fs.entryFlows[i].e == e {
			return fs.entryFlows[i].flows
		}
	}
	return nil
}

// Cookie returns the FlowSet's cookie (valid after Finish).
func (fs *FlowSet) Cookie() Cookie { return fs.cookie }

// FlowLines renders the "flow add" bodies (ovs-ofctl(8) flow syntax), cookie included, in the
// order of Flows.
func (fs *FlowSet) FlowLines() []string {
	out := make([]string, len(fs.Flows))
	var b []byte
	for i := range fs.Flows {
		b = fs.Flows[i].AppendText(b[:0])
		out[i] = string(b)
	}
	return out
}

// GroupIDs returns the ids of the FlowSet's groups.
func (fs *FlowSet) GroupIDs() []uint32 {
	ids := make([]uint32, 0, len(fs.Groups))
	for _, g := range fs.Groups {
		ids = append(ids, g.ID)
	}
	return ids
}

// Finish computes the FlowSet's fingerprint cookie, stamps it on every flow, orders the flows
// and computes their MatchKeys. The fingerprint hashes the key and the sorted text of the flows
// without their cookie, then the text of each group (by id): the same bytes as the rendered
// lines, so cookies do not depend on the representation. It returns an error for a flow or
// group that ovs-ofctl would refuse (a ct without the commit it needs).
func (fs *FlowSet) Finish() error {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	h := newFNV64a()
	// "%d|%s\n" of the bridge (its number) and the key, as fmt rendered it.
	buf := strconv.AppendUint(sc.buf[:0], uint64(fs.Bridge), 10)
	buf = append(buf, '|')
	buf = fs.Key.appendText(buf)
	buf = append(buf, '\n')
	if fs.Declined != "" {
		// A declined port has no flows: its reason is its content (a changed reason is a change,
		// reported again).
		buf = append(append(append(buf, "declined|"...), fs.Declined...), '\n')
	}
	h.Write(buf)
	// The flows' text without cookie, rendered into one buffer (offsets per flow) and hashed in
	// sorted order, then each group's text.
	buf = buf[:0]
	spans := sc.spans[:0]
	for i := range fs.Flows {
		f := &fs.Flows[i]
		if err := f.Check(); err != nil {
			sc.buf, sc.spans = buf, spans
			return fmt.Errorf("%s: flow %d (table %s): %w", fs.Key, i, Table(f.Table), err)
		}
		c := f.Cookie
		f.Cookie = 0
		start := len(buf)
		buf = f.AppendText(buf)
		f.Cookie = c
		spans = append(spans, [2]int{start, len(buf)})
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return bytes.Compare(buf[a[0]:a[1]], buf[b[0]:b[1]]) })
	sort.Slice(fs.Groups, func(i, j int) bool { return fs.Groups[i].ID < fs.Groups[j].ID })
	for _, sp := range spans {
		h.Write(buf[sp[0]:sp[1]])
		h.WriteString("\n")
	}
	for i := range fs.Groups {
		for _, bk := range fs.Groups[i].Buckets {
			if err := of.CheckActions(bk.Actions); err != nil {
				sc.buf, sc.spans = buf, spans
				return fmt.Errorf("%s: group %#x: %w", fs.Key, fs.Groups[i].ID, err)
			}
		}
		buf = fs.Groups[i].AppendText(buf[:0])
		h.Write(buf)
		h.WriteString("\n")
	}
	fs.cookie = NewCookie(fs.Key.Kind, h.Sum64())
	// Flows are ordered as a reader follows the pipeline: by table, then highest priority first.
	sort.SliceStable(fs.Flows, func(i, j int) bool {
		a, b := &fs.Flows[i], &fs.Flows[j]
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		return a.Priority > b.Priority
	})
	fs.keys = make([]MatchKey, len(fs.Flows))
	for i := range fs.Flows {
		fs.Flows[i].Cookie = uint64(fs.cookie)
		buf = fs.Flows[i].AppendMatchText(buf[:0])
		fs.keys[i] = MatchKey{Bridge: fs.Bridge, Table: Table(fs.Flows[i].Table), Priority: int(fs.Flows[i].Priority), Match: string(buf)}
	}
	sc.buf, sc.spans = buf, spans
	return nil
}

// scratch is the reusable memory of one Finish: the rendered text and the flows' spans in it.
// Finish runs for every flow set of a full sync (on every core): the text is hashed and
// dropped, so it need not be allocated again each time.
type scratch struct {
	buf   []byte
	spans [][2]int
}

var scratchPool = sync.Pool{New: func() any { return &scratch{buf: make([]byte, 0, 4096)} }}

// MatchKey is a flow's identity in its bridge: two flows with the same MatchKey are one flow in
// OVS (the later add overwrites the earlier one, cookie and actions included). It is computed from
// the flow's fields, never parsed back from text.
type MatchKey struct {
	Bridge   Bridge
	Table    Table
	Priority int
	// Match is the flow's match rendered in ovs-ofctl(8) syntax (protocol, in_port, fields in
	// the builder's order).
	Match string
}

// String renders the key for logs and Events: br-ex/40/100/tcp,nw_dst=...,tp_dst=....
func (m MatchKey) String() string {
	return fmt.Sprintf("%s/%d/%d/%s", m.Bridge, int(m.Table), m.Priority, m.Match)
}

// matchKeyOf computes the MatchKey of f on b.
func matchKeyOf(b Bridge, f *of.Flow) MatchKey {
	return MatchKey{Bridge: b, Table: Table(f.Table), Priority: int(f.Priority), Match: string(f.AppendMatchText(nil))}
}

// MatchKeys returns, for each flow of Flows (same order), its MatchKey.
func (fs *FlowSet) MatchKeys() []MatchKey { return fs.keys }

// Without returns a copy of fs without the flows whose MatchKey is in drop, finished (it has its
// own cookie), with warnings added. Its entry points are those whose ExServiceLB flow remains; an
// entry point whose ExServiceLB flow is dropped loses its ExServiceCT flows too (its source-range
// flows must not filter the winner's connections). Groups and endpoints are kept.
func (fs *FlowSet) Without(drop map[MatchKey]bool, warnings ...string) (*FlowSet, error) {
	out := &FlowSet{Key: fs.Key, Bridge: fs.Bridge, Groups: fs.Groups,
		Warnings:  append(append([]string{}, fs.Warnings...), warnings...),
		Endpoints: fs.Endpoints, Declined: fs.Declined, Learned: fs.Learned}
	gone := maps.Clone(drop)
	entryKeys := make(map[EntryPoint][]MatchKey, len(fs.entryFlows))
	for _, ef := range fs.entryFlows {
		ks := make([]MatchKey, len(ef.flows))
		for i := range ef.flows {
			ks[i] = mustMatchKey(fs.Bridge, &ef.flows[i])
		}
		entryKeys[ef.e] = ks
	}
	for _, e := range fs.EntryPoints {
		if ks := entryKeys[e]; len(ks) > 0 && drop[ks[0]] {
			for _, k := range ks[1:] {
				gone[k] = true
			}
		}
	}
	for i := range fs.Flows {
		if gone[fs.keys[i]] {
			continue
		}
		f := fs.Flows[i]
		f.Cookie = 0
		out.Flows = append(out.Flows, f)
	}
	for _, e := range fs.EntryPoints {
		if ks := entryKeys[e]; len(ks) > 0 && !gone[ks[0]] {
			out.EntryPoints = append(out.EntryPoints, e)
			out.entryFlow(e, fs.flowsOf(e)...)
		}
	}
	return out, out.Finish()
}

// entryFlow records that flows serve entry point e: flows[0] is its ExServiceLB flow (Without
// keeps e while that flow remains), the rest its ExServiceCT flows. Their MatchKeys are computed
// only by Without (conflicts are rare; a full sync builds every flow set).
func (fs *FlowSet) entryFlow(e EntryPoint, flows ...of.Flow) {
	for i := range fs.entryFlows {
		if fs.entryFlows[i].e == e {
			fs.entryFlows[i].flows = flows
			return
		}
	}
	fs.entryFlows = append(fs.entryFlows, entryFlows{e, flows})
}

// fnv64a is the 64-bit FNV-1a hash (hash/fnv's New64a) with a WriteString that does not copy
// its argument: a full sync fingerprints every flow set's whole text.
type fnv64a uint64

func newFNV64a() *fnv64a {
	h := fnv64a(14695981039346656037)
	return &h
}

func (h *fnv64a) Write(p []byte) (int, error) {
	v := *h
	for _, c := range p {
		v ^= fnv64a(c)
		v *= 1099511628211
	}
	*h = v
	return len(p), nil
}

func (h *fnv64a) WriteString(s string) (int, error) {
	v := *h
	for i := 0; i < len(s); i++ {
		v ^= fnv64a(s[i])
		v *= 1099511628211
	}
	*h = v
	return len(s), nil
}

// Sum64 is the hash of what was written.
func (h *fnv64a) Sum64() uint64 { return uint64(*h) }

// Desired is the full desired content of one node's bridges, by Key.
type Desired map[Key]*FlowSet
