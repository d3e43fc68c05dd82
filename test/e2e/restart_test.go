package e2e

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// logSince returns what node's agent log gained after offset.
func logSince(t *testing.T, node string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(theLab.AgentLog(node))
	require.NoError(t, err)
	if int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

func logSize(t *testing.T, node string) int64 {
	t.Helper()
	fi, err := os.Stat(theLab.AgentLog(node))
	require.NoError(t, err)
	return fi.Size()
}

var durationRE = regexp.MustCompile(`duration=([0-9.]+)s`)

// minDuration returns the smallest flow age (seconds) among our flows on a bridge.
func minDuration(t *testing.T, node, br string) float64 {
	t.Helper()
	out, err := theLab.DumpFlows(node, br, "cookie=0x5c00000000000000/0xff00000000000000")
	require.NoError(t, err)
	min := -1.0
	for _, m := range durationRE.FindAllStringSubmatch(out, -1) {
		var d float64
		fmt.Sscanf(m[1], "%f", &d)
		if min < 0 || d < min {
			min = d
		}
	}
	require.GreaterOrEqual(t, min, 0.0, "no flows of ours on %s %s", node, br)
	return min
}

// An agent restart does not disturb the dataplane (field case C18, docs/field-cases.md#c18): while it
// is down the Services keep working; after it is back its first full sync writes nothing (the
// cookies are derived from content, so nothing differs), no flow is re-added and conntrack is not
// flushed.
func TestAgentRestartKeepsDataplane(t *testing.T) {
	addr := "192.0.2.11:30100"
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	time.Sleep(3 * time.Second) // settle: full syncs every 2 s
	// A UDP "connection" of this test: its ZoneService entry (30 s idle timeout) must survive the
	// restart unchanged (no flush, same endpoint).
	udp := waitOK(t, "udp", "203.0.113.110:53")
	checkReply(t, udp, "203.0.113.110:53", "echo-a")
	_, udpPort, _ := strings.Cut(udp.Local, ":")
	udpEntry := "udp,orig=(src=198.51.100.10,dst=203.0.113.110,sport=" + udpPort + ",dport=53),reply=(src=10.244.2.5,"
	nodes := []string{"node1", "node2"}
	before := map[string]map[string]lab.BridgeState{}
	offsets := map[string]int64{}
	for _, n := range nodes {
		before[n] = snapshot(t, n)
	}
	ctBefore, err := theLab.Appctl("node1", "dpctl/dump-conntrack", "zone="+zoneService)
	require.NoError(t, err)
	require.Contains(t, ctBefore, udpEntry)

	for _, n := range nodes {
		require.NoError(t, theLab.StopAgent(n))
	}
	// Agents down: the flows stay and keep serving.
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	checkReply(t, waitOK(t, "udp", "203.0.113.110:53"), "203.0.113.110:53", "echo-a")
	time.Sleep(time.Second)
	for _, n := range nodes {
		offsets[n] = logSize(t, n)
		require.NoError(t, theLab.StartAgent(n))
	}
	for _, n := range nodes {
		require.NoError(t, lab.WaitFor(func() error {
			if strings.Count(logSince(t, n, offsets[n]), "Full sync done") < 2 {
				return fmt.Errorf("%s: waiting for two full syncs after the restart", n)
			}
			return nil
		}, 20*time.Second))
		log := logSince(t, n, offsets[n])
		assert.NotContains(t, log, "Applying bundle", "%s: the restarted agent wrote to OVS although nothing changed", n)
		after := snapshot(t, n)
		for _, br := range []string{"br-ex", "br-int"} {
			// Drains of Services removed by earlier tests may end meanwhile (by design).
			want, got := before[n][br].WithoutDrains(), after[br].WithoutDrains()
			assert.Equal(t, want.Flows, got.Flows, "%s %s flows", n, br)
			assert.Equal(t, want.Groups, got.Groups, "%s %s groups", n, br)
			// No flow was re-added: every flow is older than the downtime.
			assert.Greater(t, minDuration(t, n, br), 4.0, "%s %s: a flow was re-added", n, br)
		}
	}
	ctAfter, err := theLab.Appctl("node1", "dpctl/dump-conntrack", "zone="+zoneService)
	require.NoError(t, err)
	assert.Contains(t, ctAfter, udpEntry, "the UDP conntrack entry was flushed or moved by the restart")
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
}

// A restarted ovs-vswitchd comes back with empty flow tables while OVSDB shows no change; the agent
// notices (it watches the pidfile) and replays every flow and group; the Services work again.
func TestVswitchdRestartIsReplayed(t *testing.T) {
	addr := "192.0.2.11:30100"
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	before := snapshot(t, "node2")
	start := time.Now()
	require.NoError(t, theLab.RestartVswitchd("node2"))
	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node2", "br-int")
		if err != nil || !strings.Contains(out, "cookie=0x5c") {
			return fmt.Errorf("node2 br-int has no flows of ours yet (%v)", err)
		}
		return nil
	}, 10*time.Second), "flows not replayed after the ovs-vswitchd restart")
	t.Logf("flows back %v after the restart began", time.Since(start).Round(time.Millisecond))
	// Through node1 to the backend on node2, and through node2's own NodePort (local endpoint).
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	checkReply(t, waitOK(t, "tcp", "192.0.2.12:30100"), "192.0.2.12:30100", "echo-a")
	after := snapshot(t, "node2")
	for _, br := range []string{"br-ex", "br-int"} {
		// A restarted switch has no conntrack: drains of earlier tests are rightly not replayed.
		want, got := before[br].WithoutDrains(), after[br].WithoutDrains()
		assert.Equal(t, want.Flows, got.Flows, "node2 %s flows after replay", br)
		assert.Equal(t, want.Groups, got.Groups, "node2 %s groups after replay", br)
	}
}
