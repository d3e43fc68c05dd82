package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/flowsnap"
)

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// The snapshot holds exactly what the bridges hold, after full and partial syncs: one flow line
// per installed flow and every group line before the first flow line; the file is written by
// the writer goroutine and once more when it stops.
func TestFlowSnapshotFollowsApplied(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(t.TempDir(), "flows.snapshot")
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
		c.FlowSnapshot = &FlowSnapshotConfig{Path: path, MinInterval: time.Millisecond,
			BridgeNames: map[flows.Bridge]string{flows.BrEx: "br-ex", flows.BrInt: "br-int"}}
	})
	snap := f.r.syncer.snap
	require.NotNil(t, snap)
	_, gen := snap.snapshot()
	assert.Zero(t, gen, "nothing recorded before the first sync")

	check := func(what string) {
		t.Helper()
		s, _ := snap.snapshot()
		require.Len(t, s.Bridges, 2)
		assert.Equal(t, "br-int", s.Bridges[0].Name, "br-int first, as the agent applies")
		for i, fake := range map[int]interface{ Flows() []string }{0: f.in, 1: f.ex} {
			lines := s.Bridges[i].Lines
			assert.Equal(t, len(fake.Flows()), countPrefix(lines, "flow add "), "%s: %s flow lines", what, s.Bridges[i].Name)
			firstFlow := len(lines)
			for j, l := range lines {
				if strings.HasPrefix(l, "flow ") {
					firstFlow = j
					break
				}
			}
			assert.Zero(t, countPrefix(lines[firstFlow:], "group "), "%s: a group line after a flow line", what)
		}
		assert.Equal(t, len(f.ex.Groups()), countPrefix(s.Bridges[1].Lines, "group add_or_mod "), "%s: br-ex groups", what)
	}
	f.seed(f.r, 3)
	require.NoError(t, f.sync())
	check("first full sync")
	_, gen1 := snap.snapshot()
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	_, gen2 := snap.snapshot()
	assert.Equal(t, gen1, gen2, "an unchanged full sync renders nothing again")

	f.r.OnService(makeService("ns1", "svc1", 30001), nil)
	require.NoError(t, f.sync())
	check("after a Service was deleted (partial sync)")

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); snap.run(f.ctx, stop) }()
	snap.changed()
	require.Eventually(t, func() bool { _, err := flowsnap.ReadFile(path); return err == nil }, 5*time.Second, 10*time.Millisecond)
	f.r.OnService(makeService("ns1", "svc2", 30002), nil)
	require.NoError(t, f.sync())
	close(stop)
	<-done
	got, err := flowsnap.ReadFile(path)
	require.NoError(t, err)
	want, _ := snap.snapshot()
	assert.Equal(t, thisNode, got.Node)
	assert.Equal(t, flowsnap.ReadBootID(), got.BootID)
	for i := range want.Bridges {
		assert.Equal(t, want.Bridges[i].Lines, got.Bridges[i].Lines, "the last write after stop has the last sync")
	}
	// The metrics of the last write: its time, the file's size, no error.
	st, err := os.Stat(path)
	require.NoError(t, err)
	m := f.r.metrics
	assert.Equal(t, float64(st.Size()), testutil.ToFloat64(m.FlowSnapshotBytes))
	assert.InDelta(t, float64(st.ModTime().UnixNano())/1e9, testutil.ToFloat64(m.FlowSnapshotLastWrite), 1, "the file's mtime")
	assert.Zero(t, testutil.ToFloat64(m.FlowSnapshotWriteErrors))
}

// A write that fails (here: the snapshot's directory is missing) counts in
// srcip_agent_flow_snapshot_write_errors_total, leaves the last-write gauges alone, and is
// retried at the next change.
func TestFlowSnapshotWriteErrorsCounted(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(t.TempDir(), "missing")
	path := filepath.Join(dir, "flows.snapshot")
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
		c.FlowSnapshot = &FlowSnapshotConfig{Path: path, MinInterval: time.Millisecond,
			BridgeNames: map[flows.Bridge]string{flows.BrEx: "br-ex", flows.BrInt: "br-int"}}
	})
	m, snap := f.r.metrics, f.r.syncer.snap
	f.seed(f.r, 2)
	require.NoError(t, f.sync())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); snap.run(f.ctx, stop) }()
	snap.changed()
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.FlowSnapshotWriteErrors) >= 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Zero(t, testutil.ToFloat64(m.FlowSnapshotLastWrite))
	assert.Zero(t, testutil.ToFloat64(m.FlowSnapshotBytes))

	require.NoError(t, os.Mkdir(dir, 0o755))
	f.r.OnService(makeService("ns1", "svc1", 30001), nil)
	require.NoError(t, f.sync())
	snap.changed()
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.FlowSnapshotBytes) > 0 }, 5*time.Second, 10*time.Millisecond)
	close(stop)
	<-done
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, float64(st.Size()), testutil.ToFloat64(m.FlowSnapshotBytes))
	assert.Positive(t, testutil.ToFloat64(m.FlowSnapshotLastWrite))
}

// BenchmarkColdFullSyncSnapshot is the first full sync of 10k Service ports (10 endpoints, 50
// nodes) without and with the flow snapshot (FlowSnapshotConfig): what rendering every applied
// flow set's lines adds to the sync, and how large the file is.
func BenchmarkColdFullSyncSnapshot(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("snapshot=%v", on), func(b *testing.B) {
			var size int
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f := newFixture(b)
				f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
					c.Bridges = map[flows.Bridge]FlowBridge{flows.BrEx: &nullBridge{}, flows.BrInt: &nullBridge{}}
					c.NodePortRange = [2]uint16{20000, 32767}
					if on {
						c.FlowSnapshot = &FlowSnapshotConfig{Path: filepath.Join(b.TempDir(), "s"),
							BridgeNames: map[flows.Bridge]string{flows.BrEx: "br-ex", flows.BrInt: "br-int"}}
					}
				})
				seedLarge(f.r, 10000, 10, 50)
				b.StartTimer()
				require.NoError(b, f.sync())
				b.StopTimer()
				if on {
					start := time.Now()
					s, _ := f.r.syncer.snap.snapshot()
					data := flowsnap.Encode(s)
					size = len(data)
					b.ReportMetric(float64(time.Since(start).Milliseconds()), "encode-ms")
					b.ReportMetric(float64(s.Lines()), "lines")
					// What one write allocates: the agent's (streaming) and the file built in
					// memory first.
					data = nil
					path := f.r.cfg.FlowSnapshot.Path
					b.ReportMetric(allocatedMB(func() { require.NoError(b, flowsnap.WriteSnapshot(path, s)) }), "write-alloc-MB")
					b.ReportMetric(allocatedMB(func() { require.NoError(b, flowsnap.WriteFile(path, flowsnap.Encode(s))) }), "write-in-memory-alloc-MB")
				}
				// What the agent keeps after the sync (and, with a snapshot, after a write).
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(ms.HeapAlloc)/1e6, "live-heap-MB")
				runtime.KeepAlive(f)
			}
			if on {
				b.ReportMetric(float64(size)/1e6, "file-MB")
			}
		})
	}
}

// allocatedMB returns the MB of heap that fn allocates.
func allocatedMB(fn func()) float64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return float64(after.TotalAlloc-before.TotalAlloc) / 1e6
}
