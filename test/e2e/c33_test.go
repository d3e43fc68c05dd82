package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// bigService renders the opted-in Service e2e/big (TCP NodePort 30380) with n endpoints that are
// fake addresses in node2's and node3's pod CIDRs (10.244.{2,3}.10-209), spread over EndpointSlices
// of 400 endpoints with target ports 8080, 8081, ... (no pod answers: only the group is checked).
func bigService(n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Service\nmetadata:\n  name: big\n  namespace: e2e\n")
	b.WriteString("  annotations:\n    ovs-srcip.io/preserve-source-ip: \"true\"\n")
	b.WriteString("spec:\n  type: NodePort\n  externalTrafficPolicy: Cluster\n")
	b.WriteString("  ports:\n  - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: 30380}\n---\n")
	for s := 0; s*400 < n; s++ {
		fmt.Fprintf(&b, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: big-s%d\n  namespace: e2e\n", s)
		b.WriteString("  labels: {kubernetes.io/service-name: big}\naddressType: IPv4\n")
		fmt.Fprintf(&b, "ports:\n- {name: http, protocol: TCP, port: %d}\nendpoints:\n", 8080+s)
		for i := s * 400; i < min(n, (s+1)*400); i++ {
			j := i % 400
			node := 2 + j%2
			fmt.Fprintf(&b, "- addresses: [10.244.%d.%d]\n  nodeName: node%d\n  conditions: {ready: true, serving: true, terminating: false}\n", node, 10+j/2, node)
		}
		b.WriteString("---\n")
	}
	return b.String()
}

var groupRE = regexp.MustCompile(`group:(\d+)`)

// groupBuckets returns the number of buckets of the select group that node's br-ex sends new
// connections to NodePort port to (dump-group-stats: dump-groups cannot print a group of more
// than ~744 such buckets, docs/lab-facts.md#fact-9).
func groupBuckets(node string, port int) (int, error) {
	out, err := theLab.DumpFlows(node, "br-ex", fmt.Sprintf("table=41,tcp,tp_dst=%d", port))
	if err != nil {
		return 0, err
	}
	m := groupRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("%s: no group flow for port %d", node, port)
	}
	g, err := theLab.Ofctl(node, "-O", "OpenFlow15", "dump-group-stats", "br-ex", "group_id="+m[1])
	if err != nil {
		return 0, err
	}
	return strings.Count(g, ",bucket"), nil
}

func waitBuckets(t *testing.T, node string, port, want int) {
	t.Helper()
	require.NoError(t, lab.WaitFor(func() error {
		n, err := groupBuckets(node, port)
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("%s: %d buckets, want %d", node, n, want)
		}
		return nil
	}, 30*time.Second))
}

// metrics returns node's agent /metrics (127.0.0.1:9464 in the node's netns).
func metrics(t *testing.T, node, path string) string {
	t.Helper()
	out, err := theLab.Exec(node, "curl", "-sS", "--max-time", "5", "http://127.0.0.1:9464"+path)
	require.NoError(t, err, out)
	return out
}

// Field case C33 (docs/field-cases.md#c33): a Service with 1,200 endpoints gets one select group
// with all 1,200 buckets on every node (written as add_or_mod + insert_bucket in one bundle), and
// another Service keeps working and follows its endpoint changes meanwhile. Then node1's agent
// runs with --group-buckets-per-message=2000, so that OVS rejects big's group message (88 KiB,
// OFPGMFC_BAD_BUCKET) as an agent without large-group support would: the change of small in the
// same sync is still applied (isolation), big keeps its installed group, node1 reports the
// rejection (Event log line, metric) and stays ready.
func TestC33LargeGroupAndIsolation(t *testing.T) {
	const (
		file = "c33.yaml"
		n    = 1200
	)
	small := func(e ep) string {
		return rawService("small", true, "NodePort", nil, "", []pspec{{"http", "TCP", 80, 30381}}, []ep{e})
	}
	addr := "192.0.2.11:30381"
	defer removeAndWait(t, file, "tp_dst=30380", "tp_dst=30381")
	writeManifest(t, file, bigService(n)+small(echoA))
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	for _, node := range []string{"node1", "node2", "node3"} {
		waitBuckets(t, node, 30380, n)
	}
	// small follows an endpoint change while big exists.
	writeManifest(t, file, bigService(n)+small(echoB))
	require.NoError(t, lab.WaitFor(func() error {
		r, err := theLab.Request("", "tcp", addr)
		if err != nil {
			return err
		}
		if r.Pod != "echo-b" {
			return fmt.Errorf("answered by %s", r.Pod)
		}
		return nil
	}, 20*time.Second))
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-b")
	waitBuckets(t, "node1", 30380, n)

	// node1 now sends big's group in one message, which OVS rejects.
	require.NoError(t, theLab.SetAgentExtraArgs("node1", "--group-buckets-per-message=2000"))
	defer func() {
		require.NoError(t, theLab.SetAgentExtraArgs("node1"))
		require.NoError(t, theLab.RestartAgent("node1"))
	}()
	off := logSize(t, "node1")
	require.NoError(t, theLab.RestartAgent("node1"))
	require.NoError(t, lab.WaitFor(func() error {
		if !strings.Contains(logSince(t, "node1", off), "Full sync done") {
			return fmt.Errorf("node1: no full sync yet after the restart")
		}
		return nil
	}, 20*time.Second))
	// One change of both Services, i.e. one bundle per node: big gets one more endpoint, small
	// goes back to echo-a.
	writeManifest(t, file, bigService(n+1)+small(echoA))
	require.NoError(t, lab.WaitFor(func() error {
		r, err := theLab.Request("", "tcp", addr)
		if err != nil {
			return err
		}
		if r.Pod != "echo-a" {
			return fmt.Errorf("answered by %s: node1 did not apply small's change", r.Pod)
		}
		return nil
	}, 20*time.Second))
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	waitBuckets(t, "node2", 30380, n+1) // the other nodes take big's change
	c, err := groupBuckets("node1", 30380)
	require.NoError(t, err)
	assert.Equal(t, n, c, "node1 keeps big's installed group")
	// The manifest source delivers the two Services one by one, so small's change may be applied in
	// a sync before the one that tries big's: wait for big's rejection (bounded).
	rejected := regexp.MustCompile(`"Warning".*object="e2e/big".*reason="SourceIPRejected"`)
	require.NoError(t, lab.WaitFor(func() error {
		if log := logSince(t, "node1", off); !strings.Contains(log, "OFPGMFC_BAD_BUCKET") || !rejected.MatchString(log) {
			return fmt.Errorf("node1 has not reported big's rejection yet")
		}
		return nil
	}, 10*time.Second))
	require.NoError(t, lab.WaitFor(func() error {
		m := metrics(t, "node1", "/metrics")
		if !strings.Contains(m, "srcip_agent_rejected_flow_sets 1\n") || !strings.Contains(m, `srcip_agent_rejected_flow_sets_total{kind="service-port"} 1`) {
			return fmt.Errorf("node1's rejection metrics not set yet")
		}
		return nil
	}, 10*time.Second))
	assert.Equal(t, "ok", strings.TrimSpace(metrics(t, "node1", "/readyz")), "node1 stays ready")
	// No retry storm: over 4 s (two full syncs) big is tried at most once per full sync.
	before := strings.Count(logSince(t, "node1", off), "Open vSwitch rejected the bundle")
	time.Sleep(4 * time.Second)
	tries := strings.Count(logSince(t, "node1", off), "Open vSwitch rejected the bundle") - before
	assert.LessOrEqual(t, tries, 3, "retries of the rejected flow set in 4 s")
	t.Logf("node1 retried the rejected flow set %d times in 4 s (full syncs every 2 s)", tries)
}
