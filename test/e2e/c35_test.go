package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// zoneLimit reads node's limit and entry count of a conntrack zone (dpctl/ct-get-limits).
func zoneLimit(t *testing.T, node, zone string) (limit, count int) {
	t.Helper()
	out, err := theLab.Appctl(node, "dpctl/ct-get-limits", "zone="+zone)
	require.NoError(t, err)
	m := regexp.MustCompile(`zone=` + zone + `,limit=(\d+),count=(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "%s: no limit for zone %s:\n%s", node, zone, out)
	limit, _ = strconv.Atoi(m[1])
	count, _ = strconv.Atoi(m[2])
	return limit, count
}

func appctlInt(t *testing.T, node string, args ...string) int {
	t.Helper()
	out, err := theLab.Appctl(node, args...)
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(out))
	require.NoError(t, err, out)
	return n
}

// C35 (docs/field-cases.md#c35): a spoofed SYN flood on one entry point of node1 fills at most
// node1's ZoneService share of the datapath's conntrack table (the agent's per-zone limits, 40 %
// of the maximum by default), so node1 keeps room for the connections it is the backend of:
// during the flood, requests entering at node2 for node1's pod (committed in node1's ZonePod)
// are answered. After the flood the flooded entry point recovers once the SYN entries expire.
func TestC35SynFloodBoundedByZoneLimits(t *testing.T) {
	remote, viaNode2 := "192.0.2.11:30100", "192.0.2.12:30101" // echo-a on node2; echo-c on node1 entered at node2
	checkReply(t, waitOK(t, "tcp", remote), remote, "echo-a")
	checkReply(t, waitOK(t, "tcp", viaNode2), viaNode2, "echo-c")
	def := appctlInt(t, "node1", "dpctl/ct-get-maxconns")
	for _, z := range []string{zoneService, zonePod} {
		limit, _ := zoneLimit(t, "node1", z)
		assert.Equal(t, def*40/100, limit, "zone %s: 40%% of the datapath maximum %d", z, def)
	}
	// A small table for the test: the agent follows the new maximum at its next full sync.
	const maxConns = 1000
	_, err := theLab.Appctl("node1", "dpctl/ct-set-maxconns", strconv.Itoa(maxConns))
	require.NoError(t, err)
	defer func() {
		_, err := theLab.Appctl("node1", "dpctl/ct-set-maxconns", strconv.Itoa(def))
		assert.NoError(t, err)
		assert.NoError(t, lab.WaitFor(func() error {
			if l, _ := zoneLimit(t, "node1", zoneService); l != def*40/100 {
				return fmt.Errorf("zone limit %d", l)
			}
			return nil
		}, 15*time.Second), "node1's agent restores the limits for the default maximum")
	}()
	require.NoError(t, lab.WaitFor(func() error {
		if l, _ := zoneLimit(t, "node1", zoneService); l != maxConns*40/100 {
			return fmt.Errorf("zone limit %d", l)
		}
		return nil
	}, 15*time.Second), "node1's agent sets the limits for the new maximum")

	// Paced so that the userspace datapath handles every SYN (a burst loses most of them).
	inject(t, "client", "--plain", "--inner-dst", remote, "--random-src", "10.99.0.0/16", "--count", "3000", "--pps", "1500")
	_, svcCount := zoneLimit(t, "node1", zoneService)
	total := appctlInt(t, "node1", "dpctl/ct-get-nconns")
	t.Logf("after 3000 spoofed SYNs: node1 ZoneService holds %d entries (limit %d), the datapath %d of %d", svcCount, maxConns*40/100, total, maxConns)
	assert.LessOrEqual(t, svcCount, maxConns*40/100)
	assert.Less(t, total, maxConns, "the flood must not fill node1's conntrack table")
	// node1 as a backend: a connection entered at node2 is committed in node1's ZonePod.
	for i := 0; i < 3; i++ {
		r, err := theLab.RequestWith("", "tcp", viaNode2, lab.RequestOpts{Timeout: "2s"})
		require.NoError(t, err, "a request for node1's pod entered at node2 during the flood")
		checkReply(t, r, viaNode2, "echo-c")
	}
	// The flooded entry point recovers when the unanswered SYNs' entries expire (OVS userspace
	// conntrack: 30 s for SYN_SENT; 43 s measured here, the sweeper runs on its own schedule), within
	// 75 s.
	start := time.Now()
	require.NoError(t, lab.WaitFor(func() error {
		_, err := theLab.RequestWith("", "tcp", remote, lab.RequestOpts{Timeout: "1s"})
		return err
	}, 75*time.Second), "the flooded entry point did not recover")
	t.Logf("the flooded entry point answered again %s after the flood", time.Since(start).Round(time.Second))
}
