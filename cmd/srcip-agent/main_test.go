package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2/ktesting"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
)

const smokeManifest = `apiVersion: v1
kind: Node
metadata: {name: node1}
spec: {podCIDRs: [10.244.1.0/24]}
status: {addresses: [{type: InternalIP, address: 192.168.0.1}]}
---
apiVersion: v1
kind: Node
metadata: {name: node2}
spec: {podCIDRs: [10.244.2.0/24]}
status: {addresses: [{type: InternalIP, address: 192.168.0.2}]}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  annotations: {ovs-srcip.io/preserve-source-ip: "true"}
spec:
  type: NodePort
  ports: [{name: http, port: 80, nodePort: 30080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-a, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: [{addresses: [10.244.2.5], nodeName: node2}]
ports: [{name: http, port: 8080}]
`

// TestAgentOnDummyOVS runs the agent as the lab does (manifests, private OVS with the dummy
// datapath), stops it, and restarts it: the flows stay and the restart changes nothing.
func TestAgentOnDummyOVS(t *testing.T) {
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br-ex", "eth0")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cluster.yaml"), []byte(smokeManifest), 0o644))
	o := options{
		nodeName: "node1", manifests: dir, ovsdb: sb.Endpoint(), ovsRunDir: sb.RunDir,
		bridgeEx: "br-ex", bridgeInt: "br-int", uplink: "eth0", genevePort: 6081,
		fullSyncPeriod: time.Minute, metricsAddr: "0", openflow: "native",
		// The port-block pool as the flags' defaults give it (run parses it).
		egressPortRange: "1024-65535", egressPortBlock: agent.DefaultPortPool.Size, egressPortQuar: agent.DefaultPortPool.Quarantine,
	}
	ex := ofctl.NewOpenFlow("br-ex", ofctl.MgmtTarget(sb.RunDir, "br-ex"))
	in := ofctl.NewOpenFlow("br-int", ofctl.MgmtTarget(sb.RunDir, "br-int"))

	start := func() (context.CancelFunc, chan error) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- run(ctx, o) }()
		return cancel, done
	}
	stop := func(cancel context.CancelFunc, done chan error) {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("agent did not stop")
		}
	}
	// The bridges' flows and groups as text, without counters and ages, sorted: two equal dumps
	// mean the same flows (match, priority, actions, cookie) and the same groups.
	dumps := func() string {
		var all []string
		for _, of := range []*ofctl.OpenFlow{ex, in} {
			f, err := of.DumpFlows(context.Background(), "")
			require.NoError(t, err)
			g, err := of.DumpGroups(context.Background())
			require.NoError(t, err)
			for _, l := range strings.Split(f+"\n"+g, "\n") {
				if strings.Contains(l, "cookie=") || strings.Contains(l, "group_id=") {
					all = append(all, of.Bridge+" "+strings.TrimSpace(statsRE.ReplaceAllString(l, "")))
				}
			}
		}
		sort.Strings(all)
		return strings.Join(all, "\n")
	}

	cancel, done := start()
	// The Service's flows appear; an agent that exits first fails the test with its error.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the agent exited before writing the Service's flows: %v", err)
		default:
		}
		if out, err := ex.DumpFlows(context.Background(), ""); err == nil && strings.Contains(out, "tp_dst=30080") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no flow with tp_dst=30080 on br-ex after 30s")
		}
	}
	time.Sleep(500 * time.Millisecond) // let the OVSDB-triggered full syncs settle
	// The status socket in the run directory answers /status (srcipctl status) and /trace.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(sb.RunDir, statusSocketName))
	}}}
	resp, err := hc.Get("http://agent/status")
	require.NoError(t, err)
	var rep agent.Report
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rep))
	resp.Body.Close()
	assert.Equal(t, "node1", rep.Node)
	require.Len(t, rep.Services, 1)
	assert.True(t, rep.Services[0].OptedIn)
	assert.Equal(t, []string{"192.168.0.1:30080/TCP"}, rep.Services[0].Ports[0].EntryPoints)
	resp, err = hc.Get("http://agent/trace?bridge=br-ex&flow=" + url.QueryEscape("in_port=1,tcp,nw_src=198.51.100.10,nw_dst=192.168.0.1,tcp_src=1,tcp_dst=30080"))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(b), "Datapath actions")
	before := dumps()
	require.Contains(t, before, "br-ex ")
	require.Contains(t, before, "br-int ")
	require.Contains(t, before, "group_id=")
	snap := time.Now()
	stop(cancel, done)
	assert.Equal(t, before, dumps(), "flows and groups are left in place after stop")

	cancel, done = start()
	time.Sleep(2 * time.Second)
	assert.Equal(t, before, dumps(), "a restart leaves the same flows and groups")
	// ... and does not re-add them: every flow is older than the time since the first dump.
	for _, of := range []*ofctl.OpenFlow{ex, in} {
		f, err := of.DumpFlows(context.Background(), "")
		require.NoError(t, err)
		for _, m := range durationRE.FindAllStringSubmatch(f, -1) {
			d, err := strconv.ParseFloat(m[1], 64)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, d, time.Since(snap).Seconds()-0.5, "%s: a flow was re-added by the restart", of.Bridge)
		}
	}
	stop(cancel, done)
}

// statsRE matches the counters and ages of a dump-flows line.
var statsRE = regexp.MustCompile(`(duration|n_packets|n_bytes|idle_age|hard_age)=[^,]*, ?`)

var durationRE = regexp.MustCompile(`duration=([0-9.]+)s`)

// TestHelpHidesKlogFlags: --help shows -v and --vmodule of klog's flags, not log_dir & co.
func TestHelpHidesKlogFlags(t *testing.T) {
	cmd := newCommand()
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	require.NoError(t, cmd.Execute())
	assert.Contains(t, out.String(), "--vmodule")
	assert.NotContains(t, out.String(), "--log_")
	assert.NotContains(t, out.String(), "--skip_")
	assert.NotContains(t, out.String(), "logtostderr")
	require.NoError(t, cmd.Flags().Set("log_file_max_size", "10"), "hidden flags still work")
}

// --preserve-source-ip: annotated by default, and a value other than annotated or all stops the
// agent before it connects to anything.
func TestPreserveSourceIPFlag(t *testing.T) {
	cmd := newCommand()
	f := cmd.Flags().Lookup("preserve-source-ip")
	require.NotNil(t, f)
	assert.Equal(t, "annotated", f.DefValue)
	err := run(context.Background(), options{nodeName: "node1", openflow: "native", preserveSourceIP: "everything", nodePortRange: "30000-32767"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--preserve-source-ip: "everything": want annotated or all`)
}
