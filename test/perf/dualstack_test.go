package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Dual-stack Nodes carry both families, the IPv6 ones second; every IPv6 endpoint lies in its
// node's IPv6 pod CIDR, beside its IPv4 twin on the same node.
func TestDualStackObjects(t *testing.T) {
	n := nodeObj(1, true)
	assert.Equal(t, []string{"10.244.1.0/24", "2001:db8:244:1::/64"}, n.Spec.PodCIDRs)
	assert.Equal(t, "10.244.1.0/24", n.Spec.PodCIDR)
	var ips []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ips = append(ips, a.Address)
		}
	}
	assert.Equal(t, []string{"192.0.2.11", "2001:db8:0:2::11"}, ips)
	assert.Equal(t, []string{"10.244.1.0/24"}, nodeObj(1, false).Spec.PodCIDRs)

	cl := &cluster{nodes: 50, endpoints: 10}
	s4, s6 := cl.slice(123, "svc-00123", 8080), cl.slice6(123, "svc-00123", 8080)
	assert.Equal(t, discoveryv1.AddressTypeIPv6, s6.AddressType)
	assert.Equal(t, "svc-00123-perf6", s6.Name)
	assert.NotEqual(t, s4.Name, s6.Name)
	require.Len(t, s6.Endpoints, 10)
	for j, ep := range s6.Endpoints {
		assert.Equal(t, *s4.Endpoints[j].NodeName, *ep.NodeName)
		var k int
		_, err := fmt.Sscanf(*ep.NodeName, "node%d", &k)
		require.NoError(t, err)
		cidr := netip.MustParsePrefix(nodeObj(k, true).Spec.PodCIDRs[1])
		ip := netip.MustParseAddr(ep.Addresses[0])
		assert.True(t, cidr.Contains(ip) && ip != cidr.Addr(), "%s in %s", ip, cidr)
	}
}

func TestMetricSum(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP srcip_agent_bundle_lines_total x\n"+
			"srcip_agent_bundle_lines_total{bridge=\"br-ex\"} 30000\n"+
			"srcip_agent_bundle_lines_total{bridge=\"br-int\"} 598\n"+
			"srcip_agent_bundle_lines_total_other 7\n"+
			"srcip_agent_declined_service_ports 0\n")
	}))
	defer srv.Close()
	b := &bench{metrics: strings.TrimPrefix(srv.URL, "http://")}
	v, err := b.metricSum("srcip_agent_bundle_lines_total")
	require.NoError(t, err)
	assert.Equal(t, 30598.0, v)
	v, err = b.metricSum("srcip_agent_declined_service_ports")
	require.NoError(t, err)
	assert.Equal(t, 0.0, v)
	_, err = b.metricSum("srcip_agent_missing")
	assert.Error(t, err)
}
