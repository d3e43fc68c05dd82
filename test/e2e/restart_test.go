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
func logSince(t testing.TB, node string, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(theLab.AgentLog(node))
	require.NoError(t, err)
	if int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

func logSize(t testing.TB, node string) int64 {
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

	// A connection established before the restart is answered every streamEvery through it and
	// after it (no silence above maxSilence).
	held := holdConn(t, "192.0.2.11:30102")
	stopTalking := held.keepTalking()
	for _, n := range nodes {
		require.NoError(t, theLab.StopAgent(n))
	}
	// Agents down: the flows stay and keep serving, no outage tolerated: every new request is
	// answered at the first try.
	for i := 0; i < 3; i++ {
		r, err := theLab.Request("", "tcp", addr)
		if assert.NoError(t, err, "agents down, request %d", i) {
			checkReply(t, r, addr, "echo-a")
		}
		r, err = theLab.Request("", "udp", "203.0.113.110:53")
		if assert.NoError(t, err, "agents down, UDP request %d", i) {
			checkReply(t, r, "203.0.113.110:53", "echo-a")
		}
	}
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
		// Every bundle counts, repair bundles included, up to the second full sync after the
		// restart (the first deep repair is due --repair-period=4s after the first full sync).
		log := logSince(t, n, offsets[n])
		if i := strings.Index(log, "Full sync done"); i >= 0 {
			if j := strings.Index(log[i+1:], "Full sync done"); j >= 0 {
				log = log[:i+1+j]
			}
		}
		assert.Empty(t, bundleRE.FindAllString(log, -1), "%s: the restarted agent wrote to OVS although nothing changed:\n%s", n, tail(log, 12))
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
	r, err := theLab.Request("", "tcp", addr)
	if assert.NoError(t, err, "after the restart") {
		checkReply(t, r, addr, "echo-a")
	}
	requireSurvived(t, "agents stopped and restarted, two full syncs", stopTalking)
}

// vswitchdReplayBound is the longest outage a restarted ovs-vswitchd may cause: the agent notices
// the new pidfile (polled about every second) and replays every flow and group; the first
// requests after the restart are refused until then. A behaviour bound, not a performance figure.
const vswitchdReplayBound = 10 * time.Second

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
	// Through node1 to the backend on node2, and through node2's own NodePort (local endpoint):
	// both answer again within vswitchdReplayBound of the restart.
	for _, a := range []string{addr, "192.0.2.12:30100"} {
		var r lab.Reply
		err := lab.WaitFor(func() error {
			var err error
			r, err = theLab.RequestWith("", "tcp", a, lab.RequestOpts{Timeout: "1s"})
			return err
		}, vswitchdReplayBound-time.Since(start))
		require.NoError(t, err, "%s not answering %v after the ovs-vswitchd restart", a, vswitchdReplayBound)
		checkReply(t, r, a, "echo-a")
	}
	t.Logf("outage: both entry points answer %v after the restart began (bound %v)", time.Since(start).Round(time.Millisecond), vswitchdReplayBound)
	after := snapshot(t, "node2")
	for _, br := range []string{"br-ex", "br-int"} {
		// A restarted switch has no conntrack: drains of earlier tests are rightly not replayed.
		want, got := before[br].WithoutDrains(), after[br].WithoutDrains()
		assert.Equal(t, want.Flows, got.Flows, "node2 %s flows after replay", br)
		assert.Equal(t, want.Groups, got.Groups, "node2 %s groups after replay", br)
	}
}
