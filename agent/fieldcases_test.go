package agent

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// C34: a Service port with an endpoint outside every node's pod CIDRs (a hostNetwork endpoint
// at a node address) is declined - no entry flow, no group - with a SourceIPDeclined Event and
// the declined_service_ports gauge, whether all its endpoints are such or only some; it is served
// again when the endpoint goes away.
func TestHostNetworkEndpointDeclinesPort(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	f.r.OnService(nil, makeService("ns1", "web", 30400))
	pods := makeSlice("ns1", "web", "web-a", ep("10.244.2.5", "node2"))
	f.r.OnEndpointSlice(nil, pods)
	require.NoError(t, f.sync())
	require.Contains(t, f.flowText(), "tp_dst=30400")
	groups := len(f.r.Applied(flows.BrEx)[svcKey("web")].Groups)
	require.Equal(t, 1, groups)

	for _, tc := range []struct {
		name string
		eps  []string
	}{{"mixed", []string{"10.244.2.5", "192.168.0.2"}}, {"only hostNetwork", []string{"192.168.0.2"}}} {
		f.events.msgs = nil
		var sl = makeSlice("ns1", "web", "web-a")
		for _, ip := range tc.eps {
			sl.Endpoints = append(sl.Endpoints, ep(ip, "node2"))
		}
		f.r.OnEndpointSlice(nil, sl)
		require.NoError(t, f.sync(), tc.name)
		assert.NotContains(t, f.flowText(), "tp_dst=30400", tc.name)
		a := f.r.Applied(flows.BrEx)[svcKey("web")]
		assert.Empty(t, a.Groups, tc.name)
		assert.Empty(t, a.EntryPoints, tc.name)
		assert.Equal(t, 1.0, testutil.ToFloat64(f.r.metrics.DeclinedServicePorts), tc.name)
		if tc.name == "mixed" {
			ev := strings.Join(f.events.msgs, "\n")
			assert.Contains(t, ev, "SourceIPDeclined: port http/TCP declined: 1 of 2 endpoint(s) outside every node's pod CIDRs (hostNetwork?): 192.168.0.2:8080", tc.name)
		}
		// srcipctl's report names the flow set's own reason.
		var declined []string
		for _, sr := range f.r.Report().Services {
			for _, pr := range sr.Ports {
				if pr.Declined != "" {
					declined = append(declined, pr.Declined)
				}
			}
		}
		require.Len(t, declined, 1, tc.name)
		assert.Contains(t, declined[0], "endpoint(s) outside every node's pod CIDRs (hostNetwork?): ", tc.name)
		assert.Contains(t, declined[0], "192.168.0.2:8080 (see the SourceIPDeclined Event)", tc.name)
		n := f.bundles()
		f.r.RequestFullSync()
		require.NoError(t, f.sync())
		assert.Equal(t, n, f.bundles(), "a full sync finds nothing to do: %s", tc.name)
	}

	f.r.OnEndpointSlice(nil, pods)
	require.NoError(t, f.sync())
	assert.Contains(t, f.flowText(), "tp_dst=30400")
	assert.Equal(t, 0.0, testutil.ToFloat64(f.r.metrics.DeclinedServicePorts))
}

// C32: loadBalancerSourceRanges become nw_src flows on the LoadBalancer IP (not on the NodePort),
// a change is picked up by a partial sync, malformed ranges give an Event and deny all, and
// removing the field lets everyone in.
func TestLoadBalancerSourceRanges(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	svc := makeService("ns1", "web", 30410, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.10/32"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.100"}}
	})
	f.r.OnService(nil, svc)
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "web", "web-a", ep("10.244.2.5", "node2")))
	require.NoError(t, f.sync())
	txt := f.flowText()
	assert.Contains(t, txt, "nw_src=203.0.113.10/32,nw_dst=198.51.100.100,tp_dst=80")
	assert.Contains(t, txt, "priority=95,tcp,ct_state=+trk+new,nw_dst=198.51.100.100,tp_dst=80")
	assert.NotContains(t, txt, "nw_src=203.0.113.10/32,nw_dst=192.168.0.1", "NodePorts are not filtered")

	set := func(ranges ...string) {
		t.Helper()
		next := svc.DeepCopy()
		next.Spec.LoadBalancerSourceRanges = ranges
		f.r.OnService(svc, next)
		svc = next
		require.NoError(t, f.sync())
	}
	set("203.0.113.0/24")
	assert.Contains(t, f.flowText(), "nw_src=203.0.113.0/24,nw_dst=198.51.100.100")
	assert.NotContains(t, f.flowText(), "nw_src=203.0.113.10/32")

	f.events.msgs = nil
	set("203.0.113.0/33")
	assert.NotContains(t, f.flowText(), "nw_src=203.")
	assert.Contains(t, f.flowText(), "priority=95,tcp,ct_state=+trk+new,nw_dst=198.51.100.100,tp_dst=80", "deny all, never allow all")
	ev := strings.Join(f.events.msgs, "\n")
	assert.Contains(t, ev, `SourceIPInvalid: spec.loadBalancerSourceRanges "203.0.113.0/33" is not a CIDR`)
	assert.Contains(t, ev, "refused from every client")

	set()
	assert.NotContains(t, f.flowText(), "nw_src=203.")
	assert.NotContains(t, f.flowText(), "priority=95")
}
