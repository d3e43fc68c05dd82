package agent

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// IPv6 test conventions (issue 22), beside helpers_test.go's IPv4 ones: node addresses
// 2001:db8:ff::<n>, pod CIDRs fd00:10:244:<n>::/64, LoadBalancer and external IPs
// 2001:db8:100::/64, clients 2001:db8:cafe::/48.

func v6Slice(ns, svc, name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	s := makeSlice(ns, svc, name, eps...)
	s.AddressType = discoveryv1.AddressTypeIPv6
	return s
}

func dualStack(s *corev1.Service) {
	s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
	s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol} // IPv6 first: order is no index
	s.Spec.ClusterIPs = []string{"fd00:96::10", "10.96.0.10"}
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func v6Key(name string) flows.Key {
	k := svcKey(name)
	k.Family = flows.IPv6
	return k
}

// A dual-stack Service port is two ServicePorts, IPv4 then IPv6, each with only its family's
// LoadBalancer IPs, externalIPs, source ranges and endpoints (EndpointSlices by addressType).
func TestServicePortsDualStack(t *testing.T) {
	svc := makeService("ns1", "svc1", 30080, dualStack, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "2001:db8:100::7"}, {IP: "198.51.100.7"}}
		s.Spec.ExternalIPs = []string{"2001:db8:100::20", "198.51.100.20"}
		s.Spec.LoadBalancerSourceRanges = []string{"2001:db8:cafe::1/48", "203.0.113.0/24"}
	})
	eps := []*discoveryv1.EndpointSlice{
		v6Slice("ns1", "svc1", "svc1-v6", ep("fd00:10:244:1::5", "node1"), ep("fd00:10:244:2::5", "node2", notReady)),
		makeSlice("ns1", "svc1", "svc1-v4", ep("10.244.1.5", "node1")),
		func() *discoveryv1.EndpointSlice {
			s := makeSlice("ns1", "svc1", "svc1-fqdn", ep("web.example", "node1"))
			s.AddressType = discoveryv1.AddressTypeFQDN
			return s
		}(),
	}
	got, problems := ServicePorts(svc, eps)
	assert.Empty(t, problems)
	base := flows.ServicePort{Namespace: "ns1", Name: "svc1", PortName: "http", Protocol: flows.TCP, Port: 80, NodePort: 30080, FilterSources: true}
	v4, v6 := base, base
	v4.LoadBalancerIPs, v4.ExternalIPs = []netip.Addr{addr("198.51.100.7")}, []netip.Addr{addr("198.51.100.20")}
	v4.SourceRanges = prefixes("203.0.113.0/24")
	v4.Endpoints = []flows.Endpoint{{IP: addr("10.244.1.5"), Port: 8080, NodeName: "node1"}}
	v6.Family = flows.IPv6
	v6.LoadBalancerIPs, v6.ExternalIPs = []netip.Addr{addr("2001:db8:100::7")}, []netip.Addr{addr("2001:db8:100::20")}
	v6.SourceRanges = prefixes("2001:db8:cafe::/48")
	v6.Endpoints = []flows.Endpoint{{IP: addr("fd00:10:244:1::5"), Port: 8080, NodeName: "node1"}}
	assert.Equal(t, []flows.ServicePort{v4, v6}, got)
	assert.Equal(t, "service-port/ns1/svc1:http/TCP/IPv6", got[1].Key().String())
	assert.NotEqual(t, got[0].Key(), got[1].Key())

	// SingleStack IPv6: only the IPv6 ServicePort; the IPv4 addresses are reported, not dropped.
	single := svc.DeepCopy()
	single.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	single.Spec.IPFamilies, single.Spec.ClusterIPs = []corev1.IPFamily{corev1.IPv6Protocol}, []string{"fd00:96::10"}
	got, problems = ServicePorts(single, eps)
	assert.Equal(t, []flows.ServicePort{v6}, got)
	assert.ElementsMatch(t, []string{
		`status.loadBalancer.ingress ip "198.51.100.7" skipped: the Service has no IPv4 family (spec.ipFamilies IPv6)`,
		`spec.externalIPs "198.51.100.20" skipped: the Service has no IPv4 family (spec.ipFamilies IPv6)`,
	}, problems)
}

// Topology hints and the serving/terminating fallback (KEP-1669) are applied per family: the
// IPv4 endpoints' hints do not narrow the IPv6 ones, and a family without a ready endpoint
// falls back to its own terminating ones while the other keeps its ready ones.
func TestEndpointsPerFamily(t *testing.T) {
	hinted := func(node string) epOpt {
		return func(e *discoveryv1.Endpoint) {
			e.Hints = &discoveryv1.EndpointHints{ForNodes: []discoveryv1.ForNode{{Name: node}}}
		}
	}
	svc := makeService("ns1", "svc1", 30080, dualStack)
	eps := []*discoveryv1.EndpointSlice{
		makeSlice("ns1", "svc1", "a-v4", ep("10.244.1.5", "node1", hinted("node1")), ep("10.244.2.5", "node2", hinted("node2"))),
		v6Slice("ns1", "svc1", "a-v6", ep("fd00:10:244:1::5", "node1", terminating(true)), ep("fd00:10:244:2::5", "node2", terminating(true)),
			ep("fd00:10:244:2::6", "node2", terminating(false))),
	}
	got, problems := Selector{Node: "node1"}.ServicePorts(svc, eps)
	assert.Empty(t, problems)
	require.Len(t, got, 2)
	assert.Equal(t, []flows.Endpoint{{IP: addr("10.244.1.5"), Port: 8080, NodeName: "node1"}}, got[0].Endpoints, "IPv4: the node hint")
	assert.Equal(t, []flows.Endpoint{{IP: addr("fd00:10:244:1::5"), Port: 8080, NodeName: "node1"}, {IP: addr("fd00:10:244:2::5"), Port: 8080, NodeName: "node2"}},
		got[1].Endpoints, "IPv6: no ready endpoint, the serving terminating ones")

	// A ready IPv6 endpoint without a hint: every ready IPv6 endpoint, the IPv4 hint still holds.
	eps[1] = v6Slice("ns1", "svc1", "a-v6", ep("fd00:10:244:2::5", "node2"), ep("fd00:10:244:1::5", "node1", terminating(true)))
	got, _ = Selector{Node: "node1"}.ServicePorts(svc, eps)
	assert.Equal(t, []flows.Endpoint{{IP: addr("10.244.1.5"), Port: 8080, NodeName: "node1"}}, got[0].Endpoints)
	assert.Equal(t, []flows.Endpoint{{IP: addr("fd00:10:244:2::5"), Port: 8080, NodeName: "node2"}}, got[1].Endpoints)

	// An address of the other family inside a slice is reported and skipped.
	eps[0] = makeSlice("ns1", "svc1", "a-v4", ep("10.244.1.5", "node1"), ep("fd00:10:244:1::9", "node1"))
	got, problems = ServicePorts(svc, eps)
	assert.Equal(t, []flows.Endpoint{{IP: addr("10.244.1.5"), Port: 8080, NodeName: "node1"}}, got[0].Endpoints)
	assert.Equal(t, []string{`EndpointSlice a-v4: endpoint address "fd00:10:244:1::9" skipped: not an IPv4 address`}, problems)
}

// loadBalancerSourceRanges per family: each family's ServicePort filters on its own ranges; a
// family the list has no valid range for lets nobody in to that family's LB IPs and externalIPs
// (fail-closed, as IPv4 always did), and says so once per family; malformed entries are still
// reported.
func TestSourceRangesPerFamily(t *testing.T) {
	conv := func(ranges []string, mods ...func(*corev1.Service)) ([]flows.ServicePort, []string) {
		svc := makeService("ns1", "svc1", 30080, append(mods, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = ranges
		})...)
		return ServicePorts(svc, nil)
	}
	// Dual-stack, IPv4 ranges only: IPv6 denies every new connection.
	got, problems := conv([]string{"203.0.113.0/24"}, dualStack)
	require.Len(t, got, 2)
	assert.True(t, got[0].FilterSources)
	assert.Equal(t, prefixes("203.0.113.0/24"), got[0].SourceRanges)
	assert.True(t, got[1].FilterSources)
	assert.Nil(t, got[1].SourceRanges)
	assert.Equal(t, []string{"spec.loadBalancerSourceRanges has no valid IPv6 CIDR: new connections to the IPv6 LoadBalancer IPs and externalIPs are refused from every client (NodePorts are not filtered)"}, problems)

	// Dual-stack, IPv6 ranges (masked, sorted, deduplicated) and a malformed one.
	got, problems = conv([]string{"2001:db8:cafe:1::/64", " 2001:db8:cafe::7/48", "2001:db8:cafe::/48", "2001:db8::/129"}, dualStack)
	require.Len(t, got, 2)
	assert.Nil(t, got[0].SourceRanges)
	assert.Equal(t, prefixes("2001:db8:cafe::/48", "2001:db8:cafe:1::/64"), got[1].SourceRanges)
	require.Len(t, problems, 2)
	assert.Contains(t, problems[0], `spec.loadBalancerSourceRanges "2001:db8::/129" is not a CIDR: it lets nobody in`)
	assert.Equal(t, "spec.loadBalancerSourceRanges has no valid IPv4 CIDR: new connections to the IPv4 LoadBalancer IPs and externalIPs are refused from every client (NodePorts are not filtered)", problems[1])

	// IPv4-only: IPv6 ranges do not apply and the message is the one before families.
	got, problems = conv([]string{"2001:db8:cafe::/48"})
	require.Len(t, got, 1)
	assert.True(t, got[0].FilterSources)
	assert.Nil(t, got[0].SourceRanges)
	assert.Equal(t, []string{"spec.loadBalancerSourceRanges has no valid IPv4 CIDR: new connections to the LoadBalancer IPs and externalIPs are refused from every client (NodePorts are not filtered)"}, problems)

	// IPv6-only with both families' ranges: no problem.
	got, problems = conv([]string{"2001:db8:cafe::/48", "203.0.113.0/24"}, func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} })
	require.Len(t, got, 1)
	assert.Equal(t, flows.IPv6, got[0].Family)
	assert.Equal(t, prefixes("2001:db8:cafe::/48"), got[0].SourceRanges)
	assert.Empty(t, problems)
}

// A SingleStack IPv4 Service patched to PreferDualStack (its IPv6 ClusterIP and EndpointSlice
// arrive) gets its IPv6 ServicePort, with a group of its own, and its IPv4 one stays
// byte-identical: the same ServicePort in the State, the same group id and the same applied
// flow set (cookie), not rebuilt into something else.
func TestSingleToDualStackLeavesIPv4Alone(t *testing.T) {
	single := makeService("ns1", "web", 30090, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
		s.Spec.IPFamilies, s.Spec.ClusterIPs = []corev1.IPFamily{corev1.IPv4Protocol}, []string{"10.96.0.10"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.9"}}
		s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
	})
	v4Slice := makeSlice("ns1", "web", "web-v4", ep("10.244.1.5", "node1"), ep("10.244.2.5", "node2"))
	dual := single.DeepCopy()
	dual.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyPreferDualStack)
	dual.Spec.IPFamilies = append(dual.Spec.IPFamilies, corev1.IPv6Protocol)
	dual.Spec.ClusterIPs = append(dual.Spec.ClusterIPs, "fd00:96::10")
	dual.Status.LoadBalancer.Ingress = append(dual.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: "2001:db8:100::9"})
	dual.Spec.LoadBalancerSourceRanges = append(dual.Spec.LoadBalancerSourceRanges, "2001:db8:cafe::/48")
	v6s := v6Slice("ns1", "web", "web-v6", ep("fd00:10:244:1::5", "node1"))

	before, _ := ServicePorts(single, []*discoveryv1.EndpointSlice{v4Slice})
	after, _ := ServicePorts(dual, []*discoveryv1.EndpointSlice{v4Slice, v6s})
	require.Len(t, before, 1)
	require.Len(t, after, 2)
	assert.Equal(t, before[0], after[0], "the IPv4 ServicePort is unchanged")
	assert.Equal(t, flows.IPv6, after[1].Family)

	f := newFixture(t)
	f.seedNodes(f.r)
	f.r.OnService(nil, single)
	f.r.OnEndpointSlice(nil, v4Slice)
	require.NoError(t, f.sync())
	k4 := svcKey("web")
	sp4, applied4 := f.r.model.st.Services[k4], f.r.Applied(flows.BrEx)[k4]
	require.NotZero(t, sp4.GroupID)
	_, has6 := f.r.model.st.Services[v6Key("web")]
	assert.False(t, has6)

	f.r.OnService(single, dual)
	f.r.OnEndpointSlice(nil, v6s)
	require.NoError(t, f.sync())
	assert.Equal(t, sp4, f.r.model.st.Services[k4], "the IPv4 ServicePort in the State, group id included")
	assert.Equal(t, applied4.Cookie, f.r.Applied(flows.BrEx)[k4].Cookie, "the IPv4 flow set is the same")
	assert.Equal(t, applied4.Groups, f.r.Applied(flows.BrEx)[k4].Groups)
	sp6, ok := f.r.model.st.Services[v6Key("web")]
	require.True(t, ok, "the IPv6 ServicePort reaches the State")
	assert.NotEqual(t, sp4.GroupID, sp6.GroupID, "one group per family")
	assert.Equal(t, []netip.Addr{addr("2001:db8:100::9")}, sp6.LoadBalancerIPs)
	assert.Equal(t, prefixes("2001:db8:cafe::/48"), sp6.SourceRanges)
	assert.Equal(t, []flows.Endpoint{{IP: addr("fd00:10:244:1::5"), Port: 8080, NodeName: "node1"}}, sp6.Endpoints)

	// srcipctl tells the two flow sets apart by family.
	rep := f.r.Report()
	require.Len(t, rep.Services, 1)
	var fams []string
	for _, p := range rep.Services[0].Ports {
		fams = append(fams, p.Family+" "+p.Key)
	}
	assert.Equal(t, []string{"IPv4 service-port/ns1/web:http/TCP", "IPv6 service-port/ns1/web:http/TCP/IPv6"}, fams)
	assert.Equal(t, []string{"198.51.100.9:80/TCP", "[2001:db8:100::9]:80/TCP", "nodePort 30090/TCP"}, sortedCopy(rep.Services[0].Requested))
	assert.Equal(t, "ns1/web http/TCP", ObjectName(svcKey("web")))
	assert.Equal(t, "ns1/web http/TCP/IPv6", ObjectName(v6Key("web")))

	// Back to SingleStack: the IPv6 ServicePort goes, the IPv4 one stays as it was.
	f.r.OnService(dual, single)
	require.NoError(t, f.sync())
	assert.Equal(t, sp4, f.r.model.st.Services[k4])
	_, has6 = f.r.model.st.Services[v6Key("web")]
	assert.False(t, has6)
}

// Nodes keep both families' pod CIDRs (in the State and srcipctl's report); an IPv6-only Node in
// a cluster whose underlay is IPv4 (this node's InternalIP) is refused with an Event that names
// the families: no tunnel can join them.
func TestNodesDualStack(t *testing.T) {
	n, err := ConvertNode(makeNode("node2", "192.168.0.2", "10.244.2.0/24", func(n *corev1.Node) {
		n.Spec.PodCIDRs = []string{"fd00:10:244:2::/64", "10.244.2.0/24"}
		n.Status.Addresses = append([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "2001:db8:ff::2"}}, n.Status.Addresses...)
	}))
	require.NoError(t, err)
	assert.Equal(t, addr("192.168.0.2"), n.InternalIP, "the first IPv4 InternalIP, not the first InternalIP")
	assert.Equal(t, addr("2001:db8:ff::2"), n.InternalIPv6, "the first IPv6 InternalIP: OriginNode's source over IPv6")
	assert.Equal(t, prefixes("fd00:10:244:2::/64", "10.244.2.0/24"), n.PodCIDRs)

	f := newFixture(t)
	f.seedNodes(f.r)
	f.r.OnNode(nil, makeNode("node3", "192.168.0.3", "10.244.3.0/24", ready, func(n *corev1.Node) {
		n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "fd00:10:244:3::/64")
	}))
	f.r.OnNode(nil, makeNode("node4", "2001:db8:ff::4", "fd00:10:244:4::/64", ready))
	require.NoError(t, f.sync())
	assert.Equal(t, prefixes("10.244.3.0/24", "fd00:10:244:3::/64"), f.r.model.st.Nodes["node3"].PodCIDRs)
	_, ok := f.r.model.st.Nodes["node4"]
	assert.False(t, ok)
	assert.Contains(t, f.eventText(), ReasonInvalid+": node node4: its underlay address 2001:db8:ff::4 is IPv6 and this node's (192.168.0.1) is IPv4: no Geneve tunnel between them")
	for _, nr := range f.r.Report().Nodes {
		if nr.Name == "node3" {
			assert.Equal(t, []string{"10.244.3.0/24", "fd00:10:244:3::/64"}, nr.PodCIDRs)
		}
	}

	// A Service with an endpoint on the refused node is declined naming that node, not as a
	// hostNetwork endpoint (its pod CIDR is unknown here, not outside the cluster's).
	f.r.OnNode(nil, makeNode("node5", "2001:db8:ff::5", "10.244.5.0/24", ready))
	f.r.OnService(nil, makeService("ns1", "web", 30400))
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "web", "web-a", ep("10.244.2.5", "node2"), ep("10.244.5.5", "node5")))
	require.NoError(t, f.sync())
	assert.Contains(t, f.eventText(), "declined: 1 of 2 endpoint(s) on a node this node does not program (no Geneve tunnel to it or an invalid Node: see that Node's Warning Event): 10.244.5.5:8080 on node node5")
	assert.NotContains(t, f.flowText(), "tp_dst=30400")
}

// NodePort addresses of both families, --nodeport-addresses restricting each family by its own
// prefixes.
func TestNodePortAddressesPerFamily(t *testing.T) {
	n := makeNode("node1", "192.168.0.1", "10.244.1.0/24", func(n *corev1.Node) {
		n.Status.Addresses = append(n.Status.Addresses,
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "2001:db8:ff::1"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "2001:db8:1::1"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.1"})
	})
	all := []netip.Addr{addr("192.168.0.1"), addr("198.51.100.1"), addr("2001:db8:1::1"), addr("2001:db8:ff::1")}
	assert.Equal(t, all, NodePortAddresses(n, nil))
	assert.Equal(t, []netip.Addr{addr("192.168.0.1"), addr("2001:db8:ff::1")},
		NodePortAddresses(n, prefixes("2001:db8:ff::/64", "192.168.0.0/24")))
	assert.Equal(t, []netip.Addr{addr("192.168.0.1"), addr("198.51.100.1"), addr("2001:db8:1::1")},
		NodePortAddresses(n, prefixes("2001:db8:1::/64")), "IPv4 has no prefix: all its addresses")

	f := newFixture(t)
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) { c.NodePortCIDRs = prefixes("2001:db8:ff::/64", "192.168.0.0/24") })
	f.r.OnNode(nil, makeNode("node1", "192.168.0.1", "10.244.1.0/24", ready, func(nd *corev1.Node) { nd.Status.Addresses = n.Status.Addresses }))
	require.NoError(t, f.sync())
	assert.Equal(t, []netip.Addr{addr("192.168.0.1"), addr("2001:db8:ff::1")}, f.r.model.st.NodePortAddresses)
}

// Admission per family: IPv6 LoadBalancer IPs and externalIPs are refused on node addresses, in
// pod CIDRs (and the pod gateway address), in Service CIDRs (flag and ServiceCIDR objects), on
// ClusterIPs and outside --external-ip-cidrs, as IPv4 ones are; a prefix of one family never
// admits nor refuses an address of the other.
func TestAdmissionPerFamily(t *testing.T) {
	f := newFixture(t)
	extCIDRs := prefixes("0.0.0.0/0", "2001:db8:100::/64")
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
		c.ExternalIPCIDRs = extCIDRs
		c.ServiceCIDRs = prefixes("10.96.0.0/16", "fd00:96::/112")
		c.RouteNextHops = func(context.Context) ([]netip.Addr, error) {
			return []netip.Addr{addr("fe80::1"), addr("2001:db8:ff::fe")}, nil
		}
	})
	dualNode := func(name, ip4, ip6, cidr4, cidr6 string) *corev1.Node {
		return makeNode(name, ip4, cidr4, ready, func(n *corev1.Node) {
			n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, cidr6)
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip6})
		})
	}
	f.r.OnNode(nil, dualNode("node1", "192.168.0.1", "2001:db8:ff::1", "10.244.1.0/24", "fd00:10:244:1::/64"))
	f.r.OnNode(nil, dualNode("node2", "192.168.0.2", "2001:db8:ff::2", "10.244.2.0/24", "fd00:10:244:2::/64"))
	f.r.OnService(nil, makeService("ns2", "plain", 0, func(s *corev1.Service) {
		s.Annotations = nil
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		s.Spec.ClusterIPs = []string{"fd00:172::10"}
	}))
	f.r.OnServiceCIDR(nil, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.97.0.0/16", "fd00:97::/112"}}})
	cases := []struct{ name, ip, want string }{
		{"nodeaddr", "2001:db8:ff::2", "loadBalancer ingress IP 2001:db8:ff::2 is an address of Node node2: refused"},
		{"podip", "fd00:10:244:2::5", "loadBalancer ingress IP fd00:10:244:2::5 is inside the pod CIDR fd00:10:244:2::/64 of Node node2: refused"},
		{"gw", "fd00:10:244:1::1", "loadBalancer ingress IP fd00:10:244:1::1 is the pod gateway address of Node node1"},
		{"svccidr", "fd00:96::1", "loadBalancer ingress IP fd00:96::1 is inside the Service CIDR fd00:96::/112 (--service-cidrs): refused"},
		{"svccidrobj", "fd00:97::1", "loadBalancer ingress IP fd00:97::1 is inside the Service CIDR fd00:97::/112 (ServiceCIDR kubernetes): refused"},
		{"clusterip", "fd00:172::10", "loadBalancer ingress IP fd00:172::10 is the ClusterIP of Service ns2/plain: refused"},
		{"router", "2001:db8:ff::fe", "loadBalancer ingress IP 2001:db8:ff::fe is a next hop of this node's routes: refused"},
	}
	for i, c := range cases {
		f.r.OnService(nil, lbService("ns1", c.name, int32(30100+i), c.ip, dualStack))
	}
	f.r.OnService(nil, lbService("ns1", "ok", 30200, "2001:db8:100::9", dualStack, func(s *corev1.Service) {
		// The IPv4 address is this node's IPv4 address: refused on IPv4 only.
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: "192.168.0.1"})
		s.Spec.ExternalIPs = []string{"2001:db8:100::20", "2001:db8:200::20", "198.51.100.20"}
	}))
	require.NoError(t, f.sync())
	events := f.eventText()
	for _, c := range cases {
		sp, ok := f.r.model.st.Services[v6Key(c.name)]
		require.True(t, ok, c.name)
		assert.Empty(t, sp.LoadBalancerIPs, c.name)
		assert.NotZero(t, sp.NodePort, c.name, "the NodePort is kept")
		assert.Contains(t, events, ReasonRefused+": "+c.want, c.name)
	}
	ok4, ok6 := f.r.model.st.Services[svcKey("ok")], f.r.model.st.Services[v6Key("ok")]
	assert.Empty(t, ok4.LoadBalancerIPs)
	assert.Contains(t, events, ReasonRefused+": loadBalancer ingress IP 192.168.0.1 is an address of Node node1: refused")
	assert.Equal(t, []netip.Addr{addr("198.51.100.20")}, ok4.ExternalIPs)
	assert.Equal(t, []netip.Addr{addr("2001:db8:100::9")}, ok6.LoadBalancerIPs)
	assert.Equal(t, []netip.Addr{addr("2001:db8:100::20")}, ok6.ExternalIPs)
	assert.Contains(t, events, ReasonRefused+": externalIP 2001:db8:200::20 is outside the allowed externalIP ranges (--external-ip-cidrs: 0.0.0.0/0,2001:db8:100::/64): refused")

	// 0.0.0.0/0 alone admits no IPv6 externalIP; ::/0 alone no IPv4 one.
	for _, c := range []struct {
		cidr, ip string
		fam      flows.Family
	}{{"0.0.0.0/0", "2001:db8:100::20", flows.IPv6}, {"::/0", "198.51.100.20", flows.IPv4}} {
		g := newFixture(t)
		g.r = g.newReconcilerWith(func(rc *ReconcilerConfig) { rc.ExternalIPCIDRs = prefixes(c.cidr) })
		g.seedNodes(g.r)
		g.r.OnService(nil, makeService("ns1", "ext", 30300, dualStack, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{c.ip} }))
		require.NoError(t, g.sync())
		k := svcKey("ext")
		k.Family = c.fam
		assert.Empty(t, g.r.model.st.Services[k].ExternalIPs, c.cidr)
		assert.Contains(t, g.eventText(), "externalIP "+c.ip+" is outside the allowed externalIP ranges (--external-ip-cidrs: "+c.cidr+"): refused")
	}
}

// Under --preserve-source-ip=all a ClusterIP Service is eligible by an externalIP of either
// family inside --external-ip-cidrs, but only of a family the Service has.
func TestEligibleExternalIPPerFamily(t *testing.T) {
	svc := func(ip string, mods ...func(*corev1.Service)) *corev1.Service {
		return makeService("ns1", "x", 0, append([]func(*corev1.Service){func(s *corev1.Service) {
			s.Annotations = nil
			s.Spec.Type = corev1.ServiceTypeClusterIP
			s.Spec.ExternalIPs = []string{ip}
		}}, mods...)...)
	}
	v6 := prefixes("2001:db8:100::/64")
	assert.True(t, Eligible(svc("2001:db8:100::20", dualStack), v6))
	assert.False(t, Eligible(svc("2001:db8:100::20"), v6), "an IPv4-only Service does not serve an IPv6 externalIP")
	assert.False(t, Eligible(svc("198.51.100.20", dualStack), v6))
	assert.True(t, Eligible(svc("198.51.100.20", dualStack), prefixes("198.51.100.0/24")))
}

// A Pod's IPs of both families reach the State (BuildPod checks each against this node's pod
// CIDRs of its family).
func TestLocalPodDualStackInState(t *testing.T) {
	f := newFixture(t)
	f.r.OnNode(nil, makeNode("node1", "192.168.0.1", "10.244.1.0/24", ready, func(n *corev1.Node) {
		n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "fd00:10:244:1::/64")
	}))
	f.r.OnPod(nil, &corev1.Pod{ObjectMeta: metaNS("ns1", "web-0"), Spec: corev1.PodSpec{NodeName: thisNode},
		Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "fd00:10:244:1::5"}, {IP: "10.244.1.5"}}}})
	require.NoError(t, f.sync())
	p, ok := f.r.model.st.Pods[flows.Key{Kind: flows.KindPod, Namespace: "ns1", Name: "web-0"}]
	require.True(t, ok)
	assert.Equal(t, []netip.Addr{addr("10.244.1.5"), addr("fd00:10:244:1::5")}, p.IPs)
	assert.Equal(t, 0, p.Rank.Tier)
}

// statBridge is a FlowBridge whose FlowStats returns fixed counters.
type statBridge struct {
	FlowBridge
	stats []flows.FlowStat
}

func (b statBridge) FlowStats(context.Context) ([]flows.FlowStat, error) { return b.stats, nil }

// The per-Service-port metrics of a dual-stack port add up its two flow sets under one series:
// two series with the same labels would fail the whole scrape.
func TestFlowMetricsDualStackOneSeries(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	f.r.OnService(nil, makeService("ns1", "web", 30090, dualStack))
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "web", "web-v4", ep("10.244.1.5", "node1")))
	require.NoError(t, f.sync())
	c4 := f.r.Applied(flows.BrEx)[svcKey("web")].Cookie
	c6 := f.r.Applied(flows.BrEx)[v6Key("web")].Cookie
	require.NotZero(t, c4)
	require.NotZero(t, c6)
	require.NotEqual(t, c4, c6)
	br := statBridge{FlowBridge: f.ex, stats: []flows.FlowStat{
		{Cookie: c4, Table: flows.ExServiceLB, Packets: 5},
		{Cookie: c6, Table: flows.ExServiceLB, Packets: 7},
	}}
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(newFlowStatsCollector(f.r, map[flows.Bridge]FlowBridge{flows.BrEx: br, flows.BrInt: f.in})))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "srcip_agent_service_packets_total" {
			continue
		}
		require.Len(t, mf.GetMetric(), 1)
		assert.Equal(t, 12.0, mf.GetMetric()[0].GetCounter().GetValue())
		found = true
	}
	assert.True(t, found)
}

func sortedCopy(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return out
}

// No entry point on an address that is not global unicast, in either family: br-ex's own
// link-local IPv6 address (which no Node status lists) as a LoadBalancer IP would capture the
// node's BGP or SSH over link-local; IPv4-mapped addresses are refused with the IPv4 form to use.
func TestAdmissionRefusesSpecialAddresses(t *testing.T) {
	var a admission
	for _, s := range []string{"fe80::a8bb:ccff:fedd:eeff", "ff02::1", "::1", "::", "169.254.1.1", "127.0.0.1", "224.0.0.5", "0.0.0.0"} {
		assert.Contains(t, a.clusterAddress("loadBalancer ingress IP", netip.MustParseAddr(s)), "not a global unicast address", s)
	}
	assert.Contains(t, a.clusterAddress("externalIP", netip.MustParseAddr("::ffff:203.0.113.7")), "write the IPv4 address 203.0.113.7")
	for _, s := range []string{"2001:db8:0:113::60", "203.0.113.60"} {
		assert.Empty(t, a.clusterAddress("externalIP", netip.MustParseAddr(s)), s)
	}
}

// An IPv4-mapped IPv6 CIDR means its IPv4 network (as kube-proxy reads it): a source range or a
// pod CIDR written that way is IPv4.
func TestIPv4MappedPrefixesAreIPv4(t *testing.T) {
	assert.Equal(t, netip.MustParsePrefix("198.51.100.0/24"), unmapPrefix(netip.MustParsePrefix("::ffff:198.51.100.0/120")))
	assert.Equal(t, netip.MustParsePrefix("2001:db8::/64"), unmapPrefix(netip.MustParsePrefix("2001:db8::/64")))
	svc := makeService("ns1", "lb", 30700, func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.LoadBalancerSourceRanges = []string{"::ffff:198.51.100.0/120"}
	})
	filter, ranges, problems := SourceRanges(svc, []flows.Family{flows.IPv4})
	assert.True(t, filter)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, ranges[flows.IPv4])
	assert.Empty(t, ranges[flows.IPv6])
	assert.Empty(t, problems)
}

// An IPv6-only-underlay cluster: this node and node2 have only IPv6 InternalIPs and are
// programmed, Geneve to node2 over IPv6 (tun_ipv6_src, tun_ipv6_dst) for its IPv4 and IPv6 pod
// CIDRs; node3 has only an IPv4 InternalIP, which no tunnel from here can reach: refused with an
// Event and a log line, no flow names it. When node3 gains an IPv6 InternalIP it is programmed
// and the Event's problem is cleared.
func TestIPv6UnderlayNodes(t *testing.T) {
	f := newFixture(t)
	dual := func(cidr6 string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, cidr6) }
	}
	f.r.OnNode(nil, makeNode("node1", "2001:db8:0:2::11", "10.244.1.0/24", ready, dual("fd00:10:244:1::/64")))
	f.r.OnNode(nil, makeNode("node2", "2001:db8:0:2::12", "10.244.2.0/24", ready, dual("fd00:10:244:2::/64")))
	f.r.OnNode(nil, makeNode("node3", "192.168.0.3", "10.244.3.0/24", ready))
	require.NoError(t, f.sync())
	st := f.r.model.st
	assert.Equal(t, flows.IPv6, st.UnderlayFamily())
	assert.Contains(t, st.Nodes, "node2")
	assert.NotContains(t, st.Nodes, "node3")
	assert.Contains(t, f.eventText(), ReasonInvalid+": node node3: its underlay address 192.168.0.3 is IPv4 and this node's (2001:db8:0:2::11) is IPv6: no Geneve tunnel between them")
	ex, in := f.flowText(), strings.Join(f.in.Flows(), "\n")
	assert.Contains(t, ex, "udp6,in_port=1,ipv6_src=2001:db8:0:2::12,ipv6_dst=2001:db8:0:2::11,tp_dst=6081")
	assert.Contains(t, in, "tun_ipv6_src=2001:db8:0:2::12")
	assert.Contains(t, in, "nw_dst=10.244.2.0/24")
	assert.Contains(t, in, "set_field:2001:db8:0:2::12->tun_ipv6_dst")
	assert.NotContains(t, ex+in, "192.168.0.3")
	assert.NotContains(t, in, "10.244.3.0/24")

	old := makeNode("node3", "192.168.0.3", "10.244.3.0/24", ready)
	f.r.OnNode(old, makeNode("node3", "192.168.0.3", "10.244.3.0/24", ready, func(n *corev1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "2001:db8:0:2::13"})
	}))
	require.NoError(t, f.sync())
	assert.NotContains(t, f.r.model.st.Nodes, "node3", "its first IPv4 InternalIP is still its underlay address")
	f.r.OnNode(old, makeNode("node3", "2001:db8:0:2::13", "10.244.3.0/24", ready))
	require.NoError(t, f.sync())
	assert.Equal(t, addr("2001:db8:0:2::13"), f.r.model.st.Nodes["node3"].InternalIP)
	assert.Contains(t, strings.Join(f.in.Flows(), "\n"), "set_field:2001:db8:0:2::13->tun_ipv6_dst")
	assert.NotContains(t, f.r.model.problems, "node/node3")
}
