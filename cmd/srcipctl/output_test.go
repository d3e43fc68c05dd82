package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// golden compares got with testdata/name (rewritten under -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/srcipctl -update")
	assert.Equal(t, string(want), got, "testdata/%s (go test ./cmd/srcipctl -run %s -update rewrites it)", name, t.Name())
}

// demoReport is the report of node1 of the demo's manifests, as its agent (the lab's flags:
// --external-ip-cidrs=203.0.113.0/24) makes it after its first full sync, at a fixed time.
func demoReport(t *testing.T, extra ...runtime.Object) *agent.Report {
	objs, err := agent.ReadManifestDir("../../test/manifests/demo")
	require.NoError(t, err)
	objs = append(objs, extra...)
	cidrs, err := agent.ParseCIDRs([]string{"203.0.113.0/24"})
	require.NoError(t, err)
	_, rep, err := agent.Desired(context.Background(), "node1", objs, agent.DesiredOptions{ExternalIPCIDRs: cidrs})
	require.NoError(t, err)
	now := time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)
	rep.Time, rep.LastSync, rep.LastFullSync = now, now.Add(-30*time.Second), now.Add(-30*time.Second)
	return &rep
}

// The default get services fits 100 columns (the first entry point and +N, the number of
// endpoints, the notes cut); -o wide prints everything.
func TestGetServicesGolden(t *testing.T) {
	typo := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "typo",
		Annotations: map[string]string{agent.AnnotationPreserveSourceIP: "yes"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30092}}}}
	local := typo.DeepCopy()
	local.Name, local.Annotations[agent.AnnotationPreserveSourceIP] = "local", "true"
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	rep := demoReport(t, typo, local)
	var narrow, wide bytes.Buffer
	writeServices(&narrow, rep, false)
	writeServices(&wide, rep, true)
	golden(t, "get-services.golden", narrow.String())
	golden(t, "get-services-wide.golden", wide.String())
	for _, l := range strings.Split(strings.TrimRight(narrow.String(), "\n"), "\n") {
		assert.LessOrEqual(t, len(l), narrowWidth, l)
	}
	assert.Contains(t, wide.String(), "BUCKETS")
	assert.NotContains(t, narrow.String(), "BUCKETS")
}

// writeTable cuts only the last column, to the width, and keeps at least 12 characters of it.
func TestWriteTable(t *testing.T) {
	rows := [][]string{{"A", "BB", "NOTES"}, {"aaaa", "b", strings.Repeat("x", 40)}}
	var out bytes.Buffer
	assert.Equal(t, 1, writeTable(&out, rows, 30))
	assert.Equal(t, "A     BB  NOTES\naaaa  b   xxxxxxxxxxxxxxxxx...\n", out.String())
	out.Reset()
	assert.Equal(t, 0, writeTable(&out, rows, 0))
	assert.Equal(t, "A     BB  NOTES\naaaa  b   "+strings.Repeat("x", 40)+"\n", out.String())
	out.Reset()
	writeTable(&out, rows, 5)
	assert.Equal(t, "A     BB  NOTES\naaaa  b   xxxxxxxxx...\n", out.String())
}

// status prints the per Service port counters of /metrics under each port, "counters: none" for
// a port the scrape does not have, and no counter line without a scrape. testdata/metrics-node1.txt
// is the srcip_agent_service_ lines of node1's /metrics on a kept demo lab (make demo
// DEMO_ARGS=--keep) after its requests, with demo/empty (NodePort 30090, no endpoints) added to
// the lab's manifests and one TCP connection attempt to it (a SYN and two retransmits).
func TestStatusCountersGolden(t *testing.T) {
	f, err := os.Open("testdata/metrics-node1.txt")
	require.NoError(t, err)
	defer f.Close()
	counters, err := parseServiceCounters(f)
	require.NoError(t, err)
	require.Contains(t, counters, counterKey{"demo", "web", "http", "TCP"})
	empty := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "empty",
		Annotations: map[string]string{agent.AnnotationPreserveSourceIP: "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "nothing"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30090}}}}
	unscraped := empty.DeepCopy()
	unscraped.Name, unscraped.Spec.Ports[0].NodePort = "new", 30091
	var out bytes.Buffer
	rep := demoReport(t, empty, unscraped)
	rep.Version = "v0.1.0 (commit d045c63, go1.26.8)" // the agent's, from its status socket
	writeStatus(&out, rep, counters)
	golden(t, "status.golden", out.String())
	assert.Contains(t, out.String(), "  agent version:  v0.1.0 (commit d045c63, go1.26.8)\n")
	assert.Contains(t, out.String(), "counters: 3 packets, 0 new connections, dropped packets: no-endpoints 3")
	assert.Contains(t, out.String(), "counters: none")

	out.Reset()
	writeStatus(&out, demoReport(t), nil)
	assert.NotContains(t, out.String(), "counters:")
}

func TestParseServiceCounters(t *testing.T) {
	got, err := parseServiceCounters(strings.NewReader(`# TYPE srcip_agent_service_packets_total counter
srcip_agent_service_packets_total{namespace="demo",port="http",protocol="TCP",service="web"} 16
# TYPE srcip_agent_service_new_connections_total counter
srcip_agent_service_new_connections_total{namespace="demo",port="http",protocol="TCP",service="web"} 9
# TYPE srcip_agent_service_dropped_packets_total counter
srcip_agent_service_dropped_packets_total{namespace="demo",port="http",protocol="TCP",reason="outside-source-ranges",service="web"} 2
srcip_agent_service_dropped_packets_total{namespace="demo",port="http",protocol="TCP",reason="no-endpoints",service="web"} 1
# TYPE other_total counter
other_total 3
`))
	require.NoError(t, err)
	require.Len(t, got, 1)
	c := got[counterKey{"demo", "web", "http", "TCP"}]
	require.NotNil(t, c)
	assert.Equal(t, "16 packets, 9 new connections, dropped packets: no-endpoints 1, outside-source-ranges 2", c.String())
	_, err = parseServiceCounters(strings.NewReader("not { metrics"))
	assert.Error(t, err)
}

// groups maps the counters of dump-group-stats (by bucket position) through the bucket order of
// dump-groups to bucket ids and, from the agent, to endpoints, pods and nodes; a group whose
// description was not read is printed by position; an empty group says it drops.
func TestGroupsGolden(t *testing.T) {
	rep := demoReport(t)
	n := newNames(rep)
	var http *agent.ServicePortReport
	for i := range rep.Services[0].Ports {
		if p := &rep.Services[0].Ports[i]; p.Protocol == "TCP" {
			http = p
		}
	}
	require.NotNil(t, http)
	require.Len(t, http.Endpoints, 3)
	// OVS's order of the buckets need not be the agent's: dump-groups says which is which.
	order := []ofctl.GroupBucket{
		{ID: http.Endpoints[2].Bucket, NATDst: http.Endpoints[2].Addr},
		{ID: http.Endpoints[0].Bucket, NATDst: http.Endpoints[0].Addr},
		{ID: http.Endpoints[1].Bucket, NATDst: http.Endpoints[1].Addr},
	}
	stats := []ofctl.GroupStats{
		{ID: http.Group, Packets: 27, Bytes: 1998, Buckets: []ofctl.BucketCounter{{Packets: 10, Bytes: 740}, {Packets: 9, Bytes: 666}, {Packets: 8, Bytes: 592}}},
		{ID: 1543503873, Packets: 2, Bytes: 148, Buckets: []ofctl.BucketCounter{{Packets: 2, Bytes: 148}}},
		{ID: 1543503999},
		{ID: 7, Buckets: []ofctl.BucketCounter{{Packets: 1, Bytes: 1}}}, // not the agent's
	}
	var out bytes.Buffer
	writeGroups(&out, flows.BrEx, stats, map[uint32][]ofctl.GroupBucket{http.Group: order}, n)
	golden(t, "groups.golden", out.String())
	assert.Regexp(t, `\s`+http.Endpoints[2].Addr+`\s+demo/echo-a\s+node2\s+10\s+740`, out.String())
	assert.NotContains(t, out.String(), "group 7 ")

	out.Reset()
	writeGroups(&out, flows.BrInt, stats[3:], nil, nil)
	assert.Equal(t, "br-int: no group of the agent\n", out.String())
}
