package main

import (
	"bytes"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// The path of a request is one line: over Geneve to a pod on another node, straight into br-int
// for a pod on the ingress node.
func TestDrawPath(t *testing.T) {
	for _, c := range []struct{ podNode, want string }{
		{"node2", "client -> node1 br-ex [DNAT 10.244.2.5:8080] => Geneve => node2 br-int -> echo-a; reply back"},
		{"node1", "client -> node1 br-ex [DNAT 10.244.2.5:8080] -> node1 br-int -> echo-a; reply back"},
	} {
		assert.Equal(t, c.want, drawPath("node1", c.podNode, "echo-a", "10.244.2.5:8080"))
	}
}

// The backends are a table by pod, with TCP, UDP and all requests (not Go map syntax).
func TestWriteBackends(t *testing.T) {
	var out bytes.Buffer
	writeBackends(&out, []hit{{"echo-b", "node3", "tcp"}, {"echo-a", "node2", "tcp"}, {"echo-a", "node2", "udp"}, {"echo-a", "node2", "tcp"}})
	assert.Equal(t, `BACKEND POD  POD NODE  TCP  UDP  REQUESTS
echo-a       node2     2    1    3
echo-b       node3     1    0    1
`, out.String())
}

// The demo's dual-stack copy of demo/web: IPv6 twins of its ClusterIP, LB IP and externalIP, an
// IPv6 EndpointSlice of the pods' IPv6 addresses beside the IPv4 one, the other objects as they
// were; and the IPv6 entry points are exactly the IPv6 addresses.
func TestDualStackCopy(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.CopyFS(dir, os.DirFS("../manifests/demo")))
	m, err := lab.LoadManifests(dir)
	require.NoError(t, err)
	l := &lab.Lab{Manifests: m, ManifestsDir: dir, Pods: []*lab.Pod{
		{Name: "echo-a", IP: netip.MustParseAddr("10.244.2.5"), IP6: netip.MustParseAddr("2001:db8:244:2::5")},
		{Name: "echo-b", IP: netip.MustParseAddr("10.244.3.5"), IP6: netip.MustParseAddr("2001:db8:244:3::5")},
		{Name: "echo-c", IP: netip.MustParseAddr("10.244.1.5"), IP6: netip.MustParseAddr("2001:db8:244:1::5")},
	}}
	svc, err := dualStack(l, m.Service("demo", "web"))
	require.NoError(t, err)
	got, err := lab.LoadManifests(dir)
	require.NoError(t, err)
	assert.Len(t, got.Services, len(m.Services))
	web := got.Service("demo", "web")
	require.NotNil(t, web)
	assert.Equal(t, corev1.IPFamilyPolicyPreferDualStack, *web.Spec.IPFamilyPolicy)
	assert.Equal(t, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, web.Spec.IPFamilies)
	assert.Equal(t, []string{"10.96.0.80", "2001:db8:96::80"}, web.Spec.ClusterIPs)
	assert.Equal(t, []string{"203.0.113.101", "2001:db8:0:113::101"}, web.Spec.ExternalIPs)
	assert.Equal(t, "true", web.Annotations["ovs-srcip.io/preserve-source-ip"])
	require.Len(t, web.Status.LoadBalancer.Ingress, 2)
	assert.Equal(t, "2001:db8:0:113::100", web.Status.LoadBalancer.Ingress[1].IP)
	var v6 []string
	for _, es := range got.EndpointSlices {
		if es.AddressType == discoveryv1.AddressTypeIPv6 {
			assert.Equal(t, "web", es.Labels[discoveryv1.LabelServiceName])
			for _, ep := range es.Endpoints {
				v6 = append(v6, ep.Addresses...)
			}
		}
	}
	assert.ElementsMatch(t, []string{"2001:db8:244:1::5", "2001:db8:244:2::5", "2001:db8:244:3::5"}, v6)
	assert.Len(t, got.EndpointSlices, len(m.EndpointSlices)+1)
	for _, e := range entryPoints(svc, "2001:db8:0:2::11", true) {
		assert.True(t, strings.HasPrefix(e.addr, "[2001:db8:"), e.addr)
	}
	assert.Len(t, entryPoints(svc, "2001:db8:0:2::11", true), 6, "NodePort, LB IP, externalIP per port")
	assert.Len(t, entryPoints(svc, "192.0.2.11", false), 6)
}
