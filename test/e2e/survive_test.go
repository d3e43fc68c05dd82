package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flowsnap"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// A node that survives (docs/node-recovery.md): ovs-vswitchd restarts while the agent is not
// running and no API server answers. br-ex (fail_mode=secure) and br-int come back empty; the
// node's own traffic is dropped until flow-restore replays the agent's flow snapshot (or, when
// the snapshot cannot be used, gives br-ex the base flow). The agent then starts and reconciles
// over what was restored without a flush.

const survivor = "node2" // holds echo-a, the endpoint of svcRemote

// routerIP is the node's uplink peer: its default gateway, the way to its API server.
const routerIP = "192.0.2.1"

// withSnapshot restarts the survivor's agent with --flow-snapshot and waits until it has written
// a snapshot after its restart; the agent runs with its usual flags again after the test.
func withSnapshot(t *testing.T) string {
	t.Helper()
	path := filepath.Join(theLab.Node(survivor).Dir, "flows.snapshot")
	_ = os.Remove(path)
	require.NoError(t, theLab.SetAgentExtraArgs(survivor, "--flow-snapshot="+path, "--flow-snapshot-interval=100ms"))
	require.NoError(t, theLab.RestartAgent(survivor))
	t.Cleanup(func() {
		_ = theLab.SetAgentExtraArgs(survivor)
		_ = theLab.RestartAgent(survivor)
		_ = os.Remove(path)
	})
	waitSnapshot(t, path, time.Now())
	return path
}

// waitSnapshot waits for a snapshot at path written at or after since (second precision) with
// at least as many flow lines as the survivor's bridges hold flows.
func waitSnapshot(t *testing.T, path string, since time.Time) *flowsnap.Snapshot {
	t.Helper()
	var snap *flowsnap.Snapshot
	require.NoError(t, lab.WaitFor(func() error {
		s, err := flowsnap.ReadFile(path)
		if err != nil {
			return err
		}
		if s.Written.Before(since.Truncate(time.Second)) {
			return fmt.Errorf("snapshot written %v, before %v", s.Written, since)
		}
		state := snapshot(t, survivor)
		for _, b := range s.Bridges {
			n := 0
			for _, l := range b.Lines {
				if strings.HasPrefix(l, "flow ") {
					n++
				}
			}
			// OVS may hold fewer flows than were added (adds whose normalised matches coincide).
			if want := len(withoutLearned(state[b.Name]).Flows); n < want {
				return fmt.Errorf("snapshot of %s has %d flows, the bridge %d", b.Name, n, want)
			}
		}
		snap = s
		return nil
	}, 20*time.Second), "no current flow snapshot")
	return snap
}

// reaches reports whether the survivor's own network (its netns, through br-ex) answers a ping
// to dst.
func reaches(dst string) error {
	ns := theLab.Node(survivor).Netns
	out, err := exec.Command("ip", "netns", "exec", ns, "ping", "-c", "1", "-W", "1", dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: ping %s: %v: %s", survivor, dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// stable is s without drains (which a restarted switch rightly loses) and without the flows OVS
// learns at run time (cookie kind 0x20, flows.KindLearnedReset: never in a snapshot).
func stable(s lab.BridgeState) lab.BridgeState { return withoutLearned(s.WithoutDrains()) }

// withoutLearned is s without the flows OVS learns at run time.
func withoutLearned(s lab.BridgeState) lab.BridgeState {
	var out lab.BridgeState
	for _, l := range s.Flows {
		if !strings.Contains(l, "cookie=0x5c20") {
			out.Flows = append(out.Flows, l)
		}
	}
	out.Groups = s.Groups
	return out
}

func ownedFlows(t *testing.T, br string) int {
	t.Helper()
	out, err := theLab.DumpFlows(survivor, br, "cookie=0x5c00000000000000/0xff00000000000000")
	require.NoError(t, err)
	return strings.Count(out, "cookie=0x5c")
}

// startAgentAndWaitSyncs starts the survivor's agent and waits for two full syncs.
func startAgentAndWaitSyncs(t *testing.T) string {
	t.Helper()
	off := logSize(t, survivor)
	require.NoError(t, theLab.StartAgent(survivor))
	var log string
	require.NoError(t, lab.WaitFor(func() error {
		log = logSince(t, survivor, off)
		if strings.Count(log, "Full sync done") < 2 {
			return fmt.Errorf("waiting for two full syncs")
		}
		return nil
	}, 20*time.Second))
	return log
}

// The snapshot is replayed by `srcip-agent flow-restore` (once, as the boot unit or an operator
// runs it): before it the node is cut off (today's behaviour), after it the node reaches its
// uplink peer and beyond, the Service entry points reach the pod on the node, both bridges hold
// what they held before the restart; the agent started afterwards syncs and changes nothing:
// no flow re-added (no flush window).
func TestVswitchdRestartWithoutAgentRestoresSnapshot(t *testing.T) {
	path := withSnapshot(t)
	before := snapshot(t, survivor)
	require.NoError(t, reaches(routerIP))

	require.NoError(t, theLab.StopAgent(survivor))
	require.NoError(t, theLab.RestartVswitchd(survivor))
	assert.Zero(t, ownedFlows(t, "br-ex")+ownedFlows(t, "br-int"), "a restarted ovs-vswitchd has no flow")
	assert.Error(t, reaches(routerIP), "br-ex (fail_mode=secure) without flows must drop the node's traffic: the test would prove nothing")

	n := theLab.Node(survivor)
	start := time.Now()
	out, err := exec.Command(agentBin, "flow-restore", "--snapshot="+path, "--ovs-rundir="+n.Dir, "--node-name="+survivor).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("flow-restore took %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	assert.Contains(t, string(out), `bridge="br-int" action="restored"`)
	assert.Contains(t, string(out), `bridge="br-ex" action="restored"`)
	restored := time.Now()

	require.NoError(t, reaches(routerIP), "the uplink peer (the way to the API server)")
	require.NoError(t, reaches(clientIP), "beyond the router")
	for _, a := range []string{"192.0.2.11:30100", "192.0.2.12:30100"} {
		r, err := theLab.RequestWith("", "tcp", a, lab.RequestOpts{Timeout: "2s"})
		if assert.NoError(t, err, "%s with the restored flows, agent down", a) {
			checkReply(t, r, a, "echo-a")
		}
	}
	after := snapshot(t, survivor)
	for _, br := range []string{"br-ex", "br-int"} {
		want, got := stable(before[br]), stable(after[br])
		assert.Equal(t, want.Flows, got.Flows, "%s flows restored", br)
		assert.Equal(t, want.Groups, got.Groups, "%s groups restored", br)
	}

	log := startAgentAndWaitSyncs(t)
	agentSynced := time.Since(restored)
	t.Logf("agent: two full syncs %v after the restore; bundles written: %d", agentSynced.Round(time.Millisecond), len(bundleRE.FindAllString(log, -1)))
	for _, br := range []string{"br-ex", "br-int"} {
		// Drains of earlier tests may be removed by the agent (they were replayed, their
		// connections were not); every other flow stays where the restore put it.
		assert.Greater(t, minDuration(t, survivor, br), agentSynced.Seconds()-1, "%s: the agent re-added a restored flow", br)
		want, got := stable(before[br]), stable(snapshot(t, survivor)[br])
		assert.Equal(t, want.Flows, got.Flows, "%s flows after the agent's sync", br)
	}
	r, err := theLab.Request("", "tcp", "192.0.2.11:30100")
	if assert.NoError(t, err, "after the agent's sync") {
		checkReply(t, r, "192.0.2.11:30100", "echo-a")
	}
}

// flow-restore --watch (the DaemonSet's flow-restore container) replays a good snapshot after a
// restart with the agent down, and never loads one that is corrupt, stale or refused by Open
// vSwitch: br-ex then gets only the base flow, the node
// keeps its own network (uplink peer reachable), nothing half-written is left in br-int, and
// the agent started afterwards brings the pipeline back. With the agent running, the watcher
// leaves the replay to it.
func TestFlowRestoreWatchFallsBackToBaseFlow(t *testing.T) {
	path := withSnapshot(t)
	before := snapshot(t, survivor)
	n := theLab.Node(survivor)
	watchLog := filepath.Join(n.Dir, "flow-restore.log")
	logf, err := os.Create(watchLog)
	require.NoError(t, err)
	defer logf.Close()
	w := exec.Command(agentBin, "flow-restore", "--watch", "--snapshot="+path, "--ovs-rundir="+n.Dir,
		"--node-name="+survivor, "--agent-grace=500ms", "--poll-interval=200ms")
	w.Stdout, w.Stderr = logf, logf
	require.NoError(t, w.Start())
	t.Cleanup(func() {
		_ = w.Process.Signal(syscall.SIGTERM)
		_ = w.Wait()
	})
	watchSince := func(off int) string {
		b, _ := os.ReadFile(watchLog)
		return string(b[min(off, len(b)):])
	}

	t.Run("good snapshot: replayed", func(t *testing.T) {
		require.NoError(t, theLab.StopAgent(survivor))
		b, _ := os.ReadFile(watchLog)
		off := len(b)
		start := time.Now()
		require.NoError(t, theLab.RestartVswitchd(survivor))
		require.NoError(t, lab.WaitFor(func() error {
			if !strings.Contains(watchSince(off), `bridge="br-ex" action="restored"`) {
				return fmt.Errorf("not restored yet:\n%s", watchSince(off))
			}
			return nil
		}, 15*time.Second))
		t.Logf("restored %v after the restart began", time.Since(start).Round(time.Millisecond))
		assert.Contains(t, watchSince(off), `bridge="br-int" action="restored"`)
		require.NoError(t, reaches(routerIP), "the uplink peer (the way to the API server)")
		r, err := theLab.RequestWith("", "tcp", "192.0.2.11:30100", lab.RequestOpts{Timeout: "2s"})
		if assert.NoError(t, err, "the pod on the node through node1 and Geneve, agent down") {
			checkReply(t, r, "192.0.2.11:30100", "echo-a")
		}
		after := snapshot(t, survivor)
		for _, br := range []string{"br-ex", "br-int"} {
			assert.Equal(t, stable(before[br]).Flows, stable(after[br]).Flows, "%s flows restored", br)
			assert.Equal(t, stable(before[br]).Groups, stable(after[br]).Groups, "%s groups restored", br)
		}
		startAgentAndWaitSyncs(t)
		waitSnapshot(t, path, start)
	})

	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, data []byte) []byte
		reason string
	}{
		{"corrupt: one byte flipped", func(t *testing.T, data []byte) []byte {
			data = bytes.Clone(data)
			data[len(data)/2] ^= 0x01
			return data
		}, "checksum mismatch"},
		{"stale: written in another boot", func(t *testing.T, data []byte) []byte {
			s, err := flowsnap.Decode(data)
			require.NoError(t, err)
			s.BootID = "00000000-0000-0000-0000-000000000000"
			return flowsnap.Encode(s)
		}, "written in boot 00000000-0000-0000-0000-000000000000"},
		{"rejected: a flow to a group that does not exist", func(t *testing.T, data []byte) []byte {
			s, err := flowsnap.Decode(data)
			require.NoError(t, err)
			for i := range s.Bridges {
				s.Bridges[i].Lines = append(s.Bridges[i].Lines, "flow add table=0,priority=1,tcp,tp_dst=1,actions=group:4000000000")
			}
			return flowsnap.Encode(s)
		}, "rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, theLab.StopAgent(survivor))
			require.NoError(t, os.WriteFile(path, tc.mutate(t, data), 0o600))
			b, _ := os.ReadFile(watchLog)
			off := len(b)
			start := time.Now()
			require.NoError(t, theLab.RestartVswitchd(survivor))
			require.NoError(t, lab.WaitFor(func() error {
				if !strings.Contains(watchSince(off), `bridge="br-ex" action="base"`) {
					return fmt.Errorf("no base flow yet:\n%s", watchSince(off))
				}
				return nil
			}, 15*time.Second))
			t.Logf("base flow %v after the restart began", time.Since(start).Round(time.Millisecond))
			// br-int's decision can come a retry later (its management socket appears after
			// br-ex's: "Open vSwitch not reachable; retrying").
			require.NoError(t, lab.WaitFor(func() error {
				if !strings.Contains(watchSince(off), `bridge="br-int" action="none"`) {
					return fmt.Errorf("no br-int decision yet:\n%s", watchSince(off))
				}
				return nil
			}, 15*time.Second))
			log := watchSince(off)
			assert.Contains(t, log, tc.reason)
			assert.Zero(t, ownedFlows(t, "br-int"), "nothing of the snapshot in br-int")
			assert.Zero(t, ownedFlows(t, "br-ex"), "nothing of the snapshot in br-ex")
			ex, err := theLab.DumpFlows(survivor, "br-ex")
			require.NoError(t, err)
			assert.Contains(t, ex, "priority=0 actions=NORMAL", "br-ex's base flow")
			require.NoError(t, lab.WaitFor(func() error { return reaches(routerIP) }, 5*time.Second),
				"the node's own traffic through the base flow")

			// Restore the good snapshot for the next case: the agent rewrites it after its sync.
			startAgentAndWaitSyncs(t)
			waitSnapshot(t, path, start)
			after := snapshot(t, survivor)
			for _, br := range []string{"br-ex", "br-int"} {
				assert.Equal(t, stable(before[br]).Flows, stable(after[br]).Flows, "%s flows after the agent's sync", br)
			}
			r, err := theLab.RequestWith("", "tcp", "192.0.2.11:30100", lab.RequestOpts{Timeout: "2s"})
			if assert.NoError(t, err) {
				checkReply(t, r, "192.0.2.11:30100", "echo-a")
			}
		})
	}

	t.Run("agent running: the agent replays, the watcher skips", func(t *testing.T) {
		b, _ := os.ReadFile(watchLog)
		off := len(b)
		require.NoError(t, theLab.RestartVswitchd(survivor))
		require.NoError(t, lab.WaitFor(func() error {
			if !strings.Contains(watchSince(off), `bridge="br-ex" action="skipped"`) {
				return fmt.Errorf("watcher has not looked yet:\n%s", watchSince(off))
			}
			return nil
		}, 15*time.Second))
		assert.Contains(t, watchSince(off), `bridge="br-int" action="skipped"`)
		require.NoError(t, reaches(routerIP))
	})
}
