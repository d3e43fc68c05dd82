package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// waitLogged waits until node's agent log, from offset on, has a line holding every token.
func waitLogged(t *testing.T, node string, offset int64, tokens ...string) {
	t.Helper()
	err := lab.WaitFor(func() error {
		for _, l := range strings.Split(logSince(t, node, offset), "\n") {
			all := true
			for _, tok := range tokens {
				all = all && strings.Contains(l, tok)
			}
			if all {
				return nil
			}
		}
		return fmt.Errorf("%s logged no line with %q", node, tokens)
	}, 20*time.Second)
	require.NoError(t, err)
}

// Issue 20, row "an IPv6-only Service", as issue 22 changed it: an IPv6 SingleStack Service is
// served on IPv6 (its NodePort on node1's IPv6 address brings the client's IPv6 address to
// echo-a on node2) and has no IPv4 path: node1 writes no IPv4 flow for it, and the client's
// IPv4 SYN to the same port reaches node1's host stack (kube-proxy's, here nothing listens: refused
// at once), never an empty group that drops it. Patched to dual-stack ([IPv6, IPv4]) it is
// served on IPv4 too, with the client's IPv4 address.
func TestIPv6OnlyServiceServedOnIPv6Only(t *testing.T) {
	const file = "ipv6only.yaml"
	s := dsSvc{name: "v6only", n: 41, policy: "SingleStack", families: []string{"IPv6"}, nodePort: 30141, eps: []ep{echoA}}
	defer removeAndWait(t, file, "tp_dst=30141")
	writeManifest(t, file, s.yaml())
	addr6 := "[2001:db8:0:2::11]:30141"
	r, err := waitFrom("tcp", addr6, 20*time.Second)
	require.NoError(t, err, "the IPv6 NodePort of an IPv6-only Service is not served")
	checkFamily(t, r, "IPv6", addr6, "echo-a")
	time.Sleep(2500 * time.Millisecond) // a full sync or two (--full-sync-period=2s)
	assert.Empty(t, v4ServiceFlows(t, "node1", 30141, 31141), "node1 programs an IPv4 path of an IPv6-only Service")

	host := capture(t, "node1", "br-ex", "ip and tcp dst port 30141")
	start := time.Now()
	_, err = theLab.RequestWith("", "tcp", "192.0.2.11:30141", lab.RequestOpts{Timeout: "3s"})
	took := time.Since(start)
	assert.Error(t, err, "nothing listens on node1's host for 30141")
	assert.NotEmpty(t, host(), "the IPv4 SYN to the NodePort never reached node1's host stack (captured by the pipeline)")
	assert.Less(t, took, 2500*time.Millisecond, "the client waited for its timeout: a black hole, not the host's refusal")

	// Dual-stack, IPv6 first: served on IPv4 as well, client IP kept on both.
	s.policy, s.families = "RequireDualStack", []string{"IPv6", "IPv4"}
	writeManifest(t, file, s.yaml())
	checkReply(t, waitOK(t, "tcp", "192.0.2.11:30141"), "192.0.2.11:30141", "echo-a")
	r, err = waitFrom("tcp", addr6, 5*time.Second)
	require.NoError(t, err)
	checkFamily(t, r, "IPv6", addr6, "echo-a")
}

// Issue 20, "an LB IP equal to a pod IP": a LoadBalancer IP that is echo-c's own address
// (10.244.1.5, a pod on node1) is refused with a SourceIPRefused warning and not programmed; a
// connection to echo-c's address that the router sends to node1 keeps reaching echo-c (through
// node1's host and gateway port), never the Service's endpoint echo-b. The Service's NodePort
// is served.
func TestLoadBalancerIPEqualToPodIPRefused(t *testing.T) {
	const file = "podlb.yaml"
	ports := []pspec{{"http", "TCP", 8080, 30142}}
	defer removeAndWait(t, file, "tp_dst=30142", "nw_dst="+echoC.ip)
	off := logSize(t, "node1")
	writeManifest(t, file, rawService("podlb", true, "LoadBalancer", nil, echoC.ip, ports, []ep{echoB}))
	checkReply(t, waitOK(t, "tcp", "192.0.2.11:30142"), "192.0.2.11:30142", "echo-b")
	waitLogged(t, "node1", off, "loadBalancer ingress IP 10.244.1.5 is inside the pod CIDR 10.244.1.0/24 of Node node1")
	out, err := theLab.DumpFlows("node1", "br-ex", "cookie=0x5c10000000000000/0xffff000000000000")
	require.NoError(t, err)
	assert.NotContains(t, out, "nw_dst="+echoC.ip, "node1 programs a pod's address as an entry point")

	routeVia(t, echoC.ip, "node1")
	for i := 0; i < 5; i++ {
		r := waitOK(t, "tcp", echoC.ip+":8080")
		assert.Equal(t, "echo-c", r.Pod, "a connection to echo-c's own address reached %s", r.Pod)
	}
}

// Issue 20, "topology hints": node1 in zone-b uses only the endpoints hinted for zone-b (echo-b),
// as kube-proxy; without its zone label (no hint matches) it uses all of them again.
func TestTopologyHintsZoneEndpoints(t *testing.T) {
	const file = "topo.yaml"
	nodesPath := filepath.Join(dir, "nodes.yaml")
	orig, err := os.ReadFile(nodesPath)
	require.NoError(t, err)
	restore := func() { writeManifest(t, "nodes.yaml", string(orig)) }
	defer restore()
	defer removeAndWait(t, file, "tp_dst=30143")

	const node1Labels = "  name: node1\n  labels:\n"
	require.Contains(t, string(orig), node1Labels)
	writeManifest(t, "nodes.yaml", strings.Replace(string(orig), node1Labels, node1Labels+"    topology.kubernetes.io/zone: zone-b\n", 1))
	ports := []pspec{{"http", "TCP", 80, 30143}}
	svc := rawService("topo", true, "NodePort", nil, "", ports, []ep{echoA, echoB})
	hint := func(e ep, zone string) {
		line := fmt.Sprintf("- addresses: [%s]\n  nodeName: %s\n", e.ip, e.node)
		require.Contains(t, svc, line)
		svc = strings.Replace(svc, line, line+"  hints: {forZones: [{name: "+zone+"}]}\n", 1)
	}
	hint(echoA, "zone-a")
	hint(echoB, "zone-b")
	writeManifest(t, file, svc)
	addr := "192.0.2.11:30143"
	waitOK(t, "tcp", addr)
	err = lab.WaitFor(func() error {
		for i := 0; i < 12; i++ {
			r, err := theLab.Request("", "tcp", addr)
			if err != nil {
				return err
			}
			if r.Pod != "echo-b" {
				return fmt.Errorf("request %d reached %s, not zone-b's echo-b", i, r.Pod)
			}
			assert.Equal(t, clientIP, r.ClientIP())
		}
		return nil
	}, 20*time.Second)
	require.NoError(t, err, "node1 (zone-b) did not use only zone-b's endpoint")

	// node1 loses its zone label: no hint for its zone, every endpoint again.
	restore()
	err = lab.WaitFor(func() error {
		seen := map[string]bool{}
		for i := 0; i < 16; i++ {
			r, err := theLab.Request("", "tcp", addr)
			if err != nil {
				return err
			}
			seen[r.Pod] = true
		}
		if !seen["echo-a"] || !seen["echo-b"] {
			return fmt.Errorf("only %v reached", seen)
		}
		return nil
	}, 20*time.Second)
	require.NoError(t, err, "without a zone node1 must fall back to all endpoints")
}

// Issue 20, row "an SCTP port": the agent detects at start that the lab's userspace datapath
// (Open vSwitch 3.1) cannot track SCTP ports, and declines each SCTP port with that reason
// (a SourceIPDeclined warning naming the port); the Service's TCP port is served, and an
// SCTP-only Service gets no flow at all.
func TestSCTPPortDeclinedWithReason(t *testing.T) {
	const file = "sctp.yaml"
	defer removeAndWait(t, file, "tp_dst=30144", "tp_dst=30145", "tp_dst=30146")
	b, err := os.ReadFile(theLab.AgentLog("node1"))
	require.NoError(t, err)
	assert.Regexp(t, `SCTP support of the datapath.*datapathType="netdev".*canConntrackSCTPPorts=false`, string(b))

	off := logSize(t, "node1")
	mixed := rawService("sctpmixed", true, "NodePort", nil, "", []pspec{{"http", "TCP", 80, 30144}, {"assoc", "SCTP", 9999, 30145}}, []ep{echoA})
	only := rawService("sctponly", true, "NodePort", nil, "", []pspec{{"assoc", "SCTP", 9999, 30146}}, []ep{echoA})
	writeManifest(t, file, mixed+only)
	for _, svc := range []string{"e2e/sctpmixed", "e2e/sctponly"} {
		waitLogged(t, "node1", off, svc, "SourceIPDeclined", "port assoc 9999/SCTP declined", "tracks SCTP without ports before 3.2")
	}
	checkReply(t, waitOK(t, "tcp", "192.0.2.11:30144"), "192.0.2.11:30144", "echo-a")
	out, err := theLab.DumpFlows("node1", "br-ex", "cookie=0x5c10000000000000/0xffff000000000000")
	require.NoError(t, err)
	assert.NotContains(t, out, "sctp", "node1 programs an SCTP entry point")
	assert.NotContains(t, out, "30146")
}
