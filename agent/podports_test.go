package agent

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ofctltest"
)

// podFixture is a fixture after its first full sync, with the Pod object of ns1/web-1 known but
// no port for it yet, and the pod-port source's baseline listed.
func podFixture(t *testing.T) (*fixture, *podPortSource) {
	f := newFixture(t)
	f.seed(f.r, 5)
	f.r.OnPod(nil, &corev1.Pod{ObjectMeta: metaNS("ns1", "web-1"), Spec: corev1.PodSpec{NodeName: thisNode}})
	src := &podPortSource{dp: f.dp, rec: f.r}
	require.NoError(t, src.refresh(f.ctx))
	require.NoError(t, f.sync())
	require.NoError(t, f.sync())
	return f, src
}

var web1Port = PodPort{Namespace: "ns1", Name: "web-1", Interface: "veth2", OFPort: 11,
	MAC: net.HardwareAddr{0x0a, 0x58, 10, 244, 1, 6}, IPs: []netip.Addr{addr("10.244.1.6")}, UID: ""}

// A CNI ADD (a new pod port in OVSDB) is a partial sync of that pod's keys only: no OVSDB
// re-read, no inventory, br-ex untouched, one br-int bundle with the pod's flow set; the pod's
// Interface is acknowledged with the applied cookie.
func TestPodPortAddIsPartialSyncOfThatPod(t *testing.T) {
	f, src := podFixture(t)
	ensured := f.dp.ensured.Load()
	exBefore, inBefore := f.r.Applied(flows.BrEx), f.r.Applied(flows.BrInt)
	exBundles, _ := f.ex.Applied()
	inBundles, _ := f.in.Applied()
	assert.Zero(t, f.dp.ack("veth2"))

	f.dp.podPorts = append(f.dp.podPorts, web1Port)
	require.NoError(t, src.refresh(f.ctx))
	require.Equal(t, 1, f.r.model.podPortChanges.Pending())
	require.NoError(t, f.sync())

	assert.Equal(t, ensured, f.dp.ensured.Load(), "a pod port change must not re-read OVSDB (a full sync)")
	key := flows.Key{Kind: flows.KindPod, Namespace: "ns1", Name: "web-1"}
	assert.Equal(t, []string{key.String()}, diffKeys(inBefore, f.r.Applied(flows.BrInt)), "only the pod's flow set changed on br-int")
	assert.Empty(t, diffKeys(exBefore, f.r.Applied(flows.BrEx)))
	exAfter, _ := f.ex.Applied()
	inAfter, _ := f.in.Applied()
	assert.Equal(t, exBundles, exAfter, "no br-ex bundle")
	assert.Equal(t, inBundles+1, inAfter, "one br-int bundle")
	assert.Contains(t, strings.Join(f.in.Flows(), "\n"), "in_port=11")
	applied := f.r.Applied(flows.BrInt)[key]
	assert.Equal(t, applied.Cookie, f.dp.ack("veth2"), "the pod's Interface is acknowledged with its flow set's cookie")
	assert.NotZero(t, f.dp.ack("veth1"), "the pods of the full sync are acknowledged too")

	// A refresh that finds the same ports records nothing.
	require.NoError(t, src.refresh(f.ctx))
	assert.Zero(t, f.r.model.podPortChanges.Pending())

	// The acknowledgement comes back through OVSDB (Acked): no change (no sync that would hold
	// back the next real one by MinSyncInterval), and a later sync acknowledges nothing again.
	for i := range f.dp.podPorts {
		f.dp.podPorts[i].Acked = f.dp.ack(f.dp.podPorts[i].Interface)
	}
	require.NoError(t, src.refresh(f.ctx))
	assert.Zero(t, f.r.model.podPortChanges.Pending(), "the echo of an acknowledgement is no change")
	calls, inBundles := f.dp.ackCalls, inAfter
	require.NoError(t, f.sync())
	assert.Equal(t, calls, f.dp.ackCalls, "nothing to acknowledge")
	inAfter, _ = f.in.Applied()
	assert.Equal(t, inBundles, inAfter, "the echo writes no bundle")
	assert.Equal(t, ensured, f.dp.ensured.Load())

	// A port re-created with the same name and ofport carries no acknowledgement: it gets one.
	delete(f.dp.acks, "veth2")
	f.dp.podPorts[1].Acked = 0
	require.NoError(t, src.refresh(f.ctx))
	require.NoError(t, f.sync())
	assert.Equal(t, applied.Cookie, f.dp.ack("veth2"))
}

// A CNI DEL (the pod port gone from OVSDB) removes the pod's flows in a partial sync.
func TestPodPortDeleteRemovesPodFlows(t *testing.T) {
	f, src := podFixture(t)
	f.dp.podPorts = append(f.dp.podPorts, web1Port)
	require.NoError(t, src.refresh(f.ctx))
	require.NoError(t, f.sync())
	require.Contains(t, strings.Join(f.in.Flows(), "\n"), "in_port=11")
	ensured := f.dp.ensured.Load()
	inBefore := f.r.Applied(flows.BrInt)

	f.dp.podPorts = f.dp.podPorts[:1]
	require.NoError(t, src.refresh(f.ctx))
	require.NoError(t, f.sync())

	assert.Equal(t, ensured, f.dp.ensured.Load(), "partial sync")
	key := flows.Key{Kind: flows.KindPod, Namespace: "ns1", Name: "web-1"}
	assert.Equal(t, []string{key.String()}, diffKeys(inBefore, f.r.Applied(flows.BrInt)))
	assert.NotContains(t, f.r.Applied(flows.BrInt), key)
	assert.NotContains(t, strings.Join(f.in.Flows(), "\n"), "in_port=11", "the pod's flows are deleted")
	assert.Contains(t, strings.Join(f.in.Flows(), "\n"), "in_port=10", "the other pod's flows stay")
}

// A pod port whose ofport changed (the CNI re-attached it) is a partial sync too: the pod's
// flows move to the new ofport and the acknowledgement follows the new cookie.
func TestPodPortOFPortChangeIsPartial(t *testing.T) {
	f, src := podFixture(t)
	f.dp.podPorts = append(f.dp.podPorts, web1Port)
	require.NoError(t, src.refresh(f.ctx))
	require.NoError(t, f.sync())
	first := f.dp.ack("veth2")
	ensured := f.dp.ensured.Load()

	moved := web1Port
	moved.OFPort = 12
	f.dp.podPorts[1] = moved
	require.NoError(t, src.refresh(f.ctx))
	require.NoError(t, f.sync())
	assert.Equal(t, ensured, f.dp.ensured.Load(), "partial sync")
	all := strings.Join(f.in.Flows(), "\n")
	assert.Contains(t, all, "in_port=12")
	assert.NotContains(t, all, "in_port=11")
	assert.NotEqual(t, first, f.dp.ack("veth2"))
	assert.Equal(t, f.r.Applied(flows.BrInt)[flows.Key{Kind: flows.KindPod, Namespace: "ns1", Name: "web-1"}].Cookie, f.dp.ack("veth2"))
}

const podManifest = agentManifest + `---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: ns1}
spec: {nodeName: node1}
`

// Through Agent.Run: a pod-port signal makes a partial sync (no OVSDB re-read), a Dataplane
// change (a bridge, the uplink, an ofport of the plumbing) a full one.
func TestAgentRunPodPortsPartialOtherChangesFull(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cluster.yaml"), podManifest)
	ex, in := ofctltest.NewFake(), ofctltest.NewFake()
	dp := newFakeDataplane()
	a, err := New(Config{
		ReconcilerConfig: ReconcilerConfig{
			NodeName:  thisNode,
			Dataplane: dp,
			Bridges:   map[flows.Bridge]FlowBridge{flows.BrEx: ex, flows.BrInt: in},
		},
		Source:          &ManifestSource{Dir: dir, NodeName: thisNode, Debounce: 10 * time.Millisecond},
		MinSyncInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	require.Eventually(t, func() bool { return a.Ready() == nil }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // let the first syncs settle
	ensured := dp.ensured.Load()

	// Only the Run goroutine reads podPorts after this point (through refresh): set it, then signal.
	port := web1Port
	port.IPs = []netip.Addr{addr("10.244.1.6")}
	dp.podPorts = []PodPort{port}
	dp.podChanges <- struct{}{}
	require.Eventually(t, func() bool { return dp.ack("veth2") != 0 }, 5*time.Second, 10*time.Millisecond, "the pod's flows are acknowledged")
	assert.Contains(t, strings.Join(in.Flows(), "\n"), "in_port=11")
	assert.Equal(t, ensured, dp.ensured.Load(), "a pod port is no full sync")

	dp.changes <- struct{}{}
	require.Eventually(t, func() bool { return dp.ensured.Load() > ensured }, 5*time.Second, 10*time.Millisecond, "an OVSDB change beyond pod ports is a full sync")
}

// A pod whose flow set lost its address to another pod (AllOrNothing: no flows) is not
// acknowledged: srcip-cni's ADD keeps waiting, as it did for the pod-kind flows on its port.
func TestPodPortLosingConflictIsNotAcknowledged(t *testing.T) {
	f, src := podFixture(t)
	thief := web1Port
	thief.IPs = []netip.Addr{addr("10.244.1.5")} // web-0's address, confirmed by its Pod object
	f.dp.podPorts = append(f.dp.podPorts, thief)
	require.NoError(t, src.refresh(f.ctx))
	require.NoError(t, f.sync())
	assert.NotContains(t, strings.Join(f.in.Flows(), "\n"), "in_port=11", "the losing pod has no flows")
	assert.Zero(t, f.dp.ack("veth2"), "and no acknowledgement")
	assert.NotZero(t, f.dp.ack("veth1"))
}

// An acknowledgement arriving (or changing) is the echo of the agent's own write: no change. A
// port losing it (re-created) is one, as is any other field.
func TestPodPortsEqualIgnoresArrivingAcknowledgements(t *testing.T) {
	port := func(acked flows.Cookie, ofport int) []PodPort {
		p := web1Port
		p.Acked, p.OFPort = acked, ofport
		return []PodPort{p}
	}
	for _, c := range []struct {
		name      string
		prev, cur []PodPort
		want      bool
	}{
		{"same", port(7, 11), port(7, 11), true},
		{"acknowledged", port(0, 11), port(7, 11), true},
		{"acknowledged again", port(7, 11), port(9, 11), true},
		{"acknowledgement lost", port(7, 11), port(0, 11), false},
		{"ofport", port(7, 11), port(7, 12), false},
		{"a port more", port(0, 11), append(port(0, 11), port(0, 12)...), false},
	} {
		assert.Equal(t, c.want, podPortsEqual(&c.prev, &c.cur), c.name)
	}
}
