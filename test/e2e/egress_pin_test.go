package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Field cases C37 and C29 (docs/field-cases.md, docs/egress.md "Decisions") with real packets:
// a connection keeps the source address it started with while the policy is added, changed and
// loses its gateway; new connections follow the policy of the moment, and a selected pod whose
// egress IP has no eligible gateway gets no answer, never one through the node address.
func TestEgressConnectionKeepsItsSource(t *testing.T) {
	hostEcho(t, "client", "")
	target := clientIP + ":" + hostPort
	// seen sends one line on c and returns the source address the server saw when it accepted
	// c (its answer repeats it; a connection whose source changed would meet no socket there).
	seen := func(c *lineConn) (string, error) {
		l, err := c.Send("stream") // the echo server's streaming request: it keeps c open
		if err != nil {
			return "", err
		}
		var r struct{ Client string }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			return "", fmt.Errorf("answer %q: %w", l, err)
		}
		return r.Client, nil
	}
	mustSee := func(c *lineConn, want, what string) {
		t.Helper()
		got, err := seen(c)
		require.NoError(t, err, what)
		host, _, _ := net.SplitHostPort(got)
		require.Equal(t, want, host, "%s: the server saw %s", what, got)
		t.Logf("%s: server saw %s", what, got)
	}
	// newConnSource waits until a new TCP request from echo-a is seen from want.
	newConnSource := func(want, what string) {
		t.Helper()
		waitSeenAs(t, "echo-a", "tcp", target, want)
		t.Logf("%s: new connections from echo-a seen from %s", what, want)
	}

	// A: opened before any policy, through the host masquerade (node2's address).
	a := mustDial(t, "echo-a", target, 0, 3*time.Second)
	mustSee(a, "192.0.2.12", "A before the policy")

	// The policy selects echo-a: new connections leave as the egress IP, A keeps node2's address.
	writeManifest(t, "egress.yaml", egressPolicy("job", egressIP, "node3", ""))
	t.Cleanup(func() { writeManifest(t, "egress.yaml", "") })
	newConnSource(egressIP, "policy added")
	mustSee(a, "192.0.2.12", "A after the policy was added")

	// B: opened under the policy, through node3's SNAT.
	b := mustDial(t, "echo-a", target, 0, 3*time.Second)
	mustSee(b, egressIP, "B under the policy")

	// The policy changes (the server's address excluded): new connections take the host path
	// again; B keeps the egress IP, A node2's address.
	writeManifest(t, "egress.yaml", egressPolicy("job", egressIP, "node3",
		fmt.Sprintf("  excludedDestinations: [%s/32]\n", clientIP)))
	newConnSource("192.0.2.12", "policy changed (server excluded)")
	require.Contains(t, podNodeFlows(t), "nw_dst="+clientIP, "node2's br-int keeps the excluded server on the host path")
	mustSee(b, egressIP, "B after the policy changed")
	mustSee(a, "192.0.2.12", "A after the policy changed")

	// C29: the policy's egress IP has no eligible gateway (no node matches its selector): new
	// connections of echo-a to the server are dropped on node2, never masqueraded; the server
	// logs nothing from them. A, opened before any policy, keeps working.
	writeManifest(t, "egress.yaml", egressPolicy("job", egressIP, "no-such-node", ""))
	require.NoError(t, lab.WaitFor(func() error {
		if strings.Contains(egressFlows(t, "node3"), "arp_tpa="+egressIP) {
			return fmt.Errorf("node3 still answers ARP for %s", egressIP)
		}
		// Until node2 has the new policy too, the old one's exclusion rightly sends the server's
		// traffic on the host path (masqueraded).
		if strings.Contains(podNodeFlows(t), "nw_dst="+clientIP) {
			return fmt.Errorf("node2 still excludes %s from the egress path", clientIP)
		}
		return nil
	}, 20*time.Second))
	for i := 0; i < 3; i++ {
		r, err := theLab.RequestWith("echo-a", "tcp", target, lab.RequestOpts{Timeout: "1s"})
		assert.Error(t, err, "echo-a reached the server without a gateway (server saw %s)", r.Client)
	}
	t.Logf("no gateway: 3 of 3 new connections from echo-a got no answer")
	mustSee(a, "192.0.2.12", "A with the policy's gateway gone")
}

// podNodeFlows dumps br-int of node2, echo-a's node.
func podNodeFlows(t *testing.T) string {
	t.Helper()
	out, err := theLab.DumpFlows("node2", "br-int")
	require.NoError(t, err)
	return out
}
