package agent

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestReport: the report names Services (opted in or why not), refused entry points, endpoints
// with pods, nodes and bucket ids, and the applied flow sets; an annotation value other than
// "true" is an Event (once) and a reason in the report.
func TestReport(t *testing.T) {
	f := newFixture(t)
	f.seed(f.r, 1)
	f.r.OnEndpointSlice(nil, func() *discoveryv1.EndpointSlice {
		s := makeSlice("ns1", "svc0", "svc0-a", ep("10.244.1.5", "node1"), ep("10.244.2.1", "node2"))
		s.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "ns1", Name: "web-0"}
		return s
	}())
	f.r.OnService(nil, makeService("ns1", "yes", 30100, func(s *corev1.Service) {
		s.Annotations[AnnotationPreserveSourceIP] = "yes"
	}))
	f.r.OnService(nil, makeService("ns1", "local", 30101, func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}))
	f.r.OnService(nil, makeService("ns1", "lb", 30102, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.0.2"}} // node2's address
	}))
	require.NoError(t, f.sync())
	require.NoError(t, f.sync())

	rep := f.r.Report()
	assert.Equal(t, thisNode, rep.Node)
	assert.True(t, rep.FullSyncDone)
	byName := map[string]ServiceReport{}
	for _, s := range rep.Services {
		byName[s.Name] = s
	}
	require.Len(t, byName, 4)
	assert.True(t, byName["svc0"].OptedIn)
	assert.False(t, byName["yes"].OptedIn)
	assert.Contains(t, byName["yes"].Reason, `is "yes", not "true"`)
	assert.False(t, byName["local"].OptedIn)
	assert.Contains(t, byName["local"].Reason, "externalTrafficPolicy is Local")
	require.Len(t, byName["lb"].Refused, 1)
	assert.Equal(t, "192.168.0.2:80/TCP", byName["lb"].Refused[0].Entry)
	assert.Contains(t, byName["lb"].Refused[0].Reason, "address of Node node2")

	p := byName["svc0"].Ports[0]
	assert.Equal(t, "http", p.PortName)
	assert.NotEmpty(t, p.Cookie)
	assert.Equal(t, 2, p.Buckets)
	assert.Contains(t, p.EntryPoints, "192.168.0.1:30000/TCP")
	var pods []string
	for _, e := range p.Endpoints {
		pods = append(pods, e.Pod+"@"+e.Node)
		assert.NotZero(t, e.Bucket)
	}
	assert.ElementsMatch(t, []string{"ns1/web-0@node1", "@node2"}, pods)

	kinds := map[string]bool{}
	for _, fs := range rep.FlowSets {
		kinds[fs.Kind] = true
		if fs.Kind == "service-port" && fs.Object == "ns1/svc0 http/TCP" {
			assert.Equal(t, p.Cookie, fs.Cookie)
		}
	}
	assert.True(t, kinds["ex-base"] && kinds["int-base"] && kinds["pod"] && kinds["node"], "%v", kinds)
	assert.Len(t, rep.Nodes, 2)
	require.Len(t, rep.Pods, 1)
	assert.Equal(t, "web-0", rep.Pods[0].Name)

	n := 0
	for _, m := range f.events.msgs {
		if m == ReasonInvalid+`: annotation ovs-srcip.io/preserve-source-ip is "yes", not "true": the Service is not opted in (the value must be exactly "true")` {
			n++
		}
	}
	assert.Equal(t, 1, n, "one Event for the annotation value, not one per sync: %v", f.events.msgs)
}

// TestReportFlags: the report carries the flags that change the flows (srcipctl diff renders
// with them): CIDRs masked, the NodePort range (the default when not set), the manifests dir.
func TestReportFlags(t *testing.T) {
	f := newFixture(t)
	rep := f.r.Report()
	require.NotNil(t, rep.Flags)
	assert.Equal(t, FlagsReport{NodePortAddresses: []string{}, ExternalIPCIDRs: []string{}, EgressClusterCIDRs: []string{},
		PreserveSourceIP: "annotated", ServiceNodePortRange: "30000-32767"}, *rep.Flags)

	r := f.newReconcilerWith(func(c *ReconcilerConfig) {
		c.Manifests = "/m"
		c.NodePortCIDRs, _ = ParseCIDRs([]string{"192.168.0.0/24"})
		c.ExternalIPCIDRs, _ = ParseCIDRs([]string{"203.0.113.7/24"})
		c.EgressClusterCIDRs, _ = ParseCIDRs([]string{"10.96.0.0/12"})
		c.PreserveSourceIP = PreserveAll
		c.NodePortRange = [2]uint16{20000, 20100}
	})
	assert.Equal(t, FlagsReport{Manifests: "/m", NodePortAddresses: []string{"192.168.0.0/24"}, ExternalIPCIDRs: []string{"203.0.113.0/24"},
		EgressClusterCIDRs: []string{"10.96.0.0/12"}, PreserveSourceIP: "all", ServiceNodePortRange: "20000-20100"}, *r.Report().Flags)
}

func TestParsePortRange(t *testing.T) {
	for _, c := range []struct {
		in   string
		want [2]uint16
		err  string
	}{
		{"", [2]uint16{}, ""},
		{"30000-32767", [2]uint16{30000, 32767}, ""},
		{" 1-1 ", [2]uint16{1, 1}, ""},
		{"30000", [2]uint16{}, "want FIRST-LAST"},
		{"0-10", [2]uint16{}, "want 1 <= FIRST <= LAST"},
		{"20-10", [2]uint16{}, "want 1 <= FIRST <= LAST"},
		{"1-70000", [2]uint16{}, "out of range"},
	} {
		got, err := ParsePortRange(c.in)
		if c.err != "" {
			assert.ErrorContains(t, err, c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got, c.in)
		if got != [2]uint16{} {
			back, err := ParsePortRange(FormatPortRange(got))
			require.NoError(t, err)
			assert.Equal(t, got, back)
		}
	}
}
