package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// withSourceRanges adds spec.loadBalancerSourceRanges to a Service rendered by rawService (no
// ranges: the manifest unchanged).
func withSourceRanges(manifest string, ranges ...string) string {
	if len(ranges) == 0 {
		return manifest
	}
	return strings.Replace(manifest, "  externalTrafficPolicy: Cluster\n",
		"  externalTrafficPolicy: Cluster\n  loadBalancerSourceRanges: ["+strings.Join(ranges, ", ")+"]\n", 1)
}

// Field case C32 (docs/field-cases.md#c32): loadBalancerSourceRanges are enforced on the real
// client IP at the LoadBalancer IP. Two clients, 198.51.100.10 inside the list and 198.51.100.11
// outside: the backend never sees the outside client through the LB IP (its SYN is dropped on
// node1's br-ex, counted by the deny flow), while the NodePort stays open to both; widening the
// list lets it in within one sync; a malformed list lets nobody in; removing the field lets
// everyone in.
func TestC32LoadBalancerSourceRanges(t *testing.T) {
	const file = "c32.yaml"
	const lbIP = "203.0.113.120"
	lbAddr, npAddr := lbIP+":80", "192.0.2.11:30120"
	ports := []pspec{{"http", "TCP", 80, 30120}}
	render := func(ranges ...string) string {
		return withSourceRanges(rawService("ranges", true, "LoadBalancer", nil, lbIP, ports, []ep{echoA}), ranges...)
	}
	defer removeAndWait(t, file, "tp_dst=30120")

	// node1's br-ex flows of the LB IP's new connections (table 41).
	lbFlows := func() string {
		out, err := theLab.DumpFlows("node1", "br-ex", "table=41,tcp,nw_dst="+lbIP)
		require.NoError(t, err)
		return out
	}
	waitFlows := func(what string, ok func(string) bool) {
		t.Helper()
		err := lab.WaitFor(func() error {
			if out := lbFlows(); !ok(out) {
				return fmt.Errorf("node1 table 41 for %s:\n%s", lbIP, out)
			}
			return nil
		}, 20*time.Second)
		require.NoError(t, err, what)
	}
	// refused asserts that client2 cannot reach the LB IP and that echo-a never saw it.
	refused := func(client string, lport int) {
		t.Helper()
		// Only what echo-a logs from now on counts: earlier tests' ephemeral ports may have been
		// the same number.
		before, rerr := os.ReadFile(theLab.Pod("echo-a").EchoLog)
		require.NoError(t, rerr)
		_, err := theLab.RequestWith(client, "tcp", lbAddr, lab.RequestOpts{LocalPort: lport, Timeout: "2s"})
		assert.Error(t, err, "%s reached %s from outside loadBalancerSourceRanges", client, lbAddr)
		b, rerr := os.ReadFile(theLab.Pod("echo-a").EchoLog)
		require.NoError(t, rerr)
		b = b[min(len(before), len(b)):]
		ip := clientIP
		if client == "client2" {
			ip = client2IP
		}
		assert.NotContains(t, string(b), fmt.Sprintf("%q", fmt.Sprintf("%s:%d", ip, lport)), "the backend saw %s through the LB IP", client)
	}
	allowed := func(client, addr, wantIP string) {
		t.Helper()
		var r lab.Reply
		err := lab.WaitFor(func() error {
			var err error
			r, err = theLab.Request(client, "tcp", addr)
			return err
		}, 20*time.Second)
		require.NoError(t, err, "%s -> %s", client, addr)
		assert.Equal(t, wantIP, r.ClientIP(), "the backend must see the real client IP")
		assert.Equal(t, addr, r.From)
		assert.Equal(t, "echo-a", r.Pod)
	}

	// Only 198.51.100.10/32.
	writeManifest(t, file, render(clientIP+"/32"))
	waitFlows("the allow flow for the listed client", func(s string) bool { return strings.Contains(s, "nw_src="+clientIP) })
	allowed("client", lbAddr, clientIP)
	refused("client2", 41320)
	refused("client2", 41321)
	deny := lbFlows()
	assert.Regexp(t, `n_packets=[1-9][0-9]*,.*priority=95,.*actions=drop`, deny, "the deny flow counted client2's SYNs")
	// NodePorts are not filtered (as kube-proxy): client2 gets in there, with its own IP.
	allowed("client2", npAddr, client2IP)

	// Widened: client2 gets in within one sync, with its own IP.
	writeManifest(t, file, render("198.51.100.0/24"))
	waitFlows("the widened allow flow", func(s string) bool {
		return strings.Contains(s, "nw_src=198.51.100.0/24") && !strings.Contains(s, "nw_src="+clientIP)
	})
	allowed("client2", lbAddr, client2IP)
	allowed("client", lbAddr, clientIP)

	// Malformed only: deny all, never allow all.
	writeManifest(t, file, render("198.51.100.0/33"))
	waitFlows("deny all", func(s string) bool { return !strings.Contains(s, "nw_src=") && strings.Contains(s, "priority=95") })
	refused("client", 41322)
	refused("client2", 41323)

	// Field removed: everyone.
	writeManifest(t, file, render())
	waitFlows("no filter", func(s string) bool { return !strings.Contains(s, "priority=95") && strings.Contains(s, "priority=100") })
	allowed("client2", lbAddr, client2IP)
	allowed("client", lbAddr, clientIP)
}
