package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ofctltest"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

const agentManifest = `apiVersion: v1
kind: Node
metadata: {name: node1}
spec: {podCIDRs: [10.244.1.0/24]}
status: {addresses: [{type: InternalIP, address: 192.168.0.1}]}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  annotations: {ovs-srcip.io/preserve-source-ip: "true"}
spec:
  type: NodePort
  ports: [{name: http, port: 80, nodePort: 30080}]
`

// TestAgentRun runs the whole loop: manifests -> Reconciler -> fake bridges, then a file change,
// then a clean stop that leaves the flows in place.
func TestAgentRun(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cluster.yaml"), agentManifest)
	ex, in := ofctltest.NewFake(), ofctltest.NewFake()
	a, err := New(Config{
		ReconcilerConfig: ReconcilerConfig{
			NodeName:  thisNode,
			Dataplane: newFakeDataplane(),
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

	require.Eventually(t, func() bool { return a.Ready() == nil }, 5*time.Second, 10*time.Millisecond)
	assert.NoError(t, a.Healthy())
	require.Eventually(t, func() bool { return strings.Contains(strings.Join(ex.Flows(), "\n"), "tp_dst=30080") }, 5*time.Second, 10*time.Millisecond)

	writeFile(t, filepath.Join(dir, "cluster.yaml"), strings.Replace(agentManifest, "30080", "30081", 1))
	require.Eventually(t, func() bool {
		all := strings.Join(ex.Flows(), "\n")
		return strings.Contains(all, "tp_dst=30081") && !strings.Contains(all, "tp_dst=30080")
	}, 5*time.Second, 10*time.Millisecond)

	flowsBefore := ex.Flows()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	assert.Equal(t, flowsBefore, ex.Flows(), "flows are left in place")
}

func TestConfigValidation(t *testing.T) {
	_, err := New(Config{})
	require.Error(t, err)
	for _, want := range []string{"node name", "state source", "dataplane", "br-ex", "br-int"} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestAgentRunOneFullSyncAtStart: the start makes one full sync, not a second one right after
// the first (at 10k Services a second full sync rebuilds every flow set again). The first sync
// is slow (its bundles take 100 ms) and the pod ports' listing takes 30 ms, as a large first
// sync outlasts the listing.
func TestAgentRunOneFullSyncAtStart(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "cluster.yaml"), agentManifest)
	a, err := New(Config{
		ReconcilerConfig: ReconcilerConfig{
			NodeName:  thisNode,
			Dataplane: &slowPodPorts{newFakeDataplane()},
			Bridges:   map[flows.Bridge]FlowBridge{flows.BrEx: &slowBundles{ofctltest.NewFake()}, flows.BrInt: &slowBundles{ofctltest.NewFake()}},
		},
		Source:          &ManifestSource{Dir: dir, NodeName: thisNode, Debounce: 10 * time.Millisecond},
		MinSyncInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	require.Eventually(t, func() bool { return a.Ready() == nil }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // 20 minimum sync intervals
	m := &dto.Metric{}
	require.NoError(t, a.rec.metrics.SyncDuration.WithLabelValues("full").(prometheus.Histogram).Write(m))
	assert.Equal(t, uint64(1), m.GetHistogram().GetSampleCount(), "full syncs at start")
	cancel()
	require.NoError(t, <-done)
}

type slowPodPorts struct{ *fakeDataplane }

func (d *slowPodPorts) PodPorts(ctx context.Context) ([]PodPort, error) {
	time.Sleep(30 * time.Millisecond)
	return d.fakeDataplane.PodPorts(ctx)
}

type slowBundles struct{ *ofctltest.Fake }

func (b *slowBundles) Bundle(ctx context.Context, msgs []openflow.Message) error {
	time.Sleep(50 * time.Millisecond)
	return b.Fake.Bundle(ctx, msgs)
}
