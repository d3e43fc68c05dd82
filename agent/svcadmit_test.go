package agent

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

func lbService(ns, name string, nodePort int32, ip string, mods ...func(*corev1.Service)) *corev1.Service {
	return makeService(ns, name, nodePort, append([]func(*corev1.Service){func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	}}, mods...)...)
}

func (f *fixture) entries(name string) []string {
	var out []string
	for _, e := range f.r.Applied(flows.BrEx)[svcKey(name)].EntryPoints {
		out = append(out, e.String())
	}
	return out
}

func (f *fixture) eventText() string { return strings.Join(f.events.msgs, "\n") }

// LoadBalancer IPs and externalIPs inside the cluster's own networks are refused, each with a
// SourceIPRefused Event that says why: a pod's address, a node's pod gateway address, the
// Service CIDR, another Service's ClusterIP, a next hop of this node's routes. The NodePort of
// each Service stays served.
func TestAdmissionRefusesClusterAddresses(t *testing.T) {
	f := newFixture(t)
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
		c.ExternalIPCIDRs = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
		c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}
		c.RouteNextHops = func(context.Context) ([]netip.Addr, error) {
			return []netip.Addr{addr("192.168.0.254")}, nil
		}
	})
	f.seedNodes(f.r)
	f.r.OnService(nil, makeService("ns2", "plain", 0, func(s *corev1.Service) {
		s.Annotations = nil
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.16.0.10", []string{"172.16.0.10"}
	}))
	cases := []struct{ name, ip, want string }{
		{"podip", "10.244.2.5", "loadBalancer ingress IP 10.244.2.5 is inside the pod CIDR 10.244.2.0/24 of Node node2: refused"},
		{"gw", "10.244.1.1", "loadBalancer ingress IP 10.244.1.1 is the pod gateway address of Node node1"},
		{"svccidr", "10.96.0.1", "loadBalancer ingress IP 10.96.0.1 is inside the Service CIDR 10.96.0.0/16 (--service-cidrs): refused"},
		{"clusterip", "172.16.0.10", "loadBalancer ingress IP 172.16.0.10 is the ClusterIP of Service ns2/plain: refused"},
		{"router", "192.168.0.254", "loadBalancer ingress IP 192.168.0.254 is a next hop of this node's routes: refused"},
	}
	for i, c := range cases {
		f.r.OnService(nil, lbService("ns1", c.name, int32(30100+i), c.ip))
	}
	f.r.OnService(nil, makeService("ns1", "ext", 30200, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"10.244.1.7"} }))
	require.NoError(t, f.sync())
	for i, c := range cases {
		assert.Equal(t, []string{"192.168.0.1:" + strconv.Itoa(30100+i) + "/TCP"}, f.entries(c.name), c.name)
		assert.Contains(t, f.eventText(), ReasonRefused+": "+c.want, c.name)
	}
	assert.Equal(t, []string{"192.168.0.1:30200/TCP"}, f.entries("ext"))
	assert.Contains(t, f.eventText(), ReasonRefused+": externalIP 10.244.1.7 is inside the pod CIDR 10.244.1.0/24 of Node node1")

	rep := f.r.Report()
	for _, s := range rep.Services {
		if s.Name == "podip" {
			require.Len(t, s.Refused, 1)
			assert.Equal(t, "10.244.2.5:80/TCP", s.Refused[0].Entry)
		}
	}

	// The ClusterIP goes (its Service is deleted): the address is served.
	f.r.OnService(f.r.model.services[nn("ns2", "plain")], nil)
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"192.168.0.1:30103/TCP", "172.16.0.10:80/TCP"}, f.entries("clusterip"))
}

// Without --service-cidrs an address equal to the ClusterIP of any Service the agent sees is
// refused, also the Service's own ClusterIP; a ClusterIP arriving later takes the address back.
func TestAdmissionClusterIPArrivesLater(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	f.r.OnService(nil, lbService("ns1", "lb", 30100, "172.16.0.20"))
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"192.168.0.1:30100/TCP", "172.16.0.20:80/TCP"}, f.entries("lb"))
	f.r.OnService(nil, makeService("ns2", "other", 0, func(s *corev1.Service) {
		s.Annotations = nil
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Spec.ClusterIPs = []string{"172.16.0.20"}
	}))
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30100/TCP"}, f.entries("lb"))
	assert.Contains(t, f.eventText(), "is the ClusterIP of Service ns2/other")
}

// A ServiceCIDR object (networking.k8s.io/v1) is a Service CIDR as --service-cidrs is: an LB IP
// inside it is refused with an Event naming the object, from the sync after it arrives; a second
// ServiceCIDR extends the set; deleting the objects serves the address again. A spec.cidrs value
// that does not parse is reported on its object and the rest of the object still counts.
func TestAdmissionReadsServiceCIDRObjects(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	f.r.OnService(nil, lbService("ns1", "lb", 30100, "10.97.0.9"))
	f.r.OnService(nil, lbService("ns1", "lb2", 30101, "10.98.0.9"))
	require.NoError(t, f.sync())
	assert.Len(t, f.entries("lb"), 2)
	assert.Len(t, f.entries("lb2"), 2)

	kubernetes := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.97.0.0/16"}}}
	f.r.OnServiceCIDR(nil, kubernetes)
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30100/TCP"}, f.entries("lb"))
	assert.Len(t, f.entries("lb2"), 2)
	assert.Contains(t, f.eventText(), ReasonRefused+": loadBalancer ingress IP 10.97.0.9 is inside the Service CIDR 10.97.0.0/16 (ServiceCIDR kubernetes): refused")

	extra := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.98.0.0/16", "not-a-cidr"}}}
	f.r.OnServiceCIDR(nil, extra)
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30101/TCP"}, f.entries("lb2"))
	assert.Contains(t, f.eventText(), ReasonInvalid+`: spec.cidrs "not-a-cidr" is not a CIDR`)

	f.r.OnServiceCIDR(kubernetes, nil)
	f.r.OnServiceCIDR(extra, nil)
	require.NoError(t, f.sync())
	assert.Len(t, f.entries("lb"), 2)
	assert.Len(t, f.entries("lb2"), 2)
}

// A next hop that appears in the routes is refused from the next full sync on.
func TestAdmissionNextHopsFollowRoutes(t *testing.T) {
	f := newFixture(t)
	hops := []netip.Addr{}
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
		c.RouteNextHops = func(context.Context) ([]netip.Addr, error) { return hops, nil }
	})
	f.seedNodes(f.r)
	f.r.OnService(nil, lbService("ns1", "lb", 30100, "203.0.113.1"))
	require.NoError(t, f.sync())
	assert.Len(t, f.entries("lb"), 2)
	hops = []netip.Addr{addr("203.0.113.1")}
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30100/TCP"}, f.entries("lb"))
}

// In manifests mode nothing keeps two Services from having one nodePort: an opted-in Service
// never takes a plain Service's nodePort silently. The older keeps it; both ways are reported.
func TestNodePortCollisionWithPlainService(t *testing.T) {
	old, young := metav1.Unix(1000, 0), metav1.Unix(2000, 0)
	for _, plainOlder := range []bool{true, false} {
		f := newFixture(t)
		f.seedNodes(f.r)
		plain := makeService("ns2", "plain", 30500, func(s *corev1.Service) { s.Annotations = nil })
		opted := makeService("ns1", "opted", 30500)
		if plainOlder {
			plain.CreationTimestamp, opted.CreationTimestamp = old, young
		} else {
			plain.CreationTimestamp, opted.CreationTimestamp = young, old
		}
		f.r.OnService(nil, opted)
		f.r.OnService(nil, plain)
		require.NoError(t, f.sync())
		if plainOlder {
			assert.Empty(t, f.entries("opted"))
			assert.Contains(t, f.eventText(), ReasonRefused+": nodePort 30500/TCP is also the nodePort of Service ns2/plain, which ovs-srcip does not serve and which is older: refused")
		} else {
			assert.Equal(t, []string{"192.168.0.1:30500/TCP"}, f.entries("opted"))
			assert.Contains(t, f.eventText(), "nodePort 30500/TCP is also the nodePort of Service ns2/plain, which ovs-srcip does not serve: this Service is older and keeps it")
		}
		// The plain Service moves to another nodePort: no collision, the opted-in one serves it.
		moved := plain.DeepCopy()
		moved.Spec.Ports[0].NodePort = 30501
		f.r.OnService(plain, moved)
		require.NoError(t, f.sync())
		assert.Equal(t, []string{"192.168.0.1:30500/TCP"}, f.entries("opted"), "plainOlder %v", plainOlder)
	}
}

// An IPv6-only Service is no longer declined (issue 22): it gets IPv6 ServicePorts only (its
// key ".../IPv6"), no IPv4 one (its IPv4 NodePort addresses are not captured), and no
// SourceIPDeclined Event. ServiceFamilies reads spec.ipFamilies, else spec.clusterIPs.
func TestIPv6OnlyServiceServedOnIPv6(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	// A dual-stack node1 (an IPv6 pod CIDR: br-int carries IPv6; without it the IPv6 port is
	// declined on this node, TestIPv6DeclinedWithoutIPv6PodCIDR in flows).
	f.r.OnNode(nil, makeNode("node1", "192.168.0.1", "10.244.1.0/24", ready, func(n *corev1.Node) {
		n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, "fd00:244:1::/64")
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00:0:2::1"})
	}))
	v6 := makeService("ns1", "v6", 30600, func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
		s.Spec.ClusterIPs = []string{"fd00::10"}
	})
	f.r.OnService(nil, v6)
	require.NoError(t, f.sync())
	_, ok := f.r.Applied(flows.BrEx)[svcKey("v6")]
	assert.False(t, ok, "no IPv4 service-port flow set for an IPv6-only Service")
	k6 := svcKey("v6")
	k6.Family = flows.IPv6
	sp, ok := f.r.model.st.Services[k6]
	require.True(t, ok, "the IPv6 ServicePort is in the State")
	assert.Equal(t, flows.IPv6, sp.Family)
	assert.Equal(t, uint16(30600), sp.NodePort)
	assert.NotContains(t, f.eventText(), ReasonDeclined)
	rep := f.r.Report()
	require.Len(t, rep.Services, 1)
	s := rep.Services[0]
	assert.Empty(t, s.Declined)
	require.Len(t, s.Ports, 1)
	assert.Equal(t, "IPv6", s.Ports[0].Family)

	// Dual-stack (IPv6 first): both families, each its own ServicePort and group.
	dual := v6.DeepCopy()
	dual.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	f.r.OnService(v6, dual)
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30600/TCP"}, f.entries("v6"))
	sp4, sp6 := f.r.model.st.Services[svcKey("v6")], f.r.model.st.Services[k6]
	assert.NotEqual(t, sp4.GroupID, sp6.GroupID)
	for _, c := range []struct {
		ips  []string
		fams []corev1.IPFamily
		want []flows.Family
	}{
		{nil, nil, []flows.Family{flows.IPv4}},
		{[]string{"fd00::1"}, nil, []flows.Family{flows.IPv6}},
		{[]string{"10.96.0.1"}, nil, []flows.Family{flows.IPv4}},
		{[]string{"None"}, nil, []flows.Family{flows.IPv4}},
		{[]string{"fd00::1", "10.96.0.1"}, nil, []flows.Family{flows.IPv4, flows.IPv6}},
		{[]string{"10.96.0.1"}, []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}, []flows.Family{flows.IPv4, flows.IPv6}},
		{nil, []corev1.IPFamily{"bogus", corev1.IPv6Protocol}, []flows.Family{flows.IPv6}},
	} {
		svc := makeService("ns1", "x", 1, func(s *corev1.Service) { s.Spec.ClusterIPs, s.Spec.IPFamilies = c.ips, c.fams })
		got, _ := ServiceFamilies(svc)
		assert.Equal(t, c.want, got, "%v %v", c.ips, c.fams)
	}
}

// SCTP ports are declined per port, with the datapath's reason: an SCTP-only Service has no
// port and says so; a mixed one serves its TCP port.
func TestSCTPPortsDeclined(t *testing.T) {
	f := newFixture(t)
	_, why := SCTPSupport("netdev", "ovs-vswitchd (Open vSwitch) 3.1.0")
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) { c.SCTP = why })
	f.seedNodes(f.r)
	f.r.OnService(nil, makeService("ns1", "sctp", 30700, func(s *corev1.Service) {
		s.Spec.Ports[0] = corev1.ServicePort{Name: "assoc", Protocol: corev1.ProtocolSCTP, Port: 9999, NodePort: 30700}
	}))
	f.r.OnService(nil, makeService("ns1", "mixed", 30701, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "assoc", Protocol: corev1.ProtocolSCTP, Port: 9999, NodePort: 30702})
	}))
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30701/TCP"}, f.entries("mixed"))
	want := ReasonDeclined + ": port assoc 9999/SCTP declined: this node's userspace datapath (Open vSwitch 3.1.0) tracks SCTP without ports before 3.2"
	n := strings.Count(f.eventText(), want)
	assert.Equal(t, 2, n, "one Event per Service's SCTP port: %s", f.eventText())
	for _, s := range f.r.Report().Services {
		require.Len(t, s.Declined, 1, s.Name)
		if s.Name == "sctp" {
			assert.Empty(t, s.Ports)
		}
	}
	// A second sync repeats no Event.
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Equal(t, n, strings.Count(f.eventText(), want))
}

func TestSCTPSupport(t *testing.T) {
	for _, c := range []struct {
		dp, version string
		capable     bool
		want        string
	}{
		{"netdev", "ovs-vswitchd (Open vSwitch) 3.1.0", false, "tracks SCTP without ports before 3.2"},
		{"netdev", "3.2.1", true, "does not serve SCTP yet"},
		{"netdev", "4.0.0", true, "userspace datapath, Open vSwitch 4.0.0, could"},
		{"netdev", "", false, "may not track SCTP ports"},
		{"system", "3.1.0", true, "kernel datapath"},
		{"", "", true, "kernel datapath, Open vSwitch version unknown"},
		{"dummy", "3.1.0", false, `datapath_type "dummy"`},
	} {
		capable, why := SCTPSupport(c.dp, c.version)
		assert.Equal(t, c.capable, capable, "%q %q", c.dp, c.version)
		assert.Contains(t, why, c.want, "%q %q", c.dp, c.version)
	}
}

func hinted(ip, node string, zones ...string) discoveryv1.Endpoint {
	e := ep(ip, node)
	if len(zones) > 0 {
		e.Hints = &discoveryv1.EndpointHints{}
		for _, z := range zones {
			e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: z})
		}
	}
	return e
}

// The hints are honoured as kube-proxy does: the zone's endpoints when every ready endpoint has
// a zone hint and one names this node's zone; all of them otherwise.
func TestTopologyHints(t *testing.T) {
	slice := func(eps ...discoveryv1.Endpoint) []*discoveryv1.EndpointSlice {
		return []*discoveryv1.EndpointSlice{makeSlice("ns1", "web", "web-a", eps...)}
	}
	ips := func(eps []flows.Endpoint) []string {
		var out []string
		for _, e := range eps {
			out = append(out, e.IP.String())
		}
		return out
	}
	a, b, c := "10.244.1.5", "10.244.2.5", "10.244.3.5"
	for _, tc := range []struct {
		name string
		topo topology
		eps  []discoveryv1.Endpoint
		want []string
	}{
		{"zone's endpoints", topology{"node1", "z1"}, []discoveryv1.Endpoint{hinted(a, "node1", "z1"), hinted(b, "node2", "z2"), hinted(c, "node3", "z1", "z3")}, []string{a, c}},
		{"one without a hint: all", topology{"node1", "z1"}, []discoveryv1.Endpoint{hinted(a, "node1", "z1"), hinted(b, "node2")}, []string{a, b}},
		{"no hint for the zone: all", topology{"node1", "z9"}, []discoveryv1.Endpoint{hinted(a, "node1", "z1"), hinted(b, "node2", "z2")}, []string{a, b}},
		{"node without zone: all", topology{"node1", ""}, []discoveryv1.Endpoint{hinted(a, "node1", "z1"), hinted(b, "node2", "z2")}, []string{a, b}},
		{"not ready ones do not count", topology{"node1", "z2"}, []discoveryv1.Endpoint{hinted(a, "node1", "z1"), hinted(b, "node2", "z2"), func() discoveryv1.Endpoint {
			e := hinted(c, "node3")
			notReady(&e)
			return e
		}()}, []string{b}},
		{"terminating fallback ignores hints", topology{"node1", "z1"}, []discoveryv1.Endpoint{func() discoveryv1.Endpoint {
			e := hinted(b, "node2", "z2")
			terminating(true)(&e)
			return e
		}()}, []string{b}},
		{"node hints first", topology{"node2", "z1"}, []discoveryv1.Endpoint{func() discoveryv1.Endpoint {
			e := hinted(a, "node1", "z1")
			e.Hints.ForNodes = []discoveryv1.ForNode{{Name: "node1"}}
			return e
		}(), func() discoveryv1.Endpoint {
			e := hinted(b, "node2", "z1")
			e.Hints.ForNodes = []discoveryv1.ForNode{{Name: "node2"}}
			return e
		}()}, []string{b}},
	} {
		got, problems := endpointsFor("http", flows.TCP, flows.IPv4, slice(tc.eps...), tc.topo)
		assert.Empty(t, problems)
		assert.Equal(t, tc.want, ips(got), tc.name)
	}
}

// The node's zone label decides: a label change reconverts the Services (a full sync).
func TestTopologyFollowsNodeZone(t *testing.T) {
	f := newFixture(t)
	zone := func(z string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Labels = map[string]string{corev1.LabelTopologyZone: z} }
	}
	n1 := makeNode("node1", "192.168.0.1", "10.244.1.0/24", ready, zone("z1"))
	f.r.OnNode(nil, n1)
	f.r.OnNode(nil, makeNode("node2", "192.168.0.2", "10.244.2.0/24", ready))
	f.r.OnService(nil, makeService("ns1", "web", 30800))
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "web", "web-a", hinted("10.244.1.5", "node1", "z1"), hinted("10.244.2.5", "node2", "z2")))
	require.NoError(t, f.sync())
	eps := func() []string {
		var out []string
		for _, e := range f.r.model.st.Services[svcKey("web")].Endpoints {
			out = append(out, e.IP.String())
		}
		return out
	}
	assert.Equal(t, []string{"10.244.1.5"}, eps())
	f.r.OnNode(n1, makeNode("node1", "192.168.0.1", "10.244.1.0/24", ready, zone("z2")))
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"10.244.2.5"}, eps())
}

// An endpoint whose nodeName disagrees with the Node owning its pod CIDR is routed by the pod
// CIDR, reported with a SourceIPWarning and shown on the owner; another Service listing the
// same address keeps its own view.
func TestEndpointNodeNameDisagreement(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	f.r.OnService(nil, makeService("ns1", "web", 30900))
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "web", "web-a", ep("10.244.2.5", "node3")))
	f.r.OnService(nil, makeService("ns2", "other", 30901))
	f.r.OnEndpointSlice(nil, makeSlice("ns2", "other", "other-a", ep("10.244.2.5", "node2")))
	require.NoError(t, f.sync())
	assert.Contains(t, f.eventText(), ReasonWarning+": endpoint 10.244.2.5:8080 says nodeName node3, but its address is inside the pod CIDR of Node node2")
	assert.Equal(t, 1, strings.Count(f.eventText(), "says nodeName"), "only the Service whose slice disagrees: %s", f.eventText())
	for _, s := range f.r.Report().Services {
		require.Len(t, s.Ports, 1)
		require.Len(t, s.Ports[0].Endpoints, 1)
		assert.Equal(t, "node2", s.Ports[0].Endpoints[0].Node, s.Name)
		if s.Name == "web" {
			assert.Len(t, s.Warnings, 1)
		} else {
			assert.Empty(t, s.Warnings)
		}
	}
}
