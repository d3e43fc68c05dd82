package e2e

// Adversarial tests: hostile or unusual manifests, hand-made drift, restarts in the middle of
// changes. Each test cleans up what it added. Several reproduce defects found by the adversarial
// review (UDP pinned to a removed endpoint, conflicting flows between flow sets, established
// connections reset when the annotation is removed, flows edited in place, the Geneve port taken
// by a Service) and now pin their fixes.
//
// Run: go test -count=1 -p 1 ./test/e2e/ -run Adversarial -v

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// pspec is one Service port; the EndpointSlice port of the same name/protocol is 8080.
type pspec struct {
	name, proto    string
	port, nodePort int
}

// rawService renders a Service (namespace e2e) plus one EndpointSlice with the given endpoints.
func rawService(name string, annotated bool, typ string, extIPs []string, lbIP string, ports []pspec, eps []ep) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: e2e\n", name)
	if annotated {
		b.WriteString("  annotations:\n    ovs-srcip.io/preserve-source-ip: \"true\"\n")
	}
	fmt.Fprintf(&b, "spec:\n  type: %s\n  externalTrafficPolicy: Cluster\n", typ)
	if len(extIPs) > 0 {
		fmt.Fprintf(&b, "  externalIPs: [%s]\n", strings.Join(extIPs, ", "))
	}
	b.WriteString("  ports:\n")
	for _, p := range ports {
		fmt.Fprintf(&b, "  - {name: %s, protocol: %s, port: %d, targetPort: 8080", p.name, p.proto, p.port)
		if p.nodePort != 0 {
			fmt.Fprintf(&b, ", nodePort: %d", p.nodePort)
		}
		b.WriteString("}\n")
	}
	if lbIP != "" {
		fmt.Fprintf(&b, "status:\n  loadBalancer:\n    ingress:\n    - ip: %s\n", lbIP)
	}
	fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-x1\n  namespace: e2e\n", name)
	fmt.Fprintf(&b, "  labels: {kubernetes.io/service-name: %s}\naddressType: IPv4\nports:\n", name)
	for _, p := range ports {
		fmt.Fprintf(&b, "- {name: %s, protocol: %s, port: 8080}\n", p.name, p.proto)
	}
	if len(eps) == 0 {
		b.WriteString("endpoints: []\n")
	} else {
		b.WriteString("endpoints:\n")
	}
	for _, e := range eps {
		fmt.Fprintf(&b, "- addresses: [%s]\n  nodeName: %s\n  conditions: {ready: true, serving: true, terminating: false}\n", e.ip, e.node)
	}
	b.WriteString("---\n")
	return b.String()
}

// removeAndWait removes a manifest file and waits until no node's br-ex holds a Service flow
// (kind service-port; the base pipeline and drain flow sets are not the Service's) that contains
// one of the tokens.
func removeAndWait(t *testing.T, file string, tokens ...string) {
	t.Helper()
	writeManifest(t, file, "")
	err := lab.WaitFor(func() error {
		for _, n := range theLab.Nodes {
			out, err := theLab.DumpFlows(n.Name, "br-ex", "cookie=0x5c10000000000000/0xffff000000000000")
			if err != nil {
				return err
			}
			for _, tok := range tokens {
				if strings.Contains(out, tok) {
					return fmt.Errorf("%s still has %s", n.Name, tok)
				}
			}
		}
		return nil
	}, 15*time.Second)
	if err != nil {
		t.Errorf("cleanup of %s: %v", file, err)
	}
}

// steadyBundles restarts node's agent without deep repairs (--repair-period=0: a deep repair
// re-sends every flow by design, so with it on no window of a few seconds is write-free), waits
// for its first full sync, and counts every bundle it applies during d after it: change bundles
// and repair bundles alike ("Applying bundle", "Applying repair bundle"). The agent is restarted
// with the lab's flags when the test ends. Steady state means 0.
func steadyBundles(t testing.TB, node string, d time.Duration) (int, string) {
	t.Helper()
	require.NoError(t, theLab.StopAgent(node))
	t.Cleanup(func() {
		require.NoError(t, theLab.StopAgent(node))
		require.NoError(t, theLab.StartAgent(node))
	})
	off := logSize(t, node)
	require.NoError(t, theLab.StartAgentWith(node, "--repair-period=0"))
	var first int64
	require.NoError(t, lab.WaitFor(func() error {
		l := logSince(t, node, off)
		i := strings.Index(l, "Full sync done")
		if i < 0 {
			return fmt.Errorf("%s: no full sync yet after the restart", node)
		}
		first = off + int64(i)
		return nil
	}, time.Minute)) // a start-up wait, not an outage bound (10k Services in the benchmark)
	time.Sleep(d)
	s := logSince(t, node, first)
	n := len(bundleRE.FindAllString(s, -1))
	t.Logf("%s: %d bundles (any kind) in %v after the first full sync of its agent restarted without deep repairs", node, n, d)
	return n, s
}

// ownGroups counts the agent's groups (id 0x5c000000-0x5cffffff) on a bridge.
func ownGroups(t *testing.T, node, br string) int {
	t.Helper()
	out, err := theLab.DumpGroups(node, br)
	require.NoError(t, err)
	n := 0
	for _, m := range regexp.MustCompile(`group_id=(\d+)`).FindAllStringSubmatch(out, -1) {
		var id uint64
		fmt.Sscanf(m[1], "%d", &id)
		if id>>24 == 0x5c {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------------------------------------
// Findings (fail today)

// A UDP "connection" keeps its ZoneService conntrack entry after its endpoint left the Service:
// a client that keeps sending from one source port (DNS resolvers, syslog, statsd, QUIC, game
// clients do) would stay pinned to the removed endpoint for as long as it keeps sending. The agent
// flushes the UDP entries of removed endpoints after the bundle (as kube-proxy does). Here echo-a
// keeps running so that a stale path would be visible; in a cluster the pod is gone and the client
// would be black-holed.
func TestAdversarialUDPStaleEndpointFlushed(t *testing.T) {
	const file = "adv-stale.yaml"
	ports := []pspec{{"dns", "UDP", 53, 31300}}
	writeManifest(t, file, rawService("stale", true, "NodePort", nil, "", ports, []ep{echoA}))
	defer removeAndWait(t, file, "tp_dst=31300")
	addr := "192.0.2.11:31300"
	waitOK(t, "udp", addr)
	const lport = 41300
	r, err := theLab.RequestWith("", "udp", addr, lab.RequestOpts{LocalPort: lport})
	require.NoError(t, err)
	require.Equal(t, "echo-a", r.Pod)

	// echo-a leaves the Service, echo-b joins.
	writeManifest(t, file, rawService("stale", true, "NodePort", nil, "", ports, []ep{echoB}))
	require.NoError(t, lab.WaitFor(func() error {
		r, err := theLab.Request("", "udp", addr) // fresh source port
		if err != nil {
			return err
		}
		if r.Pod != "echo-b" {
			return fmt.Errorf("fresh port still reaches %s", r.Pod)
		}
		return nil
	}, 15*time.Second))
	// The client that kept its source port (its ZoneService entry still points to echo-a).
	r, err = theLab.RequestWith("", "udp", addr, lab.RequestOpts{LocalPort: lport})
	require.NoError(t, err)
	assert.Equal(t, "echo-b", r.Pod, "UDP flow from a fixed source port still goes to the removed endpoint %s", r.Pod)
}

// Deleting a Service stops a UDP client that keeps sending from one source port: the entry flow
// of ExServiceLB is gone, so its packets no longer reach the ZoneService conntrack entry.
func TestAdversarialUDPDeletedServiceNotServed(t *testing.T) {
	const file = "adv-deleted.yaml"
	ports := []pspec{{"dns", "UDP", 53, 31305}}
	writeManifest(t, file, rawService("deleted", true, "NodePort", nil, "", ports, []ep{echoA}))
	addr := "192.0.2.11:31305"
	waitOK(t, "udp", addr)
	const lport = 41305
	_, err := theLab.RequestWith("", "udp", addr, lab.RequestOpts{LocalPort: lport})
	require.NoError(t, err)
	removeAndWait(t, file, "tp_dst=31305")
	_, err = theLab.RequestWith("", "udp", addr, lab.RequestOpts{Timeout: "1s"})
	require.Error(t, err, "a fresh source port must not be answered any more")
	r, err := theLab.RequestWith("", "udp", addr, lab.RequestOpts{LocalPort: lport, Timeout: "1s"})
	assert.Error(t, err, "the deleted Service still answered the client's old source port (from %s via %s)", r.Pod, r.From)
}

// A Node object whose podCIDR overlaps another node's (a stale Node left after a re-install, a
// hand-made manifest) renders the same "nw_dst=<cidr>" Geneve route as the real owner. Without
// the collision guard the two node flow sets stole the flow from each other at every full sync and
// P1 traffic to the real owner's pods was tunnelled to the stale address part of the time. The
// Ready node (node2) wins; the ghost (no Ready condition) is not programmed and is reported.
func TestAdversarialOverlappingNodeCIDRReadyNodeWins(t *testing.T) {
	const file = "adv-ghost-node.yaml"
	off := logSize(t, "node1")
	writeManifest(t, file, `apiVersion: v1
kind: Node
metadata: {name: ghost}
spec: {podCIDR: 10.244.2.0/24, podCIDRs: [10.244.2.0/24]}
status: {addresses: [{type: InternalIP, address: 192.0.2.99}]}
`)
	defer func() {
		writeManifest(t, file, "")
		time.Sleep(3 * time.Second)
		waitOK(t, "tcp", "192.0.2.11:30100")
	}()
	require.NoError(t, lab.WaitFor(func() error {
		if !strings.Contains(logSince(t, "node1", off), "conflict with node/node2") {
			return fmt.Errorf("ghost's conflict not reported yet")
		}
		return nil
	}, 15*time.Second))
	out, err := theLab.DumpFlows("node1", "br-int", "cookie=0x5c03000000000000/0xffff000000000000")
	require.NoError(t, err)
	assert.NotContains(t, out, "set_field:192.0.2.99->tun_dst", "the ghost node got a Geneve route")
	time.Sleep(2 * time.Second)
	n, log := steadyBundles(t, "node1", 7*time.Second)
	assert.Zero(t, n, "node1 rewrote flows %d times in steady state:\n%s", n, tail(log, 12))
	fails := 0
	for i := 0; i < 8; i++ {
		if _, err := theLab.RequestWith("", "tcp", "192.0.2.11:30100", lab.RequestOpts{Timeout: "1s"}); err != nil {
			fails++
		}
		time.Sleep(500 * time.Millisecond)
	}
	assert.Zero(t, fails, "requests to a Service on node2 failed while a ghost Node claims node2's pod CIDR")
}

// An established TCP connection survives unrelated changes (another Service added and removed,
// several full syncs and deep repairs): it is answered every streamEvery through all of them and
// after them, never silent for more than maxSilence.
func TestAdversarialTCPSurvivesUnrelatedChanges(t *testing.T) {
	addr := "192.0.2.11:30102"
	waitOK(t, "tcp", addr)
	conn := holdConn(t, addr)
	stop := conn.keepTalking()
	time.Sleep(3 * streamEvery) // a few answers before the change
	other := svc{name: "unrelated", annotated: true, nodePort: 30380, eps: []ep{echoA, echoB}}
	writeManifest(t, "adv-unrelated.yaml", other.yaml())
	waitOK(t, "tcp", "192.0.2.11:30380")
	removeAndWait(t, "adv-unrelated.yaml", "tp_dst=30380")
	off := logSize(t, "node1")
	// Two full syncs (every 2 s) and a deep repair (every 4 s) after the removal.
	require.NoError(t, lab.WaitFor(func() error {
		l := logSince(t, "node1", off)
		if strings.Count(l, "Full sync done") < 2 || !strings.Contains(l, "Deep repair done") {
			return fmt.Errorf("waiting for two full syncs and a deep repair")
		}
		return nil
	}, 15*time.Second))
	requireSurvived(t, "Service added and removed, full syncs, deep repair", stop)
	assert.Equal(t, clientIP, conn.first.ClientIP())
}

// Field case C01 (docs/field-cases.md#c01; README, drains): established connections of a
// Service whose annotation was removed keep flowing. The generic +est flow is in ExServiceCT, which only ExServiceLB entry flows lead to; those of the
// Service are deleted with the annotation, so a drain flow set (lower priority, same ct(nat)) keeps
// leading the entry point there while ZoneService has connections to it. Without it the
// connection's next packet would go to the host stack, which answers with a RST. The connection
// exchanges data every streamEvery from before the removal until two full syncs after the
// Service's flows are gone.
//
// Mutation check: with drains disabled (agent/drain.go renders no drain flow set) this test fails
// with a reset connection.
func TestAdversarialAnnotationRemovedKeepsEstablished(t *testing.T) {
	const file = "adv-c01.yaml"
	s := svc{name: "c01", annotated: true, nodePort: 30390, eps: []ep{echoA}}
	writeManifest(t, file, s.yaml())
	defer removeAndWait(t, file, "tp_dst=30390")
	addr := "192.0.2.11:30390"
	waitOK(t, "tcp", addr)
	conn := holdConn(t, addr)
	stop := conn.keepTalking()
	time.Sleep(3 * streamEvery) // a few answers before the change
	s.annotated = false
	writeManifest(t, file, s.yaml())
	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node1", "br-ex", "cookie=0x5c10000000000000/0xffff000000000000")
		if err != nil || strings.Contains(out, "tp_dst=30390") {
			return fmt.Errorf("flows still there (%v)", err)
		}
		return nil
	}, 15*time.Second))
	off := logSize(t, "node1")
	require.NoError(t, lab.WaitFor(func() error {
		if strings.Count(logSince(t, "node1", off), "Full sync done") < 2 {
			return fmt.Errorf("waiting for two full syncs after the removal")
		}
		return nil
	}, 15*time.Second))
	requireSurvived(t, "annotation removed, Service flows gone, two full syncs", stop)
}

// An externalIP equal to a node IP, with port = another Service's NodePort, would render a flow
// with the same match and priority as that NodePort's flow (before the claims index, the flows
// were rewritten at every full sync and the entry point switched between the two Services). The
// agents now refuse an externalIP that is a node address outright (admission, SourceIPRefused),
// whatever the Services' ages and names: np0 would win the old claims order (same age, smaller
// name), yet every request to every node is answered by npa (echo-a), and nothing is rewritten.
func TestAdversarialNodePortVsExternalIPOnNodeIP(t *testing.T) {
	const fa, fb = "adv-npa.yaml", "adv-np0.yaml"
	off := logSize(t, "node1")
	writeManifest(t, fa, rawService("npa", true, "NodePort", nil, "", []pspec{{"http", "TCP", 80, 30310}}, []ep{echoA}))
	writeManifest(t, fb, rawService("np0", true, "ClusterIP", []string{"192.0.2.11"}, "", []pspec{{"http", "TCP", 30310, 0}}, []ep{echoB}))
	defer removeAndWait(t, fb, "tp_dst=30310")
	defer writeManifest(t, fa, "")
	waitOK(t, "tcp", "192.0.2.11:30310")
	require.NoError(t, lab.WaitFor(func() error {
		if !strings.Contains(logSince(t, "node1", off), "externalIP 192.0.2.11 is an address of Node node1: refused") {
			return fmt.Errorf("np0's externalIP not refused yet")
		}
		return nil
	}, 15*time.Second))
	time.Sleep(3 * time.Second)
	n, log := steadyBundles(t, "node1", 7*time.Second) // 3 full syncs at --full-sync-period=2s
	assert.Zero(t, n, "node1 rewrote flows %d times in steady state:\n%s", n, tail(log, 12))
	for i := 0; i < 8; i++ {
		for _, a := range nodeAddrs("30310") {
			r, err := theLab.RequestWith("", "tcp", a, lab.RequestOpts{Timeout: "2s"})
			if assert.NoError(t, err, "request %d to %s", i, a) {
				checkReply(t, r, a, "echo-a")
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// nodeAddrs is IP:port of every lab node (its InternalIP) for one NodePort.
func nodeAddrs(port string) []string {
	var out []string
	for _, n := range theLab.Nodes {
		out = append(out, n.IP.String()+":"+port)
	}
	return out
}

// A Service may list a node's own address as externalIP (the API server allows any externalIP,
// cf. CVE-2020-8554) with UDP port 6081. Without a guard the agent would put the node's own
// Geneve traffic (UDP 6081 to the node IP, arriving on the uplink) through the Service's DNAT
// and one Service in any namespace would take down the P1 path to that node for every other
// Service. Every agent refuses the externalIP (a node address: admission, SourceIPRefused), no
// node programs an entry point on it, and a Service whose endpoint is on node2 (entered on node1,
// Geneve to node2) keeps working. (The builder also refuses a UDP entry point on the node's own
// Geneve endpoint: golden file node1-tunnel-hijack.)
func TestAdversarialGenevePortHijack(t *testing.T) {
	const file = "adv-geneve.yaml"
	// Sanity: the victim works before.
	checkReply(t, okNow(t, "tcp", "192.0.2.11:30100"), "192.0.2.11:30100", "echo-a")
	offs := map[string]int64{}
	for _, n := range theLab.Nodes {
		offs[n.Name] = logSize(t, n.Name)
	}
	writeManifest(t, file, rawService("hijack", true, "ClusterIP", []string{"192.0.2.12"}, "", []pspec{{"geneve", "UDP", 6081, 0}}, []ep{echoB}))
	defer writeManifest(t, file, "")
	for _, n := range theLab.Nodes {
		require.NoError(t, lab.WaitFor(func() error {
			if !strings.Contains(logSince(t, n.Name, offs[n.Name]), "externalIP 192.0.2.12 is an address of Node node2: refused") {
				return fmt.Errorf("%s has not refused the externalIP yet", n.Name)
			}
			return nil
		}, 15*time.Second))
		out, err := theLab.DumpFlows(n.Name, "br-ex", "cookie=0x5c10000000000000/0xffff000000000000")
		require.NoError(t, err)
		assert.NotContains(t, out, "tp_dst=6081", "%s programmed an entry point on node2's Geneve endpoint", n.Name)
	}
	// Victim: a different Service whose endpoint is on node2, entered on node1 (Geneve to node2).
	for i := 0; i < 3; i++ {
		_, err := theLab.RequestWith("", "tcp", "192.0.2.11:30100", lab.RequestOpts{Timeout: "2s"})
		assert.NoError(t, err, "another Service's externalIP=node IP, UDP 6081 broke an unrelated Service")
	}
}

// Two pod ports on one node claiming the same IP (a stale port left by a crashed CNI, or a
// hostile OVSDB writer) would both render "ip,nw_dst=<ip>" in IntL3Forwarding with the same
// priority. A port without a Pod object (demo/evil does not exist) is not programmed at all; one
// with a Pod object competes through the collision guard (agent TestDuplicatePodIP), where the
// port whose Pod object lists the IP (echo-c) wins.
func TestAdversarialDuplicatePodIPConfirmedPodWins(t *testing.T) {
	const port = "advdup0"
	off := logSize(t, "node1")
	_, err := theLab.Vsctl("node1", "add-port", "br-int", port, "--", "set", "Interface", port, "type=internal",
		"external_ids:iface-id=demo_evil", "external_ids:attached-mac=0a:58:0a:f4:01:63", "external_ids:ip_addresses=10.244.1.5/24")
	require.NoError(t, err)
	defer func() {
		_, err := theLab.Vsctl("node1", "--if-exists", "del-port", "br-int", port)
		assert.NoError(t, err)
	}()
	require.NoError(t, lab.WaitFor(func() error {
		for _, l := range strings.Split(logSince(t, "node1", off), "\n") {
			if strings.Contains(l, "Pod port without a Pod object, skipped") && strings.Contains(l, `pod="demo/evil"`) {
				return nil
			}
		}
		return fmt.Errorf("evil pod's port not skipped yet")
	}, 15*time.Second))
	out, err := theLab.DumpFlows("node1", "br-int", "cookie=0x5c04000000000000/0xffff000000000000")
	require.NoError(t, err)
	assert.NotContains(t, out, "dl_src=0a:58:0a:f4:01:63", "the unconfirmed pod port got flows")
	time.Sleep(2 * time.Second)
	n, log := steadyBundles(t, "node1", 7*time.Second)
	assert.Zero(t, n, "node1 rewrote flows %d times in steady state:\n%s", n, tail(log, 12))
	for i := 0; i < 6; i++ {
		r, err := theLab.RequestWith("", "tcp", "192.0.2.11:30101", lab.RequestOpts{Timeout: "2s"})
		if assert.NoError(t, err, "request %d to the Service of echo-c", i) {
			assert.Equal(t, "echo-c", r.Pod)
		}
		time.Sleep(700 * time.Millisecond)
	}
}

// A flow of ours modified in place (same cookie; e.g. an operator's mod-flows while debugging, or
// a buggy tool) is invisible to the full sync, which compares flow counts per cookie; the deep
// repair (--repair-period) re-sends every flow with modify_strict and restores it. The sabotage is
// confirmed (the NodePort stops answering) before the repair is measured.
//
// Mutation checks: a mod-flows that matches no flow (tp_dst=30199) fails at "sabotage had no
// effect"; the deep repair disabled (agent/reconciler.go) fails at "not repaired".
func TestAdversarialModifiedFlowRepaired(t *testing.T) {
	addr := "192.0.2.11:30100"
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	at := sabotage(t, addr, "mod-flows to drop", func() {
		_, err := theLab.Ofctl("node1", "-O", "OpenFlow15", "mod-flows", "br-ex",
			"table=41,tcp,nw_dst=192.0.2.11,tp_dst=30100,actions=drop")
		require.NoError(t, err)
	})
	if !assertRepaired(t, addr, at, deepRepairBound, "echo-a") {
		// Repair it for the tests that follow: a restart's full sync rewrites nothing, so drop the
		// Service's flows so that the count differs.
		out, _ := theLab.DumpFlows("node1", "br-ex", "table=41,tcp,nw_dst=192.0.2.11,tp_dst=30100")
		if m := regexp.MustCompile(`cookie=(0x[0-9a-f]+)`).FindStringSubmatch(out); m != nil {
			theLab.Ofctl("node1", "-O", "OpenFlow15", "del-flows", "br-ex", "cookie="+m[1]+"/-1")
		}
		waitOK(t, "tcp", addr)
	}
	out, err := theLab.DumpFlows("node1", "br-ex", "table=41,tcp,nw_dst=192.0.2.11,tp_dst=30100")
	require.NoError(t, err)
	assert.NotContains(t, out, "actions=drop", "the modified flow is still there")
}

// Repair bounds of the lab's agents (--full-sync-period=2s, --repair-period=4s). Behaviour bounds,
// not performance figures: a repair that does not come within them did not come from the periodic
// sync that should make it.
const (
	// fullSyncRepairBound: a flow or group deleted by hand is back after the next full sync; five
	// periods leave room for a loaded runner.
	fullSyncRepairBound = 10 * time.Second
	// deepRepairBound: a flow modified in place is back after the next deep repair; three repair
	// periods.
	deepRepairBound = 12 * time.Second
	// sabotageProbe: the request that confirms a sabotage; a broken path answers with a RST or not
	// at all.
	sabotageProbe = "1s"
)

var bundleRE = regexp.MustCompile(`Applying (repair )?bundle`)

// sabotage runs breakIt (a hand-made change to node1's bridges) and confirms that addr stopped
// answering; it returns when the sabotage was made. If node1's agent applied a bundle between the
// sabotage and the probe (it repaired faster than we could look), it tries again, three times at
// most; a sabotage that did not break addr without any bundle fails the test.
func sabotage(t *testing.T, addr, what string, breakIt func()) time.Time {
	t.Helper()
	for try := 1; ; try++ {
		off := logSize(t, "node1")
		at := time.Now()
		breakIt()
		_, err := theLab.RequestWith("", "tcp", addr, lab.RequestOpts{Timeout: sabotageProbe})
		if err != nil {
			t.Logf("sabotage %q confirmed: %s fails: %v", what, addr, err)
			return at
		}
		if n := len(bundleRE.FindAllString(logSince(t, "node1", off), -1)); n == 0 || try == 3 {
			t.Fatalf("sabotage %q had no effect: %s still answers (try %d, %d bundles since)", what, addr, try, n)
		}
		t.Logf("sabotage %q repaired before the probe (try %d), again", what, try)
	}
}

// requireRepaired is assertRepaired that stops the test on failure (a later sabotage of a path
// that is still broken would prove nothing).
func requireRepaired(t *testing.T, addr string, at time.Time, bound time.Duration, pods ...string) {
	t.Helper()
	if !assertRepaired(t, addr, at, bound, pods...) {
		t.FailNow()
	}
}

// assertRepaired waits until addr answers again (from one of pods), at most bound after the
// sabotage at, and logs the time to repair.
func assertRepaired(t *testing.T, addr string, at time.Time, bound time.Duration, pods ...string) bool {
	t.Helper()
	var r lab.Reply
	err := lab.WaitFor(func() error {
		var err error
		r, err = theLab.RequestWith("", "tcp", addr, lab.RequestOpts{Timeout: sabotageProbe})
		return err
	}, bound-time.Since(at))
	if !assert.NoError(t, err, "%s not repaired within %v of the sabotage", addr, bound) {
		return false
	}
	t.Logf("%s repaired %v after the sabotage (bound %v)", addr, time.Since(at).Round(10*time.Millisecond), bound)
	checkReply(t, r, addr, pods...)
	return true
}

// The same client socket (one UDP source port) talking to two entry points of the same Service
// on the same ingress node (LB IP and NodePort): both DNATs produce the same reply tuple
// (10.244.2.5:8080 -> client:port) in ZoneService. The second exchange must still be answered from
// the address it was sent to.
func TestAdversarialUDPSameSourcePortTwoEntryPoints(t *testing.T) {
	waitOK(t, "udp", "203.0.113.110:53")
	const lport = 41310
	for _, addr := range []string{"203.0.113.110:53", "192.0.2.11:31100"} {
		r, err := theLab.RequestWith("", "udp", addr, lab.RequestOpts{LocalPort: lport, Timeout: "2s"})
		if assert.NoError(t, err, "%s from port %d", addr, lport) {
			checkReply(t, r, addr, "echo-a")
			t.Logf("%s: backend saw %s, answer from %s", addr, r.Client, r.From)
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Behaviour that works (cheap checks)

// A Service with no endpoints hands new datagrams to the host (kube-proxy rejects them) without
// creating ZoneService state, so a UDP client that keeps sending from one port reaches the first
// endpoint as soon as it appears.
func TestAdversarialUDPZeroEndpointsThenEndpoints(t *testing.T) {
	const file = "adv-zero.yaml"
	ports := []pspec{{"dns", "UDP", 53, 31320}}
	writeManifest(t, file, rawService("zero", true, "NodePort", nil, "", ports, nil))
	defer removeAndWait(t, file, "tp_dst=31320")
	addr := "192.0.2.11:31320"
	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node1", "br-ex")
		if err != nil || !strings.Contains(out, "tp_dst=31320") {
			return fmt.Errorf("not programmed (%v)", err)
		}
		return nil
	}, 15*time.Second))
	const lport = 41320
	_, err := theLab.RequestWith("", "udp", addr, lab.RequestOpts{LocalPort: lport, Timeout: "1s"})
	require.Error(t, err, "no endpoint: must not answer")
	writeManifest(t, file, rawService("zero", true, "NodePort", nil, "", ports, []ep{echoB}))
	require.NoError(t, lab.WaitFor(func() error {
		r, err := theLab.RequestWith("", "udp", addr, lab.RequestOpts{LocalPort: lport, Timeout: "1s"})
		if err == nil {
			checkReply(t, r, addr, "echo-b")
		}
		return err
	}, 15*time.Second))
}

// Two Services with the same NodePort: one wins (same winner on every node: dupa, same age and
// the smaller name), the loser takes over on every node when the winner goes away; nothing flaps.
// Every request to every node's NodePort must be answered by the winner.
func TestAdversarialDuplicateNodePort(t *testing.T) {
	const fa, fb = "adv-dupa.yaml", "adv-dupb.yaml"
	writeManifest(t, fa, rawService("dupa", true, "NodePort", nil, "", []pspec{{"http", "TCP", 80, 30330}}, []ep{echoA}))
	writeManifest(t, fb, rawService("dupb", true, "NodePort", nil, "", []pspec{{"http", "TCP", 80, 30330}}, []ep{echoB}))
	defer removeAndWait(t, fb, "tp_dst=30330")
	addrs := nodeAddrs("30330")
	for _, a := range addrs {
		waitOK(t, "tcp", a)
	}
	time.Sleep(2500 * time.Millisecond)
	for i := 0; i < 5; i++ {
		for _, a := range addrs {
			r, err := theLab.RequestWith("", "tcp", a, lab.RequestOpts{Timeout: "2s"})
			if assert.NoError(t, err, "request %d to %s", i, a) {
				checkReply(t, r, a, "echo-a")
			}
		}
	}
	n, log := steadyBundles(t, "node1", 5*time.Second)
	assert.Zero(t, n, "steady state rewrote flows:\n%s", tail(log, 10))
	writeManifest(t, fa, "")
	for _, a := range addrs {
		require.NoError(t, lab.WaitFor(func() error {
			r, err := theLab.Request("", "tcp", a)
			if err == nil && r.Pod != "echo-b" {
				err = fmt.Errorf("%s still %s", a, r.Pod)
			}
			return err
		}, 15*time.Second))
	}
	for _, a := range addrs {
		r, err := theLab.RequestWith("", "tcp", a, lab.RequestOpts{Timeout: "2s"})
		if assert.NoError(t, err, "after the winner left: %s", a) {
			checkReply(t, r, a, "echo-b")
		}
	}
}

// Flows and a group of ours deleted by hand come back at the next full sync. Each sabotage is
// confirmed (the NodePort stops answering) before its repair is measured.
//
// Mutation checks: deleting a cookie that is not the Service's fails at "sabotage had no effect";
// the full sync not re-adding missing flow sets (agent) fails at "not repaired".
func TestAdversarialHandDeletedFlowsRepaired(t *testing.T) {
	addr := "192.0.2.11:30100"
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	// The Service port's flows on br-ex.
	at := sabotage(t, addr, "del-flows of the Service's cookie on br-ex", func() {
		out, err := theLab.DumpFlows("node1", "br-ex", "table=40,tcp,nw_dst=192.0.2.11,tp_dst=30100")
		require.NoError(t, err)
		m := regexp.MustCompile(`cookie=(0x[0-9a-f]+)`).FindStringSubmatch(out)
		require.NotNil(t, m, "no flow of 30100 in table 40:\n%s", out)
		_, err = theLab.Ofctl("node1", "-O", "OpenFlow15", "del-flows", "br-ex", "cookie="+m[1]+"/-1")
		require.NoError(t, err)
	})
	requireRepaired(t, addr, at, fullSyncRepairBound, "echo-a")
	// The whole base pipeline of br-int.
	at = sabotage(t, addr, "del-flows of br-int's base pipeline", func() {
		_, err := theLab.Ofctl("node1", "-O", "OpenFlow15", "del-flows", "br-int", "cookie=0x5c02000000000000/0xffff000000000000")
		require.NoError(t, err)
	})
	requireRepaired(t, addr, at, fullSyncRepairBound, "echo-a")
	// Every group of ours (flows that point to them go with them).
	at = sabotage(t, addr, "del-groups on br-ex", func() {
		_, err := theLab.Ofctl("node1", "-O", "OpenFlow15", "del-groups", "br-ex")
		require.NoError(t, err)
	})
	assertRepaired(t, addr, at, fullSyncRepairBound, "echo-a")
	assertRepaired(t, "192.0.2.11:30102", at, fullSyncRepairBound, "echo-a", "echo-b")
}

// Rapid flapping of the annotation ends in the last written state, without leaked groups.
func TestAdversarialAnnotationFlap(t *testing.T) {
	const file = "adv-flap.yaml"
	s := svc{name: "flap", annotated: true, nodePort: 30340, lbIP: "203.0.113.140", eps: []ep{echoA, echoB}}
	// The baseline must not catch the tail of an earlier test's cleanup or repair: take it once
	// two readings a full-sync period (2 s) apart agree.
	baseGroups := -1
	require.NoError(t, lab.WaitFor(func() error {
		a := ownGroups(t, "node1", "br-ex")
		time.Sleep(2500 * time.Millisecond)
		if b := ownGroups(t, "node1", "br-ex"); a != b {
			return fmt.Errorf("group count still moving: %d -> %d", a, b)
		}
		baseGroups = a
		return nil
	}, 30*time.Second))
	for i := 0; i < 40; i++ {
		s.annotated = i%2 == 0
		writeManifest(t, file, s.yaml())
		time.Sleep(time.Duration(10+i%5*20) * time.Millisecond)
	}
	s.annotated = true
	writeManifest(t, file, s.yaml())
	checkReply(t, waitOK(t, "tcp", "192.0.2.11:30340"), "192.0.2.11:30340", "echo-a", "echo-b")
	checkReply(t, waitOK(t, "udp", "203.0.113.140:53"), "203.0.113.140:53", "echo-a", "echo-b")
	if err := lab.WaitFor(func() error {
		if n := ownGroups(t, "node1", "br-ex"); n != baseGroups+2 {
			return fmt.Errorf("%d groups, want %d", n, baseGroups+2)
		}
		return nil
	}, 10*time.Second); !assert.NoError(t, err) {
		g, _ := theLab.DumpGroups("node1", "br-ex")
		f, _ := theLab.DumpFlows("node1", "br-ex", "cookie=0x5c00000000000000/0xff00000000000000")
		b, _ := os.ReadFile(theLab.AgentLog("node1"))
		t.Logf("groups:\n%s\nflows:\n%s\nlog:\n%s", g, f, tail(string(b), 60))
	}
	for i := 0; i < 21; i++ {
		s.annotated = i%2 == 1
		writeManifest(t, file, s.yaml())
		time.Sleep(15 * time.Millisecond)
	}
	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node1", "br-ex")
		if err != nil || strings.Contains(out, "30340") || strings.Contains(out, "203.0.113.140") {
			return fmt.Errorf("flows left (%v)", err)
		}
		return nil
	}, 15*time.Second))
	assert.NoError(t, lab.WaitFor(func() error {
		if n := ownGroups(t, "node1", "br-ex"); n != baseGroups {
			return fmt.Errorf("groups leaked: %d, want %d", n, baseGroups)
		}
		return nil
	}, 10*time.Second))
	writeManifest(t, file, "")
}

// Changes made while the agent is down are applied by its first full sync: a new Service works,
// a deleted one's flows and group are gone.
func TestAdversarialChangesWhileAgentDown(t *testing.T) {
	const fa, fb = "adv-down-a.yaml", "adv-down-b.yaml"
	a := svc{name: "downa", annotated: true, nodePort: 30350, eps: []ep{echoA}}
	b := svc{name: "downb", annotated: true, nodePort: 30351, eps: []ep{echoB}}
	writeManifest(t, fa, a.yaml())
	waitOK(t, "tcp", "192.0.2.11:30350")
	time.Sleep(2500 * time.Millisecond)
	baseGroups := ownGroups(t, "node1", "br-ex")
	require.NoError(t, theLab.StopAgent("node1"))
	writeManifest(t, fa, "")
	writeManifest(t, fb, b.yaml())
	require.NoError(t, theLab.StartAgent("node1"))
	defer removeAndWait(t, fb, "tp_dst=30351")
	checkReply(t, waitOK(t, "tcp", "192.0.2.11:30351"), "192.0.2.11:30351", "echo-b")
	out, err := theLab.DumpFlows("node1", "br-ex")
	require.NoError(t, err)
	assert.NotContains(t, out, "tp_dst=30350")
	assert.Equal(t, baseGroups, ownGroups(t, "node1", "br-ex"), "one group removed, one added")
}

// Hostile and malformed objects are skipped; the agent stays up and the other Services keep
// working: bad IPs, IPv6-only slices, out-of-range ports, endpoints outside every pod CIDR,
// a node IP as endpoint (hostNetwork backends), a file that does not parse, garbage pod ports.
func TestAdversarialMalformedInputs(t *testing.T) {
	const file, bad = "adv-malformed.yaml", "adv-unparsable.yaml"
	y := rawService("m1", true, "LoadBalancer", []string{"not-an-ip", "2001:db8::1", "203.0.113.150"}, "999.1.1.1",
		[]pspec{{"http", "TCP", 80, 30360}, {"big", "TCP", 70000, 30361}, {"sctp", "SCTP", 9, 30362}}, nil) +
		// Endpoints outside every pod CIDR (C34): m2's port is declined, no flows.
		rawService("m2", true, "NodePort", nil, "", []pspec{{"http", "TCP", 80, 30363}}, []ep{{"x", "10.99.0.1", "node2"}, {"y", "192.0.2.12", "node2"}}) +
		`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: m1-v6, namespace: e2e, labels: {kubernetes.io/service-name: m1}}
addressType: IPv6
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints: [{addresses: ["fd00::1"], conditions: {ready: true}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: m1-bad, namespace: e2e, labels: {kubernetes.io/service-name: m1}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints: [{addresses: ["10.244.2.5/24"]}, {addresses: []}, {addresses: ["10.244.3.5"], conditions: {ready: false, serving: true, terminating: false}}]
---
`
	writeManifest(t, file, y)
	defer removeAndWait(t, file, "tp_dst=30360", "nw_dst=203.0.113.150", "tp_dst=30363")
	writeManifest(t, bad, "apiVersion: v1\nkind: Service\nmetadata: {name: [oops\n")
	defer writeManifest(t, bad, "")
	_, err := theLab.Vsctl("node1", "add-port", "br-int", "advbad0", "--", "set", "Interface", "advbad0", "type=internal",
		"external_ids:iface-id=nounderscore", "external_ids:attached-mac=zz", "external_ids:ip_addresses=banana")
	require.NoError(t, err)
	defer theLab.Vsctl("node1", "--if-exists", "del-port", "br-int", "advbad0")
	_, err = theLab.Vsctl("node1", "add-port", "br-int", "advbad1", "--", "set", "Interface", "advbad1", "type=internal",
		"external_ids:iface-id=demo_ghost", "external_ids:attached-mac=0a:58:0a:f4:01:64", "external_ids:ip_addresses=10.244.9.9,fd00::9")
	require.NoError(t, err)
	defer theLab.Vsctl("node1", "--if-exists", "del-port", "br-int", "advbad1")

	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node1", "br-ex")
		if err != nil || !strings.Contains(out, "nw_dst=203.0.113.150,tp_dst=80") {
			return fmt.Errorf("m1 not programmed (%v)", err)
		}
		return nil
	}, 15*time.Second))
	checkReply(t, waitOK(t, "tcp", "192.0.2.11:30100"), "192.0.2.11:30100", "echo-a")
	for _, n := range theLab.Nodes {
		running, exitErr := theLab.AgentRunning(n.Name)
		assert.True(t, running, "agent on %s exited: %v", n.Name, exitErr)
	}
	// No usable endpoint (10.244.2.5/24 is invalid, 10.244.3.5 not ready): the group is empty,
	// the LB IP drops.
	_, err = theLab.RequestWith("", "tcp", "203.0.113.150:80", lab.RequestOpts{Timeout: "1s"})
	assert.Error(t, err)
	b, _ := os.ReadFile(theLab.AgentLog("node1"))
	assert.Contains(t, string(b), "2 of 2 endpoint(s) outside every node's pod CIDRs (hostNetwork?): 10.99.0.1:8080, 192.0.2.12:8080")
	out, err := theLab.DumpFlows("node1", "br-ex", "tcp,tp_dst=30363")
	require.NoError(t, err)
	assert.NotContains(t, out, "tp_dst=30363", "m2 is declined (C34)")
}

// A Service with 200 endpoints gets one group with 200 buckets.
func TestAdversarialTwoHundredEndpoints(t *testing.T) {
	const file = "adv-200.yaml"
	var eps []ep
	eps = append(eps, echoA, echoB, echoC)
	for i := 0; len(eps) < 200; i++ {
		n := 1 + i%3
		eps = append(eps, ep{"x", fmt.Sprintf("10.244.%d.%d", n, 10+i/3), fmt.Sprintf("node%d", n)})
	}
	writeManifest(t, file, rawService("big", true, "NodePort", nil, "", []pspec{{"http", "TCP", 80, 30370}}, eps))
	defer removeAndWait(t, file, "tp_dst=30370")
	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node1", "br-ex", "table=41,tcp,tp_dst=30370")
		if err != nil {
			return err
		}
		m := regexp.MustCompile(`group:(\d+)`).FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("no flow")
		}
		g, err := theLab.Ofctl("node1", "-O", "OpenFlow15", "dump-groups", "br-ex", m[1])
		if err != nil {
			return err
		}
		if c := strings.Count(g, "bucket_id:"); c != 200 {
			return fmt.Errorf("%d buckets", c)
		}
		return nil
	}, 20*time.Second))
}

// BenchmarkProgramAndRemoveTenThousandServices measures on the lab the time from writing a file of
// 10,000 opted-in Services (one TCP NodePort each, one endpoint) until the last one answers
// (s-program/op) and from removing the file until it no longer answers (s-remove/op), and checks
// the steady state in between (bundles of any kind written in 6 s after a restart of node1's agent
// without deep repairs: steady-bundles/op, expected 0). Expensive
// (minutes); run it alone:
//
//	go test -count=1 -run '^$' -bench TenThousand -benchtime 1x -timeout 20m ./test/e2e/
func BenchmarkProgramAndRemoveTenThousandServices(b *testing.B) {
	var manifest strings.Builder
	for i := 0; i < 10000; i++ {
		e := []ep{echoA, echoB, echoC}[i%3]
		manifest.WriteString(rawService(fmt.Sprintf("k%05d", i), true, "NodePort", nil, "", []pspec{{"http", "TCP", 80, 20000 + i}}, []ep{e}))
	}
	p := filepath.Join(dir, "adv-10k.yaml")
	answers := func(addr string) error {
		_, err := theLab.RequestWith("", "tcp", addr, lab.RequestOpts{Timeout: "1s"})
		return err
	}
	var program, remove time.Duration
	steady := 0
	for i := 0; i < b.N; i++ {
		start := time.Now()
		require.NoError(b, os.WriteFile(p+".tmp", []byte(manifest.String()), 0o644))
		require.NoError(b, os.Rename(p+".tmp", p))
		require.NoError(b, lab.WaitFor(func() error { return answers("192.0.2.11:29999") }, 5*time.Minute))
		program += time.Since(start)
		require.NoError(b, answers("192.0.2.11:30100"), "a base Service stopped answering")
		require.NoError(b, answers("192.0.2.11:20000"))
		n, log := steadyBundles(b, "node1", 6*time.Second)
		steady += n
		assert.Zero(b, n, "bundles in 6 s of steady state:\n%s", tail(log, 8))

		start = time.Now()
		require.NoError(b, os.Remove(p))
		require.NoError(b, lab.WaitFor(func() error {
			if answers("192.0.2.11:29999") == nil {
				return fmt.Errorf("still answers")
			}
			return nil
		}, 3*time.Minute))
		remove += time.Since(start)
	}
	b.ReportMetric(program.Seconds()/float64(b.N), "s-program/op")
	b.ReportMetric(remove.Seconds()/float64(b.N), "s-remove/op")
	b.ReportMetric(float64(steady)/float64(b.N), "steady-bundles/op")
}
