package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Egress gateways (issue 9, path P4, docs/egress.md) with real packets: the echo server in the
// client netns (behind the lab router) logs the source address it sees.

const egressIP = "192.0.2.50"

// egressPolicy is an EgressGateway selecting echo-a (node2) with gateway nodes matching
// hostname gwNode; extra is appended to the spec.
func egressPolicy(name, ip, gwNode, extra string) string {
	return fmt.Sprintf(`apiVersion: ovs-srcip.io/v1alpha1
kind: EgressGateway
metadata:
  name: %s
  creationTimestamp: "2026-01-01T00:00:00Z"
  generation: 1
spec:
  egressIPs: [%s]
  podSelector:
    matchLabels: {pod: echo-a}
  gatewayNodeSelector:
    matchLabels: {kubernetes.io/hostname: %s}
%s`, name, ip, gwNode, extra)
}

// waitSeenAs repeats a request from netns from to target until the server saw source address
// want (the agents change the egress path asynchronously) and returns that answer.
func waitSeenAs(t *testing.T, from, proto, target, want string) lab.Reply {
	t.Helper()
	var r lab.Reply
	require.NoError(t, lab.WaitFor(func() error {
		var err error
		if r, err = theLab.Request(from, proto, target); err != nil {
			return err
		}
		if r.ClientIP() != want {
			return fmt.Errorf("server saw %s", r.Client)
		}
		return nil
	}, 20*time.Second), "%s from %s to %s: the server to see %s", proto, from, target, want)
	return r
}

// egressFlows returns the br-ex flows of node.
func egressFlows(t *testing.T, node string) string {
	t.Helper()
	out, err := theLab.DumpFlows(node, "br-ex")
	require.NoError(t, err)
	return out
}

func TestEgressGateway(t *testing.T) {
	hostEcho(t, "client", "")
	target := clientIP + ":" + hostPort
	// Before any policy: the host masquerade path (node address).
	request(t, "echo-a", "tcp", target, "client", "192.0.2.12")

	writeManifest(t, "egress.yaml", egressPolicy("job", egressIP, "node3", ""))
	t.Cleanup(func() { writeManifest(t, "egress.yaml", "") })
	require.NoError(t, lab.WaitFor(func() error {
		if !strings.Contains(egressFlows(t, "node3"), "arp_tpa="+egressIP) {
			return fmt.Errorf("node3 does not answer ARP for %s yet", egressIP)
		}
		return nil
	}, 20*time.Second))
	// Only the active gateway answers ARP for the egress IP.
	assert.NotContains(t, egressFlows(t, "node1"), "arp_tpa="+egressIP)
	assert.NotContains(t, egressFlows(t, "node2"), "arp_tpa="+egressIP)

	// The selected pod leaves with the egress IP (TCP and UDP), through node3's SNAT.
	for _, proto := range []string{"tcp", "udp"} {
		r := waitSeenAs(t, "echo-a", proto, target, egressIP)
		t.Logf("%s from echo-a: server saw %s", proto, r.Client)
	}
	ct, err := theLab.Appctl("node3", "dpctl/dump-conntrack", "zone=64258")
	require.NoError(t, err)
	assert.Contains(t, ct, "src=10.244.2.5", "node3's ZoneEgress holds echo-a's connections")
	assert.Contains(t, ct, "dst="+egressIP, "node3's ZoneEgress SNATs to the egress IP")

	// A pod that is not selected keeps the host masquerade path.
	request(t, "echo-c", "tcp", target, "client", "192.0.2.11")

	// C22: a connection that came IN to echo-a (LB IP, client IP kept) is answered through its
	// ingress node, not the egress gateway.
	require.NoError(t, lab.WaitFor(func() error {
		r, err := theLab.Request("client", "tcp", "203.0.113.110:80")
		if err != nil {
			return err
		}
		if r.Pod != "echo-a" {
			return fmt.Errorf("answered by %s", r.Pod)
		}
		if r.ClientIP() != clientIP || r.FromIP() != "203.0.113.110" {
			return fmt.Errorf("echo-a saw %s, answer from %s", r.Client, r.From)
		}
		return nil
	}, 20*time.Second), "inbound connection to echo-a through the LB IP")

	// An outside host cannot reach a pod through the egress IP (no connection the pod opened).
	_, err = theLab.RequestWith("client", "tcp", egressIP+":8080", lab.RequestOpts{Timeout: "1s"})
	assert.Error(t, err, "the client reached something through the egress IP")

	// C28: an egress IP equal to a node address is refused (never announced).
	writeManifest(t, "egress-conflict.yaml", egressPolicy("conflict", "192.0.2.12", "node3", ""))
	t.Cleanup(func() { writeManifest(t, "egress-conflict.yaml", "") })
	time.Sleep(3 * time.Second)
	assert.NotContains(t, egressFlows(t, "node3"), "arp_tpa=192.0.2.12")
	// node2 keeps serving its NodePort.
	r := waitOK(t, "tcp", "192.0.2.12:30100")
	assert.Equal(t, clientIP, r.ClientIP())
}
