package e2e

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// zonePod and zoneService mirror flows.ZonePod / flows.ZoneService (decimal, as dpctl prints them).
const (
	zoneService = "64256"
	zonePod     = "64257"
)

// checkReply asserts that the backend saw the client's own address and that the answer came
// from exactly the address the client dialled.
func checkReply(t *testing.T, r lab.Reply, addr string, wantPods ...string) {
	t.Helper()
	assert.Equal(t, clientIP, r.ClientIP(), "backend %s/%s saw %s, want the client IP", r.Node, r.Pod, r.Client)
	assert.Equal(t, addr, r.From, "answer to %s came from %s", addr, r.From)
	if len(wantPods) > 0 {
		assert.Contains(t, wantPods, r.Pod, "unexpected backend")
	}
}

// backendLogged asserts that the backend's own log recorded the client's IP for the reply's
// client port.
func backendLogged(t *testing.T, r lab.Reply) {
	t.Helper()
	p := theLab.Pod(r.Pod)
	require.NotNil(t, p, "pod %s", r.Pod)
	b, err := os.ReadFile(p.EchoLog)
	require.NoError(t, err)
	assert.Contains(t, string(b), fmt.Sprintf("%q", r.Client), "backend %s did not log %s", r.Pod, r.Client)
}

// P1: client -> node1 NodePort -> backend on node2, over Geneve, no SNAT; reply from node1:NodePort.
func TestNodePortRemoteBackend(t *testing.T) {
	addr := "192.0.2.11:30100"
	r := waitOK(t, "tcp", addr)
	checkReply(t, r, addr, "echo-a")
	assert.Equal(t, "node2", r.Node)
	backendLogged(t, r)

	// node2 holds the connection in the pod zone with origin "tunnel" and node1 as ingress node
	// (ct_label 0xc000020b = 192.0.2.11); node1 holds the DNAT in the service zone.
	_, cport, _ := strings.Cut(r.Local, ":")
	ct2, err := theLab.Appctl("node2", "dpctl/dump-conntrack", "zone="+zonePod)
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`src=198\.51\.100\.10,dst=10\.244\.2\.5,sport=`+cport+`,dport=8080.*mark=2,labels=0xc000020b`), ct2)
	ct1, err := theLab.Appctl("node1", "dpctl/dump-conntrack", "zone="+zoneService)
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`orig=\(src=198\.51\.100\.10,dst=192\.0\.2\.11,sport=`+cport+`,dport=30100\),reply=\(src=10\.244\.2\.5,dst=198\.51\.100\.10`), ct1)
}

func TestLoadBalancerIPRemoteBackend(t *testing.T) {
	addr := "203.0.113.110:80"
	r := waitOK(t, "tcp", addr)
	checkReply(t, r, addr, "echo-a")
	backendLogged(t, r)
}

func TestExternalIPRemoteBackend(t *testing.T) {
	addr := "203.0.113.111:80"
	r := waitOK(t, "tcp", addr)
	checkReply(t, r, addr, "echo-a")
	backendLogged(t, r)
}

// P2: the endpoint is on the ingress node itself.
func TestNodePortLocalBackend(t *testing.T) {
	addr := "192.0.2.11:30101"
	r := waitOK(t, "tcp", addr)
	checkReply(t, r, addr, "echo-c")
	assert.Equal(t, "node1", r.Node)
	backendLogged(t, r)
	_, cport, _ := strings.Cut(r.Local, ":")
	ct1, err := theLab.Appctl("node1", "dpctl/dump-conntrack", "zone="+zonePod)
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`src=198\.51\.100\.10,dst=10\.244\.1\.5,sport=`+cport+`,dport=8080.*mark=1`), ct1)
}

// UDP through every entry point: the reply datagram's source is the address the client sent to.
func TestUDP(t *testing.T) {
	for _, addr := range []string{"192.0.2.11:31100", "203.0.113.110:53", "203.0.113.111:53", "192.0.2.11:31101"} {
		t.Run(addr, func(t *testing.T) {
			r := waitOK(t, "udp", addr)
			checkReply(t, r, addr, "echo-a", "echo-c")
			backendLogged(t, r)
		})
	}
}

// Endpoints on two other nodes: every backend sees the client IP, and both are used.
func TestTwoRemoteBackends(t *testing.T) {
	addr := "192.0.2.11:30102"
	waitOK(t, "tcp", addr)
	seen := map[string]int{}
	for i := 0; i < 24; i++ {
		r, err := theLab.Request("", "tcp", addr)
		require.NoError(t, err, "request %d", i)
		checkReply(t, r, addr, "echo-a", "echo-b")
		seen[r.Pod+"@"+r.Node]++
	}
	t.Logf("backends: %v", seen)
	assert.Len(t, seen, 2, "24 connections with random source ports should reach both backends")
	assert.Subset(t, []string{"echo-a@node2", "echo-b@node3"}, keys(seen))
}

// A Service without the annotation gets no flows on any node; the NodePort stays the host's.
func TestPlainServiceUntouched(t *testing.T) {
	waitOK(t, "tcp", "192.0.2.11:30100") // the agents have synced
	for _, n := range theLab.Nodes {
		for _, br := range []string{"br-ex", "br-int"} {
			out, err := theLab.DumpFlows(n.Name, br)
			require.NoError(t, err)
			assert.NotContains(t, out, "tp_dst=30103", "%s %s has flows for the plain Service", n.Name, br)
			assert.NotContains(t, out, "tp_dst=31103", "%s %s has flows for the plain Service", n.Name, br)
		}
	}
	// Nothing listens on node1's host stack: the connection is refused, never DNATed to a pod.
	_, err := theLab.Request("", "tcp", "192.0.2.11:30103")
	assert.Error(t, err)
}

// Flows with a cookie the agent does not own survive full syncs (every 2 s here) and partial
// syncs (a Service change).
func TestForeignFlowsSurvive(t *testing.T) {
	waitOK(t, "tcp", "192.0.2.11:30100")
	foreign := map[string]string{
		"br-ex":  "cookie=0x1234,table=40,priority=1,tcp,tp_dst=9,actions=drop",
		"br-int": "cookie=0x1234,table=60,priority=1,ip,nw_dst=10.99.0.0/16,actions=drop",
	}
	for br, f := range foreign {
		_, err := theLab.Ofctl("node1", "-O", "OpenFlow15", "add-flow", br, f)
		require.NoError(t, err)
	}
	// A partial sync: a new Service appears, then goes away.
	extra := svc{name: "extra", annotated: true, nodePort: 30110, eps: []ep{echoB}}
	writeManifest(t, "extra.yaml", extra.yaml())
	waitOK(t, "tcp", "192.0.2.11:30110")
	writeManifest(t, "extra.yaml", "")
	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node1", "br-ex")
		if err != nil || strings.Contains(out, "tp_dst=30110") {
			return fmt.Errorf("extra's flows still present (%v)", err)
		}
		return nil
	}, 15*time.Second))
	time.Sleep(5 * time.Second) // two more full syncs
	for br := range foreign {
		out, err := theLab.DumpFlows("node1", br, "cookie=0x1234/-1")
		require.NoError(t, err)
		assert.Equal(t, 1, strings.Count(out, "cookie=0x1234"), "foreign flow on %s:\n%s", br, out)
	}
}

// snapshot is lab.Snapshot of node, failing the test on error.
func snapshot(t *testing.T, node string) map[string]lab.BridgeState {
	t.Helper()
	s, err := theLab.Snapshot(node)
	require.NoError(t, err)
	return s
}

// Removing the annotation, and deleting the Service, remove exactly that Service's flows and
// group on every node; nothing else changes.
func TestRemovalRemovesExactlyThatService(t *testing.T) {
	for _, how := range []string{"annotation-removed", "service-deleted"} {
		t.Run(how, func(t *testing.T) {
			s := svc{name: "gone-" + how[:3], annotated: true, nodePort: 30120, lbIP: "203.0.113.120", eps: []ep{echoA, echoB}}
			file := "gone.yaml"
			gone := []string{"tp_dst=30120", "tp_dst=31120", "nw_dst=203.0.113.120"}
			writeManifest(t, file, s.yaml())
			addr := "192.0.2.11:30120"
			checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a", "echo-b")
			checkReply(t, waitOK(t, "udp", "203.0.113.120:53"), "203.0.113.120:53", "echo-a", "echo-b")
			time.Sleep(3 * time.Second) // let every node settle (a full sync runs every 2 s)
			before := map[string]map[string]lab.BridgeState{}
			for _, n := range theLab.Nodes {
				before[n.Name] = snapshot(t, n.Name)
			}
			cookies, groups := before["node1"]["br-ex"].Owners(gone...)
			require.NotEmpty(t, cookies)
			require.NotEmpty(t, groups)

			if how == "annotation-removed" {
				s.annotated = false
				writeManifest(t, file, s.yaml())
			} else {
				writeManifest(t, file, "")
			}
			require.NoError(t, lab.WaitFor(func() error {
				for _, n := range theLab.Nodes {
					out, err := theLab.DumpFlows(n.Name, "br-ex")
					if err != nil {
						return err
					}
					if strings.Contains(out, "30120") || strings.Contains(out, "203.0.113.120") {
						return fmt.Errorf("%s still has the Service's flows", n.Name)
					}
				}
				return nil
			}, 15*time.Second))
			time.Sleep(3 * time.Second)
			for _, n := range theLab.Nodes {
				after := snapshot(t, n.Name)
				c, g := before[n.Name]["br-ex"].Owners(gone...)
				for _, br := range []string{"br-ex", "br-int"} {
					want := before[n.Name][br].Without(c, g)
					assert.Equal(t, want.Flows, after[br].Flows, "%s %s flows", n.Name, br)
					assert.Equal(t, want.Groups, after[br].Groups, "%s %s groups", n.Name, br)
				}
			}
			_, err := theLab.Request("", "tcp", addr)
			assert.Error(t, err, "the NodePort must not answer any more")
			// The other Services still work, without any outage.
			checkReply(t, okNow(t, "tcp", "192.0.2.11:30100"), "192.0.2.11:30100", "echo-a")
		})
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
