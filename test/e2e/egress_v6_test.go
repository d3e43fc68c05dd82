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

// Egress gateways over IPv6 (issue 22, docs/egress.md "IPv6") with real packets on the
// dual-stack lab: the echo server in the client netns logs the source it sees per family.

// egressIP6 is the IPv6 egress IP, on the nodes' IPv6 segment (the router solicits it there).
const egressIP6 = "2001:db8:0:2::50"

// egressPolicyGW is an EgressGateway selecting echo-a (node2) with the egress IPs ips, eligible
// gateways eligible (by hostname) and the active one active (status.activeGateways, which the
// agents follow in manifests mode while it names an eligible node).
func egressPolicyGW(name string, ips []string, eligible []string, active string) string {
	var st strings.Builder
	for _, ip := range ips {
		fmt.Fprintf(&st, "  - {egressIP: \"%s\", node: %s}\n", ip, active)
	}
	return fmt.Sprintf(`apiVersion: ovs-srcip.io/v1alpha1
kind: EgressGateway
metadata:
  name: %s
  creationTimestamp: "2026-01-01T00:00:00Z"
  generation: 1
spec:
  egressIPs: ["%s"]
  podSelector:
    matchLabels: {pod: echo-a}
  gatewayNodeSelector:
    matchExpressions:
    - {key: kubernetes.io/hostname, operator: In, values: [%s]}
status:
  activeGateways:
%s`, name, strings.Join(ips, `", "`), strings.Join(eligible, ", "), st.String())
}

// TestEgressGatewayIPv6: echo-a (node2, dual-stack) selected per family. A v4-only policy
// leaves its IPv6 on the host path (node2's IPv6 address) and a v6-only one its IPv4 (node2's
// IPv4 address); with both, its IPv4 leaves as 192.0.2.50 and its IPv6 as 2001:db8:0:2::50
// through node3's SNAT (ZoneEgress and ZoneEgress6). Then the IPv6 gateway fails over to node1
// (status.activeGateways): node1 sends an unsolicited Neighbor Advertisement the router sees, a
// TCP session opened before keeps working with the same source, new connections leave through
// node1 with the egress IP.
func TestEgressGatewayIPv6(t *testing.T) {
	hostEcho(t, "client", "")
	target4 := clientIP + ":" + hostPort
	target6 := net.JoinHostPort(client6IP, hostPort)
	node2v4, node2v6 := "192.0.2.12", nodeIP(t, "node2", "IPv6")
	// At the end both policies go, and the next test starts without egress: echo-a leaves with
	// node2's addresses again and no br-ex answers for either egress IP (the gateways removed
	// their flow sets).
	t.Cleanup(func() {
		writeManifest(t, "egress.yaml", "")
		writeManifest(t, "egress6.yaml", "")
		waitSeenAs(t, "echo-a", "tcp", target4, node2v4)
		waitSeenAs(t, "echo-a", "tcp", target6, node2v6)
		require.NoError(t, lab.WaitFor(func() error {
			for _, n := range []string{"node1", "node2", "node3"} {
				if f := egressFlows(t, n); strings.Contains(f, "nd_target="+egressIP6) || strings.Contains(f, "arp_tpa="+egressIP) {
					return fmt.Errorf("%s still answers for %s or %s", n, egressIP6, egressIP)
				}
			}
			return nil
		}, 20*time.Second))
		// Cold datapaths for the next test: tests that read flow counters right after their
		// first packets must not meet this test's cached megaflows (their statistics reach
		// the OpenFlow flows only at the next revalidation).
		for _, n := range []string{"node1", "node2", "node3"} {
			_, err := theLab.Appctl(n, "revalidator/purge")
			assert.NoError(t, err, n)
		}
	})

	// Before any policy: the host masquerade per family (waited for: a previous test's policy
	// may still be going away).
	waitSeenAs(t, "echo-a", "tcp", target6, node2v6)
	waitSeenAs(t, "echo-a", "tcp", target4, node2v4)
	t.Logf("no policy: echo-a seen as %s and %s", node2v6, node2v4)

	// A v4-only policy: IPv4 through the gateway, IPv6 untouched.
	writeManifest(t, "egress.yaml", egressPolicy("job", egressIP, "node3", ""))
	waitSeenAs(t, "echo-a", "tcp", target4, egressIP)
	r := waitSeenAs(t, "echo-a", "tcp", target6, node2v6)
	t.Logf("v4-only policy: IPv4 from echo-a seen as %s, IPv6 as %s", egressIP, r.Client)
	writeManifest(t, "egress.yaml", "")

	// A v6-only policy: IPv6 through the gateway, IPv4 back on the host path.
	writeManifest(t, "egress6.yaml", egressPolicyGW("job6", []string{egressIP6}, []string{"node1", "node3"}, "node3"))
	waitSeenAs(t, "echo-a", "tcp", target4, node2v4)
	r = waitSeenAs(t, "echo-a", "tcp", target6, egressIP6)
	t.Logf("v6-only policy: IPv6 from echo-a seen as %s, IPv4 as %s", r.Client, node2v4)

	// Both: each family its own egress IP, TCP and UDP.
	writeManifest(t, "egress.yaml", egressPolicy("job", egressIP, "node3", ""))
	for _, proto := range []string{"tcp", "udp"} {
		r4 := waitSeenAs(t, "echo-a", proto, target4, egressIP)
		r6 := waitSeenAs(t, "echo-a", proto, target6, egressIP6)
		t.Logf("both policies, %s from echo-a: IPv4 seen as %s, IPv6 as %s", proto, r4.Client, r6.Client)
	}
	ct6, err := theLab.Appctl("node3", "dpctl/dump-conntrack", "zone=64274")
	require.NoError(t, err)
	assert.Contains(t, ct6, "src="+podIP6(echoA), "node3's ZoneEgress6 holds echo-a's IPv6 connections")
	assert.Contains(t, ct6, "dst="+egressIP6, "node3's ZoneEgress6 SNATs to the IPv6 egress IP")
	assert.NotContains(t, ct6, "10.244.2.5", "no IPv4 connection in ZoneEgress6")
	ct4, err := theLab.Appctl("node3", "dpctl/dump-conntrack", "zone=64258")
	require.NoError(t, err)
	assert.Contains(t, ct4, "dst="+egressIP, "node3's ZoneEgress SNATs to the IPv4 egress IP")
	assert.NotContains(t, ct4, podIP6(echoA), "no IPv6 connection in ZoneEgress")
	// Only the active gateway answers Neighbor Solicitations for the IPv6 egress IP.
	assert.Contains(t, egressFlows(t, "node3"), "nd_target="+egressIP6)
	assert.NotContains(t, egressFlows(t, "node1"), "nd_target="+egressIP6)
	// An outside host cannot reach a pod through the IPv6 egress IP.
	_, err = theLab.RequestWith("client", "tcp", net.JoinHostPort(egressIP6, "8080"), lab.RequestOpts{Timeout: "1s"})
	assert.Error(t, err, "the client reached something through the IPv6 egress IP")
	rn := nsRun(t, theLab.RouterNetns, "ip", "-6", "neigh", "show", egressIP6)
	t.Logf("router's neighbour entry before the failover: %s", strings.TrimSpace(rn))

	// A TCP session through node3, kept open across the failover.
	sess := mustDial(t, "echo-a", target6, 0, 3*time.Second)
	seenBy := func(c *lineConn) string {
		t.Helper()
		l, err := c.Send("stream")
		require.NoError(t, err, "the IPv6 session")
		var a struct{ Client string }
		require.NoError(t, json.Unmarshal([]byte(l), &a), l)
		return a.Client
	}
	before := seenBy(sess)
	host, _, _ := net.SplitHostPort(before)
	require.Equal(t, egressIP6, host, "the session before the failover")

	// Failover of the IPv6 egress IP to node1 (the IPv4 one stays on node3).
	stop := capture(t, theLab.RouterNetns, "br0", "icmp6 and ip6[40] == 136")
	start := time.Now()
	writeManifest(t, "egress6.yaml", egressPolicyGW("job6", []string{egressIP6}, []string{"node1", "node3"}, "node1"))
	require.NoError(t, lab.WaitFor(func() error {
		if !strings.Contains(egressFlows(t, "node1"), "nd_target="+egressIP6) {
			return fmt.Errorf("node1 does not answer for %s yet", egressIP6)
		}
		if strings.Contains(egressFlows(t, "node3"), "nd_target="+egressIP6) {
			return fmt.Errorf("node3 still answers for %s", egressIP6)
		}
		return nil
	}, 20*time.Second))
	moved := time.Since(start)
	var after string
	require.NoError(t, lab.WaitFor(func() error {
		l, err := sess.Send("stream")
		if err != nil {
			return err
		}
		var a struct{ Client string }
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			return err
		}
		after = a.Client
		return nil
	}, 20*time.Second), "the IPv6 session after the failover")
	kept := time.Since(start)
	assert.Equal(t, before, after, "the session keeps its source address and port")
	r = waitSeenAs(t, "echo-a", "tcp", target6, egressIP6)
	na := stop()
	var ours []string
	n1MAC := theLab.Node("node1").MAC
	for _, l := range na {
		if strings.Contains(l, "neighbor advertisement") && strings.Contains(l, "tgt is "+egressIP6) {
			ours = append(ours, l)
		}
	}
	require.NotEmpty(t, ours, "no Neighbor Advertisement for %s seen by the router: %q", egressIP6, na)
	ct1, err := theLab.Appctl("node1", "dpctl/dump-conntrack", "zone=64274")
	require.NoError(t, err)
	assert.Contains(t, ct1, "dst="+egressIP6, "node1's ZoneEgress6 SNATs now")
	_, sport, _ := net.SplitHostPort(before)
	assert.Contains(t, ct1, "sport="+sport+",dport="+hostPort, "the session itself goes through node1 now")
	rn = nsRun(t, theLab.RouterNetns, "ip", "-6", "neigh", "show", egressIP6)
	assert.Contains(t, rn, n1MAC, "the router's entry points at node1's br-ex")
	// IPv4 still through node3.
	waitSeenAs(t, "echo-a", "tcp", target4, egressIP)
	t.Logf("failover to node1: flows moved in %s, the session answered again after %s, seen as %s before and %s after; new connection seen as %s",
		moved.Round(time.Millisecond), kept.Round(time.Millisecond), before, after, r.Client)
	t.Logf("router saw %d NA(s) for %s, e.g. %s", len(ours), egressIP6, ours[0])
	t.Logf("router's neighbour entry after: %s", strings.TrimSpace(rn))
}
