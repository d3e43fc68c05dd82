package agent

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ofctltest"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

type fixture struct {
	t      testing.TB
	ctx    context.Context
	dp     *fakeDataplane
	ex, in *ofctltest.Fake
	synced bool
	events *recordingEvents
	r      *Reconciler
}

func newFixture(t testing.TB) *fixture {
	_, ctx := ktesting.NewTestContext(t)
	f := &fixture{t: t, ctx: ctx, dp: newFakeDataplane(), ex: ofctltest.NewFake(), in: ofctltest.NewFake(), synced: true, events: &recordingEvents{}}
	f.dp.podPorts = []PodPort{{Namespace: "ns1", Name: "web-0", Interface: "veth1", OFPort: 10,
		MAC: []byte{0x0a, 0x58, 10, 244, 1, 5}}}
	f.r = f.newReconciler()
	return f
}

// newReconciler returns a Reconciler on the fixture's bridges, as after an agent restart.
func (f *fixture) newReconciler() *Reconciler { return f.newReconcilerWith() }

// newReconcilerWith is newReconciler with changes to its config.
func (f *fixture) newReconcilerWith(mod ...func(*ReconcilerConfig)) *Reconciler {
	cfg := ReconcilerConfig{
		NodeName:  thisNode,
		Bridges:   map[flows.Bridge]FlowBridge{flows.BrEx: f.ex, flows.BrInt: f.in},
		Dataplane: f.dp,
		HasSynced: func() bool { return f.synced },
		Events:    f.events,
	}
	for _, m := range mod {
		m(&cfg)
	}
	return NewReconciler(cfg)
}

// seed gives r the base cluster: two nodes, a local pod and n opted-in Services.
func (f *fixture) seed(r *Reconciler, n int) {
	r.OnNode(nil, makeNode("node1", "192.168.0.1", "10.244.1.0/24"))
	r.OnNode(nil, makeNode("node2", "192.168.0.2", "10.244.2.0/24"))
	r.OnPod(nil, &corev1.Pod{ObjectMeta: metaNS("ns1", "web-0"), Spec: corev1.PodSpec{NodeName: thisNode},
		Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}}})
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc%d", i)
		r.OnService(nil, makeService("ns1", name, int32(30000+i)))
		r.OnEndpointSlice(nil, makeSlice("ns1", name, name+"-a", ep("10.244.1.5", "node1"), ep(fmt.Sprintf("10.244.2.%d", i%250+1), "node2")))
	}
}

func (f *fixture) sync() error {
	return f.r.Sync(f.ctx)
}

func (f *fixture) bundles() int {
	a, _ := f.ex.Applied()
	b, _ := f.in.Applied()
	return a + b
}

func TestNoSyncBeforeSourceSynced(t *testing.T) {
	f := newFixture(t)
	f.synced = false
	f.seed(f.r, 3)
	require.ErrorIs(t, f.sync(), ErrNotSynced)
	assert.Zero(t, f.bundles())
	assert.Empty(t, f.ex.Flows())
	assert.False(t, f.r.Status().FullSyncDone)

	f.synced = true
	require.NoError(t, f.sync())
	assert.Equal(t, 2, f.bundles(), "one bundle per bridge")
	assert.True(t, f.r.Status().FullSyncDone)
}

func TestSecondSyncWritesNothing(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 3)
	require.NoError(t, f.sync())
	n := f.bundles()
	require.NotEmpty(t, f.ex.Flows())
	require.Len(t, f.ex.Groups(), 3)

	require.NoError(t, f.sync(), "partial, nothing changed")
	f.r.RequestFullSync()
	require.NoError(t, f.sync(), "full, no drift")
	// A resync delivering identical objects is a no-op for the trackers.
	f.r.OnService(makeService("ns1", "svc0", 30000), makeService("ns1", "svc0", 30000))
	require.NoError(t, f.sync())
	assert.Equal(t, n, f.bundles())
}

func TestRestartWritesNothing(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 5)
	require.NoError(t, f.sync())
	n := f.bundles()
	exFlows, inFlows := f.ex.Flows(), f.in.Flows()

	// A new agent incarnation against the same bridges computes identical cookies.
	f.r = f.newReconciler()
	f.seed(f.r, 5)
	require.NoError(t, f.sync())
	assert.Equal(t, n, f.bundles(), "the first sync after a restart wrote a bundle")
	assert.Equal(t, exFlows, f.ex.Flows())
	assert.Equal(t, inFlows, f.in.Flows())
}

func TestPartialSyncTouchesOnlyChangedService(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 5)
	require.NoError(t, f.sync())
	before := f.r.Applied(flows.BrEx)
	exBundles, _ := f.ex.Applied()
	inBundles, _ := f.in.Applied()

	f.r.OnEndpointSlice(nil, makeSlice("ns1", "svc2", "svc2-b", ep("10.244.2.99", "node2")))
	require.NoError(t, f.sync())

	after := f.r.Applied(flows.BrEx)
	changed := diffKeys(before, after)
	assert.Equal(t, []string{"service-port/ns1/svc2:http/TCP"}, changed)
	gotEx, _ := f.ex.Applied()
	gotIn, _ := f.in.Applied()
	assert.Equal(t, exBundles+1, gotEx, "one bundle on br-ex")
	assert.Equal(t, inBundles, gotIn, "nothing on br-int")
	assert.Contains(t, strings.Join(f.ex.Flows(), "\n"), after[svcKey("svc2")].Cookie.String())
	assert.NotContains(t, strings.Join(f.ex.Flows(), "\n"), before[svcKey("svc2")].Cookie.String())
}

func TestFailedApplyFallsBackToFullSync(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 3)
	require.NoError(t, f.sync())

	f.r.OnEndpointSlice(nil, makeSlice("ns1", "svc1", "svc1-b", ep("10.244.2.99", "node2")))
	f.ex.FailNext(1)
	err := f.sync()
	require.ErrorIs(t, err, ofctltest.ErrInjected)
	assert.False(t, f.r.Status().FailingSince.IsZero())

	// Drift meanwhile: someone deletes svc0's flows by hand.
	c0 := f.r.Applied(flows.BrEx)[svcKey("svc0")].Cookie
	require.NoError(t, f.ex.Bundle(f.ctx, []openflow.Message{openflow.DeleteCookie{Cookie: uint64(c0)}}))

	require.NoError(t, f.sync(), "the retry is a full sync")
	assert.True(t, f.r.Status().FailingSince.IsZero())

	// The bridges now hold exactly what a fresh agent would write.
	g := newFixture(t)
	g.seed(g.r, 3)
	g.r.OnEndpointSlice(nil, makeSlice("ns1", "svc1", "svc1-b", ep("10.244.2.99", "node2")))
	require.NoError(t, g.sync())
	assert.Equal(t, g.ex.Flows(), f.ex.Flows())
	assert.Equal(t, g.ex.Groups(), f.ex.Groups())
	assert.Equal(t, g.in.Flows(), f.in.Flows())
}

func TestFullSyncRemovesOrphans(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 2)
	require.NoError(t, f.sync())
	orphan := flows.NewCookie(flows.KindServicePort, 0xdead)
	foreignFlow := &openflow.Flow{Cookie: 0x1234, Table: 0, Priority: 1, Actions: []openflow.Action{openflow.Output{Port: openflow.PortNormal}}}
	foreign := foreignFlow.String()
	require.NoError(t, f.ex.Bundle(f.ctx, []openflow.Message{
		openflow.FlowMod{Command: openflow.FlowAdd, Flow: &openflow.Flow{Cookie: uint64(orphan), Table: 40, Priority: 100,
			Protocol: openflow.ProtoIP, Match: []openflow.Match{openflow.IPv4Dst(netip.MustParseAddr("198.51.100.99"))},
			Actions: []openflow.Action{openflow.Drop{}}}},
		openflow.FlowMod{Command: openflow.FlowAdd, Flow: foreignFlow},
	}))
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	all := strings.Join(f.ex.Flows(), "\n")
	assert.NotContains(t, all, orphan.String())
	assert.Contains(t, all, foreign, "foreign flows are never touched")
}

func TestDeleteServiceRemovesItsCookieAndGroup(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 3)
	require.NoError(t, f.sync())
	before := f.r.Applied(flows.BrEx)
	gone := before[svcKey("svc1")]
	require.Len(t, gone.Groups, 1)
	flowsBefore, groupsBefore := f.ex.Flows(), f.ex.Groups()

	f.r.OnService(makeService("ns1", "svc1", 30001), nil)
	require.NoError(t, f.sync())

	var wantFlows []string
	for _, l := range flowsBefore {
		if !strings.Contains(l, "cookie="+gone.Cookie.String()) {
			wantFlows = append(wantFlows, l)
		}
	}
	require.Less(t, len(wantFlows), len(flowsBefore))
	assert.Equal(t, wantFlows, f.ex.Flows())
	var wantGroups []uint32
	for _, g := range groupsBefore {
		if g != gone.Groups[0] {
			wantGroups = append(wantGroups, g)
		}
	}
	assert.Equal(t, wantGroups, f.ex.Groups())
	assert.NotContains(t, f.r.Applied(flows.BrEx), svcKey("svc1"))
}

func TestAnnotationRemovedRemovesFlows(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 2)
	require.NoError(t, f.sync())
	require.Len(t, f.ex.Groups(), 2)
	cur := makeService("ns1", "svc0", 30000)
	next := makeService("ns1", "svc0", 30000, func(s *corev1.Service) { delete(s.Annotations, AnnotationPreserveSourceIP) })
	f.r.OnService(cur, next)
	require.NoError(t, f.sync())
	assert.Len(t, f.ex.Groups(), 1)
	assert.NotContains(t, f.r.Applied(flows.BrEx), svcKey("svc0"))
}

func TestConflictingServiceDoesNotBreakOthers(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 2)
	require.NoError(t, f.sync())
	winner := f.r.Applied(flows.BrEx)[svcKey("svc0")]

	// svc9 claims svc0's NodePort: svc0 (older by name order) keeps it, svc9 gets an Event.
	f.r.OnService(nil, makeService("ns1", "svc9", 30000))
	require.NoError(t, f.sync())
	assert.Equal(t, winner, f.r.Applied(flows.BrEx)[svcKey("svc0")], "the winner is untouched")
	assert.Contains(t, f.r.Applied(flows.BrEx), svcKey("svc9"))
	require.NotEmpty(t, f.events.msgs)
	assert.Contains(t, f.events.msgs[len(f.events.msgs)-1], ReasonConflict)

	// When svc0 goes away, svc9 gets the NodePort.
	before9 := f.r.Applied(flows.BrEx)[svcKey("svc9")]
	f.r.OnService(makeService("ns1", "svc0", 30000), nil)
	require.NoError(t, f.sync())
	assert.NotEqual(t, before9.Cookie, f.r.Applied(flows.BrEx)[svcKey("svc9")].Cookie)
}

func TestDataplaneFailureIsRetriedAsFull(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 1)
	f.dp.fail.Store(true)
	require.Error(t, f.sync())
	assert.Zero(t, f.bundles())
	f.dp.fail.Store(false)
	require.NoError(t, f.sync())
	assert.True(t, f.r.Status().FullSyncDone)
}

func svcKey(name string) flows.Key {
	return flows.Key{Kind: flows.KindServicePort, Namespace: "ns1", Name: name, Port: "http", Protocol: flows.TCP}
}

func diffKeys(a, b map[flows.Key]flows.Applied) []string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w.Cookie != v.Cookie {
			out = append(out, k.String())
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k.String())
		}
	}
	return out
}

// The udp-fragments flow set of an address (an EverySync kind with one key per address) appears
// with the first UDP entry point on it and goes away, in a partial sync, with the last one; the
// base pipeline and the other Services are not rewritten.
func TestUDPFragmentsFollowUDPEntryPoints(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 2)
	require.NoError(t, f.sync())
	fragKey := flows.Key{Kind: flows.KindUDPFragments, Name: "192.168.0.1"}
	assert.NotContains(t, f.r.Applied(flows.BrEx), fragKey, "no UDP entry point yet")
	before := f.r.Applied(flows.BrEx)
	udp := func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 31053}}
	}
	f.r.OnService(nil, makeService("ns1", "dns", 0, udp))
	require.NoError(t, f.sync())
	after := f.r.Applied(flows.BrEx)
	require.Contains(t, after, fragKey)
	assert.ElementsMatch(t, []string{"service-port/ns1/dns:dns/UDP", "udp-fragments/192.168.0.1"}, diffKeys(before, after))
	assert.Contains(t, strings.Join(f.ex.Flows(), "\n"), "udp,nw_dst=192.168.0.1,nw_frag=yes")

	f.r.OnService(makeService("ns1", "dns", 0, udp), nil)
	require.NoError(t, f.sync())
	assert.NotContains(t, f.r.Applied(flows.BrEx), fragKey, "gone with the last UDP entry point, in a partial sync")
	assert.NotContains(t, strings.Join(f.ex.Flows(), "\n"), "nw_frag=yes")
	assert.Empty(t, diffKeys(before, f.r.Applied(flows.BrEx)))
}

// srcip_agent_change_to_flows_seconds has one observation per sync that applied object
// changes (not for the first full sync, nor for a sync without changes); a change whose sync
// failed is observed by the sync that applies it, measured from its arrival.
func TestChangeToFlowsMetric(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 3)
	require.NoError(t, f.sync())
	count := func() uint64 {
		m := &dto.Metric{}
		require.NoError(t, f.r.metrics.ChangeToFlows.Write(m))
		return m.GetHistogram().GetSampleCount()
	}
	sum := func() float64 {
		m := &dto.Metric{}
		require.NoError(t, f.r.metrics.ChangeToFlows.Write(m))
		return m.GetHistogram().GetSampleSum()
	}
	assert.Zero(t, count(), "the first full sync is no change")

	f.r.OnEndpointSlice(nil, makeSlice("ns1", "svc1", "svc1-b", ep("10.244.2.99", "node2")))
	require.NoError(t, f.sync())
	assert.Equal(t, uint64(1), count())
	require.NoError(t, f.sync())
	assert.Equal(t, uint64(1), count(), "a sync without changes observes nothing")

	f.r.OnEndpointSlice(nil, makeSlice("ns1", "svc2", "svc2-b", ep("10.244.2.98", "node2")))
	f.ex.FailNext(1)
	require.Error(t, f.sync())
	assert.Equal(t, uint64(1), count(), "a failed sync observes nothing")
	time.Sleep(20 * time.Millisecond)
	before := sum()
	require.NoError(t, f.sync())
	assert.Equal(t, uint64(2), count())
	assert.GreaterOrEqual(t, sum()-before, 0.02, "measured from the change's arrival, before the failed sync")
}

// With ReleaseMemory the memory the first full sync freed goes back to the operating system
// once that sync is done, on another goroutine: the heap the runtime holds shrinks; later full
// syncs do not do it again.
func TestReleaseMemoryAfterFirstSync(t *testing.T) {
	f := newFixture(t)
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) { c.ReleaseMemory = true })
	f.seed(f.r, 2000)
	require.NoError(t, f.sync())
	select {
	case <-f.r.memReleased:
	case <-time.After(10 * time.Second):
		t.Fatal("the first full sync's memory was not released")
	}
	before, after := f.r.memHeld[0], f.r.memHeld[1]
	assert.Less(t, after, before, "the heap held from the operating system shrank")
	f.r.RequestFullSync()
	require.NoError(t, f.sync(), "a second full sync does not close memReleased twice")
}

// A change that arrives while a sync fails does not hide the older change of that sync: the
// next successful sync measures from the older one.
func TestChangeToFlowsKeepsOldestAfterFailure(t *testing.T) {
	f := newFixture(t)
	older, newer := time.Now().Add(-time.Second).UnixNano(), time.Now().UnixNano()
	f.r.pendingSince.Store(newer) // arrived during the failed sync, after its Swap(0)
	f.r.keepPending(older)
	assert.Equal(t, older, f.r.pendingSince.Load())
	f.r.keepPending(newer)
	assert.Equal(t, older, f.r.pendingSince.Load(), "a newer time does not replace an older one")
	f.r.pendingSince.Store(0)
	f.r.keepPending(newer)
	assert.Equal(t, newer, f.r.pendingSince.Load())
}
