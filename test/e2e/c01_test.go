package e2e

import (
	"bytes"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// capture runs tcpdump on iface inside node's netns with a BPF filter until stop is called, and
// returns the packets it printed (one line each).
func capture(t *testing.T, node, iface, filter string) (stop func() []string) {
	t.Helper()
	ns, err := theLab.Netns(node)
	require.NoError(t, err)
	var out bytes.Buffer
	cmd := exec.Command("ip", "netns", "exec", ns, "tcpdump", "-n", "-l", "-i", iface, filter)
	cmd.Stdout = &out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	// tcpdump prints "listening on ..." to stderr once the capture is armed.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(stderr.String(), "listening on") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.Contains(t, stderr.String(), "listening on", "tcpdump did not start")
	return func() []string {
		time.Sleep(300 * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		var pkts []string
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if l != "" {
				pkts = append(pkts, l)
			}
		}
		return pkts
	}
}

// Field case C01 (docs/field-cases.md#c01) on the wire: the request crosses node1 -> node2
// inside Geneve (outer 192.0.2.11 -> 192.0.2.12, inner source the client), and node2 never sends
// a packet of the connection out of its uplink other than inside the tunnel back to node1.
func TestC01OnlyTunnelOnBackendUplink(t *testing.T) {
	addr := "192.0.2.11:30100"
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	plain := capture(t, "node2", "eth0", "host 198.51.100.10 and not udp port 6081")
	tunnel := capture(t, "node2", "eth0", "udp port 6081 and src host 192.0.2.11 and dst host 192.0.2.12")
	replies := capture(t, "node2", "eth0", "udp port 6081 and src host 192.0.2.12 and dst host 192.0.2.11")
	for i := 0; i < 3; i++ {
		checkReply(t, okNow(t, "tcp", addr), addr, "echo-a")
	}
	assert.Empty(t, plain(), "node2 sent or received the client's packets outside the tunnel")
	in, out := tunnel(), replies()
	assert.GreaterOrEqual(t, len(in), 9, "requests must reach node2 inside Geneve from node1: %v", in)
	assert.GreaterOrEqual(t, len(out), 6, "replies must go back inside Geneve to node1: %v", out)
	// tcpdump decodes Geneve on 6081: the inner packets carry the client's own address.
	assert.Contains(t, strings.Join(in, "\n"), "198.51.100.10.", "inner source of the tunnelled request")
	assert.Contains(t, strings.Join(in, "\n"), "> 10.244.2.5.8080", "inner destination: the endpoint")
	assert.Contains(t, strings.Join(out, "\n"), "10.244.2.5.8080 > 198.51.100.10.", "inner reply: endpoint -> client")
}
