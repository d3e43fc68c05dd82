package agent

import (
	"cmp"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	"github.com/ovs-srcip/ovs-srcip/flows"
)

// Port blocks (docs/egress.md "Port blocks"): every pod an EgressGateway selects gets, per
// egress IP it uses, an aligned power-of-two block of source ports, unique among the pods of
// that egress IP. The pod's node maps the pod's TCP and UDP source ports into it (ct nat in
// ZonePod, flows.PodEgress.PortFirst), so every gateway of the egress IP sees ports no other
// pod uses, and its nat(src=EGRESS_IP) keeps them: a new gateway after a failover gives a
// running connection the same translated tuple, and two pods using the same source port to one
// server stay distinct. The blocks live in the policy's status.portBlocks (stable across
// failovers and agent restarts), written by the policy's status writer from the pods the nodes
// list in status.nodes[].pods.

// PortPool is how the port blocks are cut: the ports First..Last (inclusive), blocks of Size
// ports (a power of two) aligned to Size, and how long a released block stays quarantined
// before another pod may get it (2 x MSL: a server keeps the 4-tuple in TIME_WAIT that long).
type PortPool struct {
	First, Last uint16
	Size        int
	Quarantine  time.Duration
}

// DefaultPortPool is the pool of srcip-agent's defaults: ports 1024-65535 in blocks of 512
// (126 blocks, so 126 pods per egress IP), quarantine 2 minutes (2 x 60 s, Linux's
// TCP_TIMEWAIT_LEN taken as the MSL bound).
var DefaultPortPool = PortPool{First: 1024, Last: 65535, Size: 512, Quarantine: 2 * time.Minute}

// MinPortQuarantine is the shortest --egress-port-quarantine ParsePortPool accepts; one
// shorter than DefaultPortPool.Quarantine (2 x MSL) is accepted with a warning (Warnings).
const MinPortQuarantine = time.Second

// Warnings are what srcip-agent logs at startup about a pool that works but may surprise: a
// quarantine shorter than 2 x MSL (DefaultPortPool.Quarantine), and more blocks per egress IP
// than one policy's status.portBlocks may hold (egressv1.MaxPortBlocks, the CRD's limit; how
// many blocks a policy needs depends on its pods, so this is no error).
func (p PortPool) Warnings() []string {
	var out []string
	if p.Quarantine < DefaultPortPool.Quarantine {
		out = append(out, fmt.Sprintf("--egress-port-quarantine %v is shorter than 2 x MSL (%v: a Linux server keeps a closed "+
			"connection's 4-tuple in TIME_WAIT for 60 s, other systems longer): a released block can go to another pod while "+
			"servers still hold its old connections, and that pod's new connections from the same ports to those servers "+
			"can be refused or reset", p.Quarantine, DefaultPortPool.Quarantine))
	}
	if n := p.Blocks(); n > egressv1.MaxPortBlocks {
		out = append(out, fmt.Sprintf("--egress-port-range and --egress-port-block-size give %d blocks per egress IP, more than "+
			"one EgressGateway's status.portBlocks may hold (%d, the CRD's maxItems, quarantined blocks included): a policy's "+
			"pods beyond that wait (PortBlocksExhausted, reason %s)", n, egressv1.MaxPortBlocks, egressv1.ReasonPortBlocksListFull))
	}
	return out
}

// ParsePortPool returns the pool of the flags --egress-port-range (FIRST-LAST),
// --egress-port-block-size and --egress-port-quarantine, or an error that names the bad one.
func ParsePortPool(portRange string, size int, quarantine time.Duration) (PortPool, error) {
	lo, hi, ok := strings.Cut(portRange, "-")
	first, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	last, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	if !ok || err1 != nil || err2 != nil || first == 0 || first > last {
		return PortPool{}, fmt.Errorf("--egress-port-range %q: want FIRST-LAST with 1 <= FIRST <= LAST <= 65535", portRange)
	}
	if size < 1 || size > 32768 || bits.OnesCount(uint(size)) != 1 {
		return PortPool{}, fmt.Errorf("--egress-port-block-size %d: want a power of two from 1 to 32768", size)
	}
	if quarantine < MinPortQuarantine {
		return PortPool{}, fmt.Errorf("--egress-port-quarantine %v: want at least %v (a released block would go to another pod "+
			"at once, while servers still hold its pod's connections in TIME_WAIT; the default is %v, 2 x MSL)",
			quarantine, MinPortQuarantine, DefaultPortPool.Quarantine)
	}
	p := PortPool{First: uint16(first), Last: uint16(last), Size: size, Quarantine: quarantine}
	if p.Blocks() == 0 {
		return PortPool{}, fmt.Errorf("--egress-port-range %q holds no aligned block of %d ports", portRange, size)
	}
	return p, nil
}

// Size32 is Size as a PortBlock's.
func (p PortPool) Size32() int32 { return int32(p.Size) }

// Blocks is the number of blocks the pool holds (per egress IP).
func (p PortPool) Blocks() int {
	if p.Size == 0 {
		return 0
	}
	n := 0
	for s := p.firstStart(); s+int(p.Size)-1 <= int(p.Last); s += int(p.Size) {
		n++
	}
	return n
}

func (p PortPool) firstStart() int {
	sz := int(p.Size)
	return (int(p.First) + sz - 1) / sz * sz
}

// PortRequest is one (pod, egress IP) that needs a block.
type PortRequest struct {
	Pod, PodUID, EgressIP string
}

func (r PortRequest) String() string { return r.Pod + " (" + r.EgressIP + ")" }

// holderKey names the holder of a block of one egress IP: the pod's UID, or, for a pod without
// metadata.uid (manifests mode: a Pod manifest need not carry one), its namespace/name, so
// that two UID-less pods never share a block.
type holderKey struct{ ip, uid, pod string }

func holderOf(ip, pod, uid string) holderKey {
	if uid != "" {
		return holderKey{ip: ip, uid: uid}
	}
	return holderKey{ip: ip, pod: pod}
}

// AllocatePortBlocks returns the port blocks after one allocation round from cur (the policy's
// status.portBlocks) for the requests want, and the requests left without a block (the pool of
// their egress IP is exhausted):
//   - a request that has a block (same egress IP and pod UID; a pod without UID: same
//     namespace/name and no UID) keeps it, also a quarantined one (its pod came back: it is
//     still its own);
//   - an active block that no request names is released: ReleasedAt = now (quarantined);
//   - a quarantined block is dropped once pool.Quarantine has passed since ReleasedAt;
//   - every other request gets the lowest aligned block of the pool that overlaps no block of
//     its egress IP (active or quarantined, whatever its size: blocks cut with an older size
//     keep theirs), in the order egress IP, pod, UID, while the result holds fewer than
//     egressv1.MaxPortBlocks entries (the CRD's limit of status.portBlocks, quarantined ones
//     included): the rest wait, as for an exhausted pool (portBlocksListFull).
//
// It is pure (now is the clock); the result is sorted by egress IP and first port.
func AllocatePortBlocks(cur []egressv1.PortBlock, want []PortRequest, pool PortPool, now time.Time) ([]egressv1.PortBlock, []PortRequest) {
	wanted := map[holderKey]PortRequest{}
	for _, r := range want {
		wanted[holderOf(r.EgressIP, r.Pod, r.PodUID)] = r
	}
	has := map[holderKey]bool{}
	var out []egressv1.PortBlock
	for _, b := range cur {
		k := holderOf(b.EgressIP, b.Pod, b.PodUID)
		switch {
		case wanted[k] != (PortRequest{}) && !has[k]:
			has[k] = true
			b.ReleasedAt = nil
		case b.ReleasedAt == nil:
			t := metav1.NewTime(now)
			b.ReleasedAt = &t
		case now.Sub(b.ReleasedAt.Time) >= pool.Quarantine:
			continue
		}
		out = append(out, b)
	}
	var todo []PortRequest
	for k, r := range wanted {
		if !has[k] {
			todo = append(todo, r)
		}
	}
	slices.SortFunc(todo, func(a, b PortRequest) int {
		return cmp.Or(cmp.Compare(a.EgressIP, b.EgressIP), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.PodUID, b.PodUID))
	})
	var waiting []PortRequest
	idx := newSlotIndex(pool, out)
	for _, r := range todo {
		if len(out) >= egressv1.MaxPortBlocks {
			waiting = append(waiting, r)
			continue
		}
		s, ok := idx.take(r.EgressIP)
		if !ok {
			waiting = append(waiting, r)
			continue
		}
		out = append(out, egressv1.PortBlock{EgressIP: r.EgressIP, Pod: r.Pod, PodUID: r.PodUID, First: int32(s), Size: pool.Size32()})
	}
	slices.SortFunc(out, func(a, b egressv1.PortBlock) int {
		return cmp.Or(cmp.Compare(a.EgressIP, b.EgressIP), cmp.Compare(a.First, b.First))
	})
	return out, waiting
}

// portBlocksListFull reports whether blocks (an allocation's result) hold the most entries
// status.portBlocks may (egressv1.MaxPortBlocks): a pod left waiting then waits for an entry,
// not (only) for a free block of its pool.
func portBlocksListFull(blocks []egressv1.PortBlock) bool {
	return len(blocks) >= egressv1.MaxPortBlocks
}

// slotIndex says, per egress IP, which aligned blocks of the pool (slots of pool.Size ports
// from pool.firstStart()) are taken: overlapped by a block of any size, active or quarantined
// (blocks cut with an older size keep theirs). Every slot below next[ip] is taken, and the
// allocation only takes slots, so one round costs O(blocks + requests + slots) instead of
// comparing every candidate with every block of its egress IP.
type slotIndex struct {
	first, size, n int
	taken          map[string][]bool
	next           map[string]int
}

func newSlotIndex(pool PortPool, blocks []egressv1.PortBlock) *slotIndex {
	x := &slotIndex{size: pool.Size, n: pool.Blocks(), taken: map[string][]bool{}, next: map[string]int{}}
	if x.n == 0 {
		return x
	}
	x.first = pool.firstStart()
	for _, b := range blocks {
		lo, hi := max(int(b.First), x.first), int(b.First)+int(b.Size)-1
		if hi < lo {
			continue
		}
		t := x.slots(b.EgressIP)
		for i := (lo - x.first) / x.size; i <= (hi-x.first)/x.size && i < x.n; i++ {
			t[i] = true
		}
	}
	return x
}

func (x *slotIndex) slots(ip string) []bool {
	t, ok := x.taken[ip]
	if !ok {
		t = make([]bool, x.n)
		x.taken[ip] = t
	}
	return t
}

// take marks the lowest free slot of ip taken and returns its first port (ok false: none).
func (x *slotIndex) take(ip string) (first int, ok bool) {
	if x.n == 0 {
		return 0, false
	}
	t := x.slots(ip)
	for i := x.next[ip]; i < x.n; i++ {
		if !t[i] {
			t[i] = true
			x.next[ip] = i + 1
			return x.first + i*x.size, true
		}
	}
	x.next[ip] = x.n
	return 0, false
}

// portBlockOf returns the active block of the pod (namespace/name pod, UID uid; without UID:
// the block of that name without UID) for egress IP ip in blocks (ok false: none).
func portBlockOf(blocks []egressv1.PortBlock, ip, pod, uid string) (first, last uint16, ok bool) {
	want := holderOf(ip, pod, uid)
	for _, b := range blocks {
		if holderOf(b.EgressIP, b.Pod, b.PodUID) == want && b.ReleasedAt == nil && b.First > 0 && b.Size > 0 && b.First+b.Size-1 <= 65535 {
			return uint16(b.First), uint16(b.First + b.Size - 1), true
		}
	}
	return 0, 0, false
}

// replyBlocksOf returns egress IP ip's port blocks in status with the node of each one's pod,
// for the stateless reply path of its active gateway (flows.EgressIP.ReplyBlocks), by port: the
// blocks not released whose (egress IP, pod, UID) exactly one node lists in status.nodes[].pods
// (the node whose agent asked for it). A block no node lists, or two do (a stale entry of a node
// being removed), is left out: replies without a connection on the gateway stay dropped for it.
func replyBlocksOf(status *egressv1.EgressGatewayStatus, ip netip.Addr) []flows.EgressReplyBlock {
	nodeOf := map[holderKey]string{}
	for _, n := range status.Nodes {
		for _, r := range n.Pods {
			if a, err := netip.ParseAddr(r.EgressIP); err != nil || a != ip {
				continue
			}
			k := holderOf(ip.String(), r.Pod, r.PodUID)
			if prev, seen := nodeOf[k]; seen && prev != n.Node {
				nodeOf[k] = ""
			} else {
				nodeOf[k] = n.Node
			}
		}
	}
	var out []flows.EgressReplyBlock
	for _, b := range status.PortBlocks {
		if a, err := netip.ParseAddr(b.EgressIP); err != nil || a != ip || b.ReleasedAt != nil ||
			b.First <= 0 || b.Size <= 0 || b.First+b.Size-1 > 65535 {
			continue
		}
		if node := nodeOf[holderOf(ip.String(), b.Pod, b.PodUID)]; node != "" {
			out = append(out, flows.EgressReplyBlock{First: uint16(b.First), Size: uint16(b.Size), Node: node})
		}
	}
	slices.SortFunc(out, func(x, y flows.EgressReplyBlock) int { return cmp.Compare(x.First, y.First) })
	return out
}

func portBlocksEqual(a, b []egressv1.PortBlock) bool {
	return slices.EqualFunc(a, b, func(x, y egressv1.PortBlock) bool {
		if (x.ReleasedAt == nil) != (y.ReleasedAt == nil) {
			return false
		}
		if x.ReleasedAt != nil && !x.ReleasedAt.Time.Truncate(time.Second).Equal(y.ReleasedAt.Time.Truncate(time.Second)) {
			return false
		}
		x.ReleasedAt, y.ReleasedAt = nil, nil
		return x == y
	})
}
