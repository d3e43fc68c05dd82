package e2e

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
)

// srcipctl trace over an IPv6 underlay (issue 22): a new connection from the client to
// ds-prefer's NodePort on node1, in each family, is traced through node1's agent and its
// endpoint's node (echo-a on node2); the hops between the nodes are Geneve over IPv6 (the trace
// sets tun_ipv6_src/tun_ipv6_dst, never tun_src/tun_dst), and the verdict is "delivered".
func TestTraceOverIPv6Underlay(t *testing.T) {
	ipv6Underlay(t)
	const file = "ds-prefer.yaml"
	writeManifest(t, file, dsPrefer.yaml())
	defer removeAndWait(t, file, fmt.Sprintf("tp_dst=%d", dsPrefer.nodePort))
	for _, tc := range []struct{ fam, client string }{{"IPv4", clientIP}, {"IPv6", client6IP}} {
		from := net.JoinHostPort(tc.client, "40000")
		to := net.JoinHostPort(nodeIP(t, "node1", tc.fam), fmt.Sprint(dsPrefer.nodePort))
		out := traceDelivered(t, "node1", from, to)
		assert.Contains(t, out, "=> Geneve (VNI 0x2) to node2", tc.fam)
		assert.Contains(t, out, "(path node1 -> node2 -> node1)", tc.fam)
		assert.Contains(t, out, "tun_ipv6_dst=2001:db8:0:2::12", tc.fam)
		assert.NotContains(t, out, "tun_dst=192.0.2.", tc.fam)
		assert.NotContains(t, out, "drop:", "%s: no step of a delivered connection is named a drop", tc.fam)
	}
}
