package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	egressfake "github.com/ovs-srcip/ovs-srcip/client/clientset/versioned/fake"
	"github.com/ovs-srcip/ovs-srcip/flows"
)

func req(pod, uid, ip string) PortRequest { return PortRequest{Pod: pod, PodUID: uid, EgressIP: ip} }

// Blocks are aligned, inside the pool, and unique per egress IP; another egress IP reuses the
// same ports (its SNAT target differs).
func TestAllocatePortBlocksUnique(t *testing.T) {
	pool := PortPool{First: 1000, Last: 4095, Size: 1024, Quarantine: time.Minute}
	require.Equal(t, 3, pool.Blocks()) // 1024, 2048, 3072 (1000 is not aligned)
	now := time.Unix(1000, 0)
	got, waiting := AllocatePortBlocks(nil, []PortRequest{
		req("ns/b", "u2", "192.0.2.50"), req("ns/a", "u1", "192.0.2.50"), req("ns/c", "u3", "192.0.2.51"),
	}, pool, now)
	assert.Empty(t, waiting)
	assert.Equal(t, []egressv1.PortBlock{
		{EgressIP: "192.0.2.50", Pod: "ns/a", PodUID: "u1", First: 1024, Size: 1024},
		{EgressIP: "192.0.2.50", Pod: "ns/b", PodUID: "u2", First: 2048, Size: 1024},
		{EgressIP: "192.0.2.51", Pod: "ns/c", PodUID: "u3", First: 1024, Size: 1024},
	}, got)
}

// A pod keeps its block whatever else changes (new pods, other pods gone, request order), and
// another writer starting from the same status computes the same (stable across failover and
// restarts: the status is the only state).
func TestAllocatePortBlocksStable(t *testing.T) {
	pool := PortPool{First: 1024, Last: 65535, Size: 512, Quarantine: time.Minute}
	now := time.Unix(1000, 0)
	cur, _ := AllocatePortBlocks(nil, []PortRequest{req("ns/a", "u1", "ip"), req("ns/b", "u2", "ip")}, pool, now)
	next, _ := AllocatePortBlocks(cur, []PortRequest{req("ns/0", "u0", "ip"), req("ns/b", "u2", "ip")}, pool, now.Add(time.Second))
	assert.Equal(t, cur[1], next[1], "b keeps its block")
	assert.Equal(t, int32(1536), next[1].First)
	assert.Equal(t, "ns/0", next[2].Pod, "the new pod takes a free block, not a's quarantined one")
	assert.Equal(t, int32(2048), next[2].First)
	again, _ := AllocatePortBlocks(next, []PortRequest{req("ns/b", "u2", "ip"), req("ns/0", "u0", "ip")}, pool, now.Add(2*time.Second))
	assert.True(t, portBlocksEqual(next, again), "a second round (another writer) changes nothing")
	// A block of an older size is kept and avoided.
	old := []egressv1.PortBlock{{EgressIP: "ip", Pod: "ns/x", PodUID: "ux", First: 1024, Size: 2048}}
	got, _ := AllocatePortBlocks(old, []PortRequest{req("ns/x", "ux", "ip"), req("ns/y", "uy", "ip")}, pool, now)
	assert.Equal(t, int32(2048), got[0].Size)
	assert.Equal(t, int32(3072), got[1].First)
}

// A released block is quarantined (fake clock) and only reused after the quarantine; its pod
// coming back (same UID) within it gets it back; a re-created pod (new UID) gets a new one.
func TestAllocatePortBlocksQuarantine(t *testing.T) {
	pool := PortPool{First: 1024, Last: 2047, Size: 512, Quarantine: 2 * time.Minute}
	t0 := time.Unix(1000, 0)
	cur, _ := AllocatePortBlocks(nil, []PortRequest{req("ns/a", "u1", "ip"), req("ns/b", "u2", "ip")}, pool, t0)
	cur, _ = AllocatePortBlocks(cur, []PortRequest{req("ns/b", "u2", "ip")}, pool, t0.Add(time.Second))
	require.NotNil(t, cur[0].ReleasedAt)
	assert.Equal(t, t0.Add(time.Second), cur[0].ReleasedAt.Time)
	_, _, ok := portBlockOf(cur, "ip", "ns/a", "u1")
	assert.False(t, ok, "a quarantined block serves no pod")
	// The pool is full (a quarantined, b active): a re-created a (new UID) waits.
	got, waiting := AllocatePortBlocks(cur, []PortRequest{req("ns/b", "u2", "ip"), req("ns/a", "u9", "ip")}, pool, t0.Add(2*time.Minute))
	assert.Equal(t, []PortRequest{req("ns/a", "u9", "ip")}, waiting)
	assert.Len(t, got, 2)
	// After the quarantine it gets the block.
	got, waiting = AllocatePortBlocks(got, []PortRequest{req("ns/b", "u2", "ip"), req("ns/a", "u9", "ip")}, pool, t0.Add(time.Second+2*time.Minute))
	assert.Empty(t, waiting)
	assert.Equal(t, egressv1.PortBlock{EgressIP: "ip", Pod: "ns/a", PodUID: "u9", First: 1024, Size: 512}, got[0])
	// The same pod (UID) coming back within the quarantine keeps its own block.
	cur, _ = AllocatePortBlocks(got, []PortRequest{req("ns/a", "u9", "ip")}, pool, t0.Add(10*time.Minute))
	cur, _ = AllocatePortBlocks(cur, []PortRequest{req("ns/a", "u9", "ip"), req("ns/b", "u2", "ip")}, pool, t0.Add(11*time.Minute))
	lo, hi, ok := portBlockOf(cur, "ip", "ns/b", "u2")
	assert.True(t, ok)
	assert.Equal(t, [2]uint16{1536, 2047}, [2]uint16{lo, hi})
}

// Exhaustion: the requests beyond the pool wait (the agent drops their TCP and UDP egress and
// sets PortBlocksExhausted), in a stable order.
func TestAllocatePortBlocksExhausted(t *testing.T) {
	pool := PortPool{First: 60000, Last: 65535, Size: 2048, Quarantine: time.Minute}
	require.Equal(t, 2, pool.Blocks())
	got, waiting := AllocatePortBlocks(nil, []PortRequest{req("ns/d", "4", "ip"), req("ns/c", "3", "ip"), req("ns/b", "2", "ip"), req("ns/a", "1", "ip")}, pool, time.Unix(0, 0))
	assert.Len(t, got, 2)
	assert.Equal(t, []PortRequest{req("ns/c", "3", "ip"), req("ns/d", "4", "ip")}, waiting)
	p := &EgressPolicy{Pool: pool}
	assert.Contains(t, exhaustedMessage(p, got, waiting), "2 pod(s) wait for a source-port block (ns/c (ip), ns/d (ip)): each egress IP holds 2 blocks of 2048 ports")
}

func TestParsePortPool(t *testing.T) {
	p, err := ParsePortPool("1024-65535", 512, 2*time.Minute)
	require.NoError(t, err)
	assert.Equal(t, DefaultPortPool, p)
	assert.Equal(t, 126, p.Blocks())
	for _, c := range []struct {
		r    string
		size int
	}{{"1024", 512}, {"0-100", 1}, {"2000-1000", 1}, {"1024-65535", 500}, {"1024-65535", 65536}, {"1025-1100", 1024}, {"a-b", 1}} {
		_, err := ParsePortPool(c.r, c.size, time.Minute)
		assert.Error(t, err, "%s size %d", c.r, c.size)
	}
	_, err = ParsePortPool("1024-2047", 512, -time.Second)
	assert.Error(t, err)
	assert.Empty(t, p.Warnings(), "the defaults warn of nothing")
}

// --egress-port-quarantine=0 (or anything below a second) is refused with a clear error, and
// a quarantine shorter than 2 x MSL is accepted with a startup warning that says what it risks;
// a pool with more blocks per egress IP than status.portBlocks may hold is logged too.
func TestPortPoolQuarantineAndLimitWarnings(t *testing.T) {
	for _, q := range []time.Duration{0, 500 * time.Millisecond} {
		_, err := ParsePortPool("1024-65535", 512, q)
		require.Error(t, err, "quarantine %v", q)
		assert.Contains(t, err.Error(), "--egress-port-quarantine")
		assert.Contains(t, err.Error(), "TIME_WAIT")
	}
	p, err := ParsePortPool("1024-65535", 512, 30*time.Second)
	require.NoError(t, err)
	w := p.Warnings()
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "--egress-port-quarantine 30s is shorter than 2 x MSL (2m0s")
	assert.Contains(t, w[0], "TIME_WAIT")
	p, err = ParsePortPool("1-65535", 1, 2*time.Minute)
	require.NoError(t, err)
	w = p.Warnings()
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "65535 blocks per egress IP, more than one EgressGateway's status.portBlocks may hold (4096")
}

// The agent's wiring: with a status writer the pod's block per family comes from the policy's
// status.portBlocks (none: no block yet, its egress unmapped, with the pod's own ports; only an exhausted pool drops) and the
// node lists the pod in LocalPods for its status.nodes entry; the status writer's allocation
// and its PortBlocksExhausted condition and Event; without a writer (manifests mode) the
// blocks are allocated locally and kept across updates.
func TestEgressPortBlocksModel(t *testing.T) {
	m, k, ev := egressModel(t, egressPolicy("dual", "192.0.2.60", "2001:db8::60"))
	m.pods[nn("demo", "job")].UID = "uid-job"
	m.localPortBlocks = false
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	p := m.st.Pods[k]
	require.NotNil(t, p.Egress)
	assert.False(t, p.Egress.HasPorts(), "no block in the status yet")
	pol := policyByName(m, "dual")
	assert.Equal(t, []egressv1.PodPortRequest{
		{Pod: "demo/job", PodUID: "uid-job", EgressIP: "192.0.2.60"},
		{Pod: "demo/job", PodUID: "uid-job", EgressIP: "2001:db8::60"}}, pol.LocalPods)

	// The writer's round: the node entry lists the pod; the blocks follow.
	g := m.egws["dual"]
	g.Status.Nodes = []egressv1.NodeStatus{{Node: thisNode, ObservedGeneration: 1, Pods: pol.LocalPods}, {Node: "gone", Pods: []egressv1.PodPortRequest{{Pod: "x/y", PodUID: "u", EgressIP: "192.0.2.60"}}}}
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	pol = policyByName(m, "dual")
	blocks, waiting := AllocatePortBlocks(nil, portRequests(pol), pol.Pool, time.Unix(0, 0))
	assert.Empty(t, waiting)
	require.Len(t, blocks, 2, "the pod of a node the agent does not know gets none")
	g.Status.PortBlocks = blocks
	touched := map[flows.Key]bool{}
	m.updateEgress(klog.Background(), touched)
	p = m.st.Pods[k]
	assert.Equal(t, [2]uint16{1024, 1535}, [2]uint16{p.Egress.PortFirst, p.Egress.PortLast})
	assert.Equal(t, [2]uint16{1024, 1535}, [2]uint16{p.Egress6.PortFirst, p.Egress6.PortLast})
	assert.True(t, touched[k], "the pod's flows are rebuilt with its block")

	// Exhaustion: a pool of one block, a second pod waits: condition and Event (the writer).
	m.portPool = PortPool{First: 1024, Last: 1535, Size: 512, Quarantine: time.Minute}
	g.Status.Nodes[0].Pods = append(g.Status.Nodes[0].Pods, egressv1.PodPortRequest{Pod: "demo/other", PodUID: "uid-other", EgressIP: "192.0.2.60"})
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	pol = policyByName(m, "dual")
	require.Equal(t, thisNode, pol.StatusWriter)
	c := meta.FindStatusCondition(PolicyStatus(pol, time.Now()).Conditions, egressv1.ConditionPortBlocksExhausted)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, egressv1.ReasonPoolExhausted, c.Reason)
	assert.Contains(t, c.Message, "1 pod(s) wait for a source-port block (demo/other (192.0.2.60))")
	require.NotEmpty(t, ev.msgs)
	assert.Contains(t, ev.msgs[len(ev.msgs)-1], "PortBlocksExhausted: 1 pod(s) wait")

	// Manifests mode: local allocation, stable across updates.
	m, k, _ = egressModel(t, egressPolicy("dual", "192.0.2.60"))
	m.pods[nn("demo", "job")].UID = "uid-job"
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	first := *m.st.Pods[k].Egress
	assert.True(t, first.HasPorts())
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	assert.Equal(t, first, *m.st.Pods[k].Egress)
}

// The status writer updates status.portBlocks from the nodes' pod lists (an update of the
// status subresource: the fake clientset stores it), and a second write with the same state
// changes nothing.
func TestEgressStatusWriterPortBlocks(t *testing.T) {
	g := egressPolicy("job", "192.0.2.50")
	g.Status.Nodes = []egressv1.NodeStatus{{Node: "node2", ObservedGeneration: 1,
		Pods: []egressv1.PodPortRequest{{Pod: "demo/a", PodUID: "ua", EgressIP: "192.0.2.50"}, {Pod: "demo/b", PodUID: "ub", EgressIP: "192.0.2.50"}}}}
	c := egressfake.NewSimpleClientset()
	ctx := context.Background()
	g, err := c.OvsSrcipV1alpha1().EgressGateways().Create(ctx, g, metav1.CreateOptions{})
	require.NoError(t, err)
	w := NewEgressStatusWriter(c, "node1")
	w.clock = func() time.Time { return time.Unix(1000, 0) }
	p := &EgressPolicy{Name: "job", Generation: 1, StatusWriter: "node1", Pool: DefaultPortPool, Nodes: []string{"node1", "node2"},
		obj: g, IPs: []EgressIPState{{IP: netip.MustParseAddr("192.0.2.50"), Gateway: "node1", usable: true}}}
	require.NoError(t, w.writePortBlocks(ctx, p, w.now()))
	got, err := c.OvsSrcipV1alpha1().EgressGateways().Get(ctx, "job", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []egressv1.PortBlock{
		{EgressIP: "192.0.2.50", Pod: "demo/a", PodUID: "ua", First: 1024, Size: 512},
		{EgressIP: "192.0.2.50", Pod: "demo/b", PodUID: "ub", First: 1536, Size: 512}}, got.Status.PortBlocks)
	assert.Equal(t, g.Status.Nodes, got.Status.Nodes, "the update keeps the nodes' entries")
	// b goes: its block is quarantined, a keeps its own.
	got.Status.Nodes[0].Pods = got.Status.Nodes[0].Pods[:1]
	p.obj = got
	require.NoError(t, w.writePortBlocks(ctx, p, w.now()))
	got, err = c.OvsSrcipV1alpha1().EgressGateways().Get(ctx, "job", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, got.Status.PortBlocks, 2)
	assert.Nil(t, got.Status.PortBlocks[0].ReleasedAt)
	require.NotNil(t, got.Status.PortBlocks[1].ReleasedAt)
}

// A pod without a block is failed closed only when its pool is exhausted: while its block is
// pending (no status entry yet, or a status writer that allocates none: an older agent during an
// upgrade) its TCP and UDP keep the egress path with its own port (no prioEgressPorts flow);
// when the allocation leaves it waiting its TCP and UDP to the destinations are dropped
// (egress-no-port-block), never mapped, never sent on the host path, and a pod that has a block
// keeps its nat flows.
func TestEgressPortBlocksPendingAndExhausted(t *testing.T) {
	podFlows := func(m *model, k flows.Key) string {
		pod := m.st.Pods[k]
		pod.OFPort, pod.MAC = 7, net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x05}
		fs, err := flows.BuildPod(m.st, pod)
		require.NoError(t, err)
		var b strings.Builder
		for _, f := range fs.Flows {
			b.WriteString(f.String() + "\n")
		}
		return b.String()
	}
	m, k, _ := egressModel(t, egressPolicy("job", "192.0.2.60"))
	m.st.Nodes[thisNode] = flows.Node{Name: thisNode, InternalIP: addr("192.168.0.1"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}
	m.pods[nn("demo", "job")].UID = "uid-job"
	m.localPortBlocks = false
	m.portPool = PortPool{First: 1024, Last: 1535, Size: 512, Quarantine: time.Minute}
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	p := m.st.Pods[k]
	require.NotNil(t, p.Egress)
	assert.False(t, p.Egress.HasPorts())
	assert.False(t, p.Egress.PortsExhausted, "pending: no status entry yet")
	text := podFlows(m, k)
	assert.NotContains(t, text, "priority=21,", "pending: no TCP/UDP flow of its own, nothing dropped")
	assert.NotContains(t, text, "nat(src=", "pending: no mapping")
	assert.Regexp(t, `(?m)^priority=20,ip,.*table=60,.*goto_table:75$`, text, "pending: the egress path (prioEgress)")

	// The one block of the pool belongs to a pod of node2; this node's pod waits.
	g := m.egws["job"]
	g.Status.Nodes = []egressv1.NodeStatus{
		{Node: "node2", Pods: []egressv1.PodPortRequest{{Pod: "demo/a", PodUID: "uid-a", EgressIP: "192.0.2.60"}}},
		{Node: thisNode, Pods: []egressv1.PodPortRequest{{Pod: "demo/job", PodUID: "uid-job", EgressIP: "192.0.2.60"}}}}
	g.Status.PortBlocks = []egressv1.PortBlock{{EgressIP: "192.0.2.60", Pod: "demo/a", PodUID: "uid-a", First: 1024, Size: 512}}
	touched := map[flows.Key]bool{}
	m.updateEgress(klog.Background(), touched)
	p = m.st.Pods[k]
	assert.True(t, touched[k])
	assert.False(t, p.Egress.HasPorts())
	assert.True(t, p.Egress.PortsExhausted)
	text = podFlows(m, k)
	for _, proto := range []string{"tcp", "udp"} {
		assert.Regexp(t, `(?m)^priority=21,`+proto+`,.*table=60,.*actions=drop$`, text)
	}
	assert.NotContains(t, text, "nat(src=")

	// The block is released (demo/a gone) and quarantined: still exhausted; after the
	// quarantine the pod gets it.
	now := time.Now()
	m.now = func() time.Time { return now }
	g.Status.Nodes[0].Pods = nil
	rel := metav1.NewTime(now.Add(-30 * time.Second))
	g.Status.PortBlocks[0].ReleasedAt = &rel
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	assert.True(t, m.st.Pods[k].Egress.PortsExhausted, "quarantined block")
	g.Status.PortBlocks = []egressv1.PortBlock{{EgressIP: "192.0.2.60", Pod: "demo/job", PodUID: "uid-job", First: 1024, Size: 512}}
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	p = m.st.Pods[k]
	assert.True(t, p.Egress.HasPorts())
	assert.False(t, p.Egress.PortsExhausted)
	assert.Contains(t, podFlows(m, k), "nat(src=10.244.1.5:1024-1535)")
}

// How many status writes one new selected pod costs (docs/egress.md "Port blocks", the write
// bound): three nodes' writers (node1 the gateway and status writer, node2 and node3 the other
// nodes) are run, round after round, on the object as stored (every agent's informer sees every
// status change and publishes again after its sync) until no writer writes any more. After a
// settled start, one new pod on node2 costs exactly 2 writes (node2's apply of its status.nodes
// entry, the writer's update of status.portBlocks), and the round after writes nothing: the other
// nodes' resyncs on those changes write nothing (no storm). A pod moving from node2 to node3 costs
// 3 (two entries, one update that quarantines the old block and allocates the new one).
func TestEgressStatusWritesPerPod(t *testing.T) {
	ctx := context.Background()
	c := egressfake.NewSimpleClientset()
	writes := 0
	// The fake clientset has no server-side apply: merge an apply of the status by the rules of
	// the CRD (status.nodes a map keyed by node; activeGateways and conditions the writer's).
	c.PrependReactor("patch", "egressgateways", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetPatchType() != types.ApplyPatchType || pa.GetSubresource() != "status" {
			return false, nil, nil
		}
		writes++
		var body struct{ Status egressv1.EgressGatewayStatus }
		require.NoError(t, json.Unmarshal(pa.GetPatch(), &body))
		o, err := c.Tracker().Get(egressv1.SchemeGroupVersion.WithResource("egressgateways"), "", pa.GetName())
		require.NoError(t, err)
		g := o.(*egressv1.EgressGateway).DeepCopy()
		for _, n := range body.Status.Nodes {
			i := slices.IndexFunc(g.Status.Nodes, func(x egressv1.NodeStatus) bool { return x.Node == n.Node })
			if i < 0 {
				g.Status.Nodes = append(g.Status.Nodes, n)
			} else {
				g.Status.Nodes[i] = n
			}
		}
		if len(body.Status.Nodes) == 0 {
			g.Status.ActiveGateways, g.Status.Conditions = body.Status.ActiveGateways, body.Status.Conditions
		}
		return true, g, c.Tracker().Update(egressv1.SchemeGroupVersion.WithResource("egressgateways"), g, "")
	})
	c.PrependReactor("update", "egressgateways", func(a k8stesting.Action) (bool, runtime.Object, error) {
		writes++
		return false, nil, nil
	})
	_, err := c.OvsSrcipV1alpha1().EgressGateways().Create(ctx, egressPolicy("job", "192.0.2.50"), metav1.CreateOptions{})
	require.NoError(t, err)
	nodes := []string{"node1", "node2", "node3"}
	ws := map[string]*EgressStatusWriter{}
	for _, n := range nodes {
		ws[n] = NewEgressStatusWriter(c, n)
		ws[n].clock = func() time.Time { return time.Unix(1000, 0) }
	}
	local := map[string][]egressv1.PodPortRequest{}
	// round: every node's writer on the stored object; the number of writes it took.
	round := func() int {
		before := writes
		for _, n := range nodes {
			g, err := c.OvsSrcipV1alpha1().EgressGateways().Get(ctx, "job", metav1.GetOptions{})
			require.NoError(t, err)
			p := &EgressPolicy{Name: "job", Generation: g.Generation, StatusWriter: "node1", Pool: DefaultPortPool, Nodes: nodes,
				obj: g, IPs: []EgressIPState{{IP: netip.MustParseAddr("192.0.2.50"), Gateway: "node1", usable: true}}, LocalPods: local[n]}
			require.NoError(t, ws[n].write(ctx, p))
		}
		return writes - before
	}
	settle := func() []int {
		var per []int
		for i := 0; i < 10; i++ {
			n := round()
			if n == 0 {
				return per
			}
			per = append(per, n)
		}
		t.Fatalf("status writes never settle: %v", per)
		return nil
	}
	t.Logf("start: writes per round %v", settle())
	local["node2"] = []egressv1.PodPortRequest{{Pod: "demo/a", PodUID: "ua", EgressIP: "192.0.2.50"}}
	per := settle()
	t.Logf("one new pod on node2: writes per round %v", per)
	assert.Equal(t, []int{1, 1}, per, "node2's entry, then the writer's portBlocks (node1 runs first in a round)")
	g, err := c.OvsSrcipV1alpha1().EgressGateways().Get(ctx, "job", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, g.Status.PortBlocks, 1)
	local["node3"] = []egressv1.PodPortRequest{{Pod: "demo/b", PodUID: "ub", EgressIP: "192.0.2.50"}}
	local["node2"] = nil
	per = settle()
	t.Logf("one new pod on node3, node2's pod gone: writes per round %v", per)
	assert.Equal(t, 3, sumInts(per), "two node entries, and the writer's one update (a's block quarantined, b's allocated)")
}

func sumInts(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// BenchmarkAllocatePortBlocks is one allocation round for 16 egress IPs with 146 pods each
// (2336 requests; the default pool holds 126 blocks per egress IP, so 20 pods per egress IP
// wait and scan the whole pool): "fresh" from an empty status, "steady" from the status the
// fresh round wrote (every pod keeps its block, the waiting ones scan again).
func BenchmarkAllocatePortBlocks(b *testing.B) {
	var want []PortRequest
	for ip := 0; ip < 16; ip++ {
		for pod := 0; pod < 146; pod++ {
			want = append(want, req(fmt.Sprintf("ns/pod-%d-%d", ip, pod), fmt.Sprintf("uid-%d-%d", ip, pod), fmt.Sprintf("192.0.2.%d", 10+ip)))
		}
	}
	now := time.Unix(1000, 0)
	steady, _ := AllocatePortBlocks(nil, want, DefaultPortPool, now)
	b.Run("fresh", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			AllocatePortBlocks(nil, want, DefaultPortPool, now)
		}
	})
	b.Run("steady", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			AllocatePortBlocks(steady, want, DefaultPortPool, now)
		}
	})
}

// Manifests mode: pods without metadata.uid (a Pod manifest need not carry one) are told apart
// by namespace/name, so each gets its own block (not one block shared by every UID-less pod).
func TestEgressPortBlocksWithoutUID(t *testing.T) {
	m, k, _ := egressModel(t, egressPolicy("job", "192.0.2.60"))
	m.pods[nn("demo", "job2")] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "job2", Labels: map[string]string{"app": "job"}},
		Spec: corev1.PodSpec{NodeName: thisNode}}
	k2 := flows.Key{Kind: flows.KindPod, Namespace: "demo", Name: "job2"}
	m.st.Pods[k2] = flows.Pod{Namespace: "demo", Name: "job2", IPs: []netip.Addr{addr("10.244.1.6")}}
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	a, b := m.st.Pods[k].Egress, m.st.Pods[k2].Egress
	require.NotNil(t, a)
	require.NotNil(t, b)
	require.True(t, a.HasPorts())
	require.True(t, b.HasPorts())
	assert.NotEqual(t, a.PortFirst, b.PortFirst, "two UID-less pods share no block")
	assert.Len(t, m.localBlocks["job"], 2)
	// The pool holds one block: the second UID-less pod waits (only it is failed closed).
	m.localBlocks = nil
	m.portPool = PortPool{First: 1024, Last: 1535, Size: 512, Quarantine: time.Minute}
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	a, b = m.st.Pods[k].Egress, m.st.Pods[k2].Egress
	assert.True(t, a.HasPorts())
	assert.False(t, a.PortsExhausted)
	assert.False(t, b.HasPorts())
	assert.True(t, b.PortsExhausted)
}

// applyRecorder makes the fake clientset take server-side applies of the status (it has none):
// a status.nodes entry is merged by node, the writer's activeGateways and conditions replace
// the stored ones; applies counts them per field manager.
func applyRecorder(t *testing.T, c *egressfake.Clientset) map[string]int {
	applies := map[string]int{}
	c.PrependReactor("patch", "egressgateways", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pa := a.(k8stesting.PatchAction)
		if pa.GetPatchType() != types.ApplyPatchType || pa.GetSubresource() != "status" {
			return false, nil, nil
		}
		var body struct{ Status egressv1.EgressGatewayStatus }
		require.NoError(t, json.Unmarshal(pa.GetPatch(), &body))
		o, err := c.Tracker().Get(egressv1.SchemeGroupVersion.WithResource("egressgateways"), "", pa.GetName())
		require.NoError(t, err)
		g := o.(*egressv1.EgressGateway).DeepCopy()
		for _, n := range body.Status.Nodes {
			i := slices.IndexFunc(g.Status.Nodes, func(x egressv1.NodeStatus) bool { return x.Node == n.Node })
			if i < 0 {
				g.Status.Nodes = append(g.Status.Nodes, n)
			} else {
				g.Status.Nodes[i] = n
			}
		}
		if len(body.Status.Nodes) == 0 {
			g.Status.ActiveGateways, g.Status.Conditions = body.Status.ActiveGateways, body.Status.Conditions
			applies["gateways"]++
		} else {
			applies["node"]++
		}
		return true, g, c.Tracker().Update(egressv1.SchemeGroupVersion.WithResource("egressgateways"), g, "")
	})
	return applies
}

// A status.portBlocks update that keeps failing (here: the API server refuses it) does not
// freeze the rest of the status: activeGateways and the conditions are still applied, the
// PortBlocksExhausted condition carries the error (Unknown WriteFailed), and write returns
// the error (Run logs it; retried at the next Publish).
func TestEgressStatusWriterPortBlocksWriteFails(t *testing.T) {
	ctx := context.Background()
	c := egressfake.NewSimpleClientset()
	applies := applyRecorder(t, c)
	c.PrependReactor("update", "egressgateways", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" {
			return true, nil, apierrors.NewBadRequest("status.portBlocks: Too many: 4097: must have at most 4096 items")
		}
		return false, nil, nil
	})
	g := egressPolicy("job", "192.0.2.50")
	g.Status.Nodes = []egressv1.NodeStatus{{Node: "node2", ObservedGeneration: 1,
		Pods: []egressv1.PodPortRequest{{Pod: "demo/a", PodUID: "ua", EgressIP: "192.0.2.50"}}}}
	g, err := c.OvsSrcipV1alpha1().EgressGateways().Create(ctx, g, metav1.CreateOptions{})
	require.NoError(t, err)
	w := NewEgressStatusWriter(c, "node1")
	w.clock = func() time.Time { return time.Unix(1000, 0) }
	p := &EgressPolicy{Name: "job", Generation: 1, StatusWriter: "node1", Pool: DefaultPortPool, Nodes: []string{"node1", "node2"},
		obj: g, IPs: []EgressIPState{{IP: netip.MustParseAddr("192.0.2.50"), Gateway: "node1", usable: true}}}
	err = w.write(ctx, p)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "update status.portBlocks")
	assert.Equal(t, 1, applies["gateways"], "activeGateways and conditions applied anyway")
	got, err := c.OvsSrcipV1alpha1().EgressGateways().Get(ctx, "job", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, got.Status.PortBlocks)
	assert.Equal(t, []egressv1.ActiveGateway{{EgressIP: "192.0.2.50", Node: "node1"}}, got.Status.ActiveGateways)
	require.NotNil(t, meta.FindStatusCondition(got.Status.Conditions, egressv1.ConditionReady))
	pc := meta.FindStatusCondition(got.Status.Conditions, egressv1.ConditionPortBlocksExhausted)
	require.NotNil(t, pc)
	assert.Equal(t, metav1.ConditionUnknown, pc.Status)
	assert.Equal(t, egressv1.ReasonPortBlocksWriteFailed, pc.Reason)
	assert.Contains(t, pc.Message, "status.portBlocks not written")
	assert.Contains(t, pc.Message, "must have at most 4096 items")
}

// The status list's limit: an allocation never holds more than egressv1.MaxPortBlocks entries
// (the CRD's maxItems: a longer list is an update the API server refuses, and every pod would
// stay pending with no condition); the pods beyond it wait, and PortBlocksExhausted says it is
// the list (ListFull), not the pool.
func TestAllocatePortBlocksListLimit(t *testing.T) {
	pool := PortPool{First: 1, Last: 65535, Size: 1, Quarantine: time.Minute}
	require.Greater(t, pool.Blocks(), egressv1.MaxPortBlocks)
	var want []PortRequest
	for i := 0; i < egressv1.MaxPortBlocks+4; i++ {
		want = append(want, req(fmt.Sprintf("ns/p%05d", i), fmt.Sprintf("u%05d", i), "192.0.2.50"))
	}
	got, waiting := AllocatePortBlocks(nil, want, pool, time.Unix(0, 0))
	assert.Equal(t, egressv1.MaxPortBlocks, len(got))
	assert.Equal(t, want[egressv1.MaxPortBlocks:], waiting)
	// Quarantined entries count: one pod gone, its entry stays, so a new pod still waits.
	again, waiting := AllocatePortBlocks(got, want[1:], pool, time.Unix(1, 0))
	assert.Equal(t, egressv1.MaxPortBlocks, len(again))
	assert.Len(t, waiting, 4)

	p := &EgressPolicy{Name: "big", Generation: 1, Pool: pool, Nodes: []string{"node1"},
		obj: &egressv1.EgressGateway{Status: egressv1.EgressGatewayStatus{PortBlocks: got}},
		IPs: []EgressIPState{{IP: netip.MustParseAddr("192.0.2.50"), Gateway: "node1", usable: true}}}
	var pods []egressv1.PodPortRequest
	for _, r := range want {
		pods = append(pods, egressv1.PodPortRequest{Pod: r.Pod, PodUID: r.PodUID, EgressIP: r.EgressIP})
	}
	p.obj.Status.Nodes = []egressv1.NodeStatus{{Node: "node1", Pods: pods}}
	c := meta.FindStatusCondition(PolicyStatus(p, time.Unix(2, 0)).Conditions, egressv1.ConditionPortBlocksExhausted)
	require.NotNil(t, c)
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, egressv1.ReasonPortBlocksListFull, c.Reason)
	assert.Contains(t, c.Message, "4 pod(s) wait for a source-port block (ns/p04096 (192.0.2.50), ns/p04097 (192.0.2.50), ns/p04098 (192.0.2.50), ...): status.portBlocks holds 4096 entries, the most the EgressGateway CRD allows")
}

// egressv1.MaxPortBlocks is the generated CRD's maxItems of status.portBlocks (the marker
// takes a literal, the constant repeats it).
func TestMaxPortBlocksIsTheCRDLimit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "deploy", "crds", "crd-egressgateway.yaml"))
	require.NoError(t, err)
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Properties map[string]struct {
								MaxItems *int `json:"maxItems"`
							} `json:"properties"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(b, &crd))
	require.Len(t, crd.Spec.Versions, 1)
	mi := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["portBlocks"].MaxItems
	require.NotNil(t, mi, "status.portBlocks has a maxItems")
	assert.Equal(t, egressv1.MaxPortBlocks, *mi)
}

// The slot index (slotIndex) picks what comparing every candidate with every block of its
// egress IP picks: random statuses with blocks of several sizes (older block sizes), released
// ones and several egress IPs, against that reference.
func TestAllocatePortBlocksIndexMatchesScan(t *testing.T) {
	overlaps := func(blocks []egressv1.PortBlock, ip string, lo, hi int) bool {
		for _, b := range blocks {
			if b.EgressIP == ip && int(b.First) <= hi && lo <= int(b.First+b.Size-1) {
				return true
			}
		}
		return false
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 300; round++ {
		pool := PortPool{First: uint16(1 + rng.IntN(3000)), Last: uint16(8000 + rng.IntN(4000)), Size: 1 << (6 + rng.IntN(4)), Quarantine: time.Hour}
		var cur []egressv1.PortBlock
		for i := 0; i < rng.IntN(40); i++ {
			sz := int32(1 << (5 + rng.IntN(6)))
			first := max(int32(1+rng.IntN(12000))/sz*sz, sz)
			ip := fmt.Sprintf("ip%d", rng.IntN(3))
			if overlaps(cur, ip, int(first), int(first+sz-1)) {
				continue
			}
			b := egressv1.PortBlock{EgressIP: ip, Pod: fmt.Sprintf("ns/old%d", i), PodUID: fmt.Sprintf("old%d", i), First: first, Size: sz}
			if rng.IntN(2) == 0 {
				at := metav1.NewTime(time.Unix(0, 0))
				b.ReleasedAt = &at
			}
			cur = append(cur, b)
		}
		var want []PortRequest
		for i := 0; i < rng.IntN(60); i++ {
			want = append(want, req(fmt.Sprintf("ns/p%d", i), fmt.Sprintf("u%d", i), fmt.Sprintf("ip%d", rng.IntN(3))))
		}
		got, waiting := AllocatePortBlocks(cur, want, pool, time.Unix(1, 0))
		// The reference: every old block stays (no request names it, the quarantine has not
		// passed); each request, in the order egress IP, pod, UID, takes the lowest aligned
		// block of the pool that overlaps no block of its egress IP.
		ref := slices.Clone(cur)
		var refWaiting []PortRequest
		todo := slices.Clone(want)
		slices.SortFunc(todo, func(a, b PortRequest) int {
			return cmp.Or(cmp.Compare(a.EgressIP, b.EgressIP), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.PodUID, b.PodUID))
		})
		for _, r := range todo {
			ok := false
			for s := pool.firstStart(); s+pool.Size-1 <= int(pool.Last); s += pool.Size {
				if !overlaps(ref, r.EgressIP, s, s+pool.Size-1) {
					ref = append(ref, egressv1.PortBlock{EgressIP: r.EgressIP, Pod: r.Pod, PodUID: r.PodUID, First: int32(s), Size: int32(pool.Size)})
					ok = true
					break
				}
			}
			if !ok {
				refWaiting = append(refWaiting, r)
			}
		}
		slices.SortFunc(ref, func(a, b egressv1.PortBlock) int {
			return cmp.Or(cmp.Compare(a.EgressIP, b.EgressIP), cmp.Compare(a.First, b.First))
		})
		strip := func(bs []egressv1.PortBlock) []egressv1.PortBlock {
			out := slices.Clone(bs)
			for i := range out {
				out[i].ReleasedAt = nil
			}
			return out
		}
		require.Equal(t, strip(ref), strip(got), "round %d", round)
		require.Equal(t, refWaiting, waiting, "round %d", round)
	}
}

// The release rule: a pod keeps its block for as long as it exists on its node, also once the
// policy no longer selects it (its connections pinned in ZonePod, C37, keep the block's
// translation for their life, so the block must not go to another pod after the quarantine
// while they may run); the block is released when the pod is gone. API mode (the node keeps
// listing the pod, so the writer keeps the block) and manifests mode (the local allocation).
func TestEgressPortBlocksKeptWhileThePodExists(t *testing.T) {
	m, k, _ := egressModel(t, egressPolicy("job", "192.0.2.60"))
	m.pods[nn("demo", "job")].UID = "uid-job"
	m.localPortBlocks = false
	g := m.egws["job"]
	g.Status.Nodes = []egressv1.NodeStatus{{Node: thisNode, Pods: []egressv1.PodPortRequest{{Pod: "demo/job", PodUID: "uid-job", EgressIP: "192.0.2.60"}}}}
	g.Status.PortBlocks = []egressv1.PortBlock{{EgressIP: "192.0.2.60", Pod: "demo/job", PodUID: "uid-job", First: 1024, Size: 512}}
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	require.True(t, m.st.Pods[k].Egress.HasPorts())
	listed := []egressv1.PodPortRequest{{Pod: "demo/job", PodUID: "uid-job", EgressIP: "192.0.2.60"}}
	assert.Equal(t, listed, policyByName(m, "job").LocalPods)

	// Relabelled: no longer selected (no egress flows), still listed with its block.
	m.pods[nn("demo", "job")].Labels = map[string]string{"app": "other"}
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	assert.Nil(t, m.st.Pods[k].Egress)
	pol := policyByName(m, "job")
	assert.Equal(t, listed, pol.LocalPods, "a deselected pod keeps listing the block it holds")
	blocks, waiting := AllocatePortBlocks(g.Status.PortBlocks, portRequests(pol), pol.Pool, time.Unix(1000, 0))
	assert.Empty(t, waiting)
	assert.Equal(t, g.Status.PortBlocks, blocks, "the writer keeps the block active")

	// A pod of the same name with another UID (re-created) does not inherit it.
	m.pods[nn("demo", "job")].UID = "uid-new"
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	assert.Empty(t, policyByName(m, "job").LocalPods)

	// The pod is gone: nothing listed, the writer quarantines the block.
	m.pods[nn("demo", "job")].UID = "uid-job"
	delete(m.pods, nn("demo", "job"))
	delete(m.st.Pods, k)
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	pol = policyByName(m, "job")
	assert.Empty(t, pol.LocalPods)
	g.Status.Nodes[0].Pods = pol.LocalPods
	blocks, _ = AllocatePortBlocks(g.Status.PortBlocks, portRequests(pol), pol.Pool, time.Unix(1000, 0))
	require.Len(t, blocks, 1)
	assert.NotNil(t, blocks[0].ReleasedAt, "released (quarantined) once the pod is gone")

	// Manifests mode: the local allocation keeps the deselected pod's block until it is gone.
	m, k, _ = egressModel(t, egressPolicy("job", "192.0.2.60"))
	m.pods[nn("demo", "job")].UID = "uid-job"
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	require.True(t, m.st.Pods[k].Egress.HasPorts())
	m.pods[nn("demo", "job")].Labels = nil
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	require.Len(t, m.localBlocks["job"], 1)
	assert.Nil(t, m.localBlocks["job"][0].ReleasedAt, "kept while the pod exists")
	delete(m.pods, nn("demo", "job"))
	delete(m.st.Pods, k)
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	require.Len(t, m.localBlocks["job"], 1)
	assert.NotNil(t, m.localBlocks["job"][0].ReleasedAt, "released once the pod is gone")
}

// Two writers during a failover: between this writer's read and its update another writer
// took a block (and the node of that pod listed it), so the update fails with a Conflict; the
// retry rereads the object, allocates again from what is stored and never hands one block out
// twice (the other writer's block is kept, this writer's pod gets the next free one).
func TestEgressStatusWriterPortBlocksConflict(t *testing.T) {
	ctx := context.Background()
	c := egressfake.NewSimpleClientset()
	gvr := egressv1.SchemeGroupVersion.WithResource("egressgateways")
	g := egressPolicy("job", "192.0.2.50")
	g.Status.Nodes = []egressv1.NodeStatus{{Node: "node2", ObservedGeneration: 1,
		Pods: []egressv1.PodPortRequest{{Pod: "demo/a", PodUID: "ua", EgressIP: "192.0.2.50"}}}}
	g, err := c.OvsSrcipV1alpha1().EgressGateways().Create(ctx, g, metav1.CreateOptions{})
	require.NoError(t, err)
	updates, gets := 0, 0
	c.PrependReactor("get", "egressgateways", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		return false, nil, nil
	})
	c.PrependReactor("update", "egressgateways", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		updates++
		if updates > 1 {
			return false, nil, nil
		}
		// The other writer's update lands first: node3's pod x took the block 1024.
		o, err := c.Tracker().Get(gvr, "", "job")
		require.NoError(t, err)
		other := o.(*egressv1.EgressGateway).DeepCopy()
		other.Status.Nodes = append(other.Status.Nodes, egressv1.NodeStatus{Node: "node3",
			Pods: []egressv1.PodPortRequest{{Pod: "demo/x", PodUID: "ux", EgressIP: "192.0.2.50"}}})
		other.Status.PortBlocks = []egressv1.PortBlock{{EgressIP: "192.0.2.50", Pod: "demo/x", PodUID: "ux", First: 1024, Size: 512}}
		other.ResourceVersion = "2"
		require.NoError(t, c.Tracker().Update(gvr, other, ""))
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), "job", errors.New("the object has been modified"))
	})
	w := NewEgressStatusWriter(c, "node1")
	w.clock = func() time.Time { return time.Unix(1000, 0) }
	p := &EgressPolicy{Name: "job", Generation: 1, StatusWriter: "node1", Pool: DefaultPortPool, Nodes: []string{"node1", "node2", "node3"},
		obj: g, IPs: []EgressIPState{{IP: netip.MustParseAddr("192.0.2.50"), Gateway: "node1", usable: true}}}
	require.NoError(t, w.writePortBlocks(ctx, p, w.now()))
	assert.Equal(t, 2, updates, "one conflict, one retry")
	assert.Equal(t, 1, gets, "the retry rereads the object")
	got, err := c.OvsSrcipV1alpha1().EgressGateways().Get(ctx, "job", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []egressv1.PortBlock{
		{EgressIP: "192.0.2.50", Pod: "demo/x", PodUID: "ux", First: 1024, Size: 512},
		{EgressIP: "192.0.2.50", Pod: "demo/a", PodUID: "ua", First: 1536, Size: 512}}, got.Status.PortBlocks,
		"the other writer's block kept, no block given twice")
	assert.Len(t, got.Status.Nodes, 2, "the update keeps the entry the other node wrote in between")
}
