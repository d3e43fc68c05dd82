package agent

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

func TestServicePorts(t *testing.T) {
	e := func(ip string, port uint16, node string) flows.Endpoint {
		return flows.Endpoint{IP: addr(ip), Port: port, NodeName: node}
	}
	base := func(mods ...func(*flows.ServicePort)) flows.ServicePort {
		sp := flows.ServicePort{Namespace: "ns1", Name: "svc1", PortName: "http", Protocol: flows.TCP, Port: 80, NodePort: 30080}
		for _, m := range mods {
			m(&sp)
		}
		return sp
	}
	slice := makeSlice("ns1", "svc1", "svc1-a", ep("10.244.1.5", "node1"), ep("10.244.2.5", "node2"))
	tests := []struct {
		name         string
		svc          *corev1.Service
		slices       []*discoveryv1.EndpointSlice
		want         []flows.ServicePort
		wantProblems int
	}{
		{
			name:   "opted-in NodePort",
			svc:    makeService("ns1", "svc1", 30080),
			slices: []*discoveryv1.EndpointSlice{slice},
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.Endpoints = []flows.Endpoint{e("10.244.1.5", 8080, "node1"), e("10.244.2.5", 8080, "node2")}
			})},
		},
		{
			name: "loadBalancerSourceRanges: valid IPv4 kept (masked, sorted), IPv6 ignored, malformed reported",
			svc: makeService("ns1", "svc1", 30080, func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerSourceRanges = []string{" 203.0.113.7/24", "2001:db8::/32", "10.0.0.0/8", "not-a-cidr", "203.0.113.0/24"}
			}),
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.FilterSources = true
				sp.SourceRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("203.0.113.0/24")}
			})},
			wantProblems: 1,
		},
		{
			name: "loadBalancerSourceRanges all malformed: deny all, never allow all",
			svc: makeService("ns1", "svc1", 30080, func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.LoadBalancerSourceRanges = []string{"10.0.0.0/33", "2001:db8::/32"}
			}),
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.FilterSources = true
			})},
			wantProblems: 2,
		},
		{
			name:   "no annotation",
			svc:    makeService("ns1", "svc1", 30080, func(s *corev1.Service) { s.Annotations = nil }),
			slices: []*discoveryv1.EndpointSlice{slice},
		},
		{
			name:   "annotation false",
			svc:    makeService("ns1", "svc1", 30080, func(s *corev1.Service) { s.Annotations[AnnotationPreserveSourceIP] = "false" }),
			slices: []*discoveryv1.EndpointSlice{slice},
		},
		{
			name: "ETP Local ignored with a problem",
			svc: makeService("ns1", "svc1", 30080, func(s *corev1.Service) {
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}),
			slices:       []*discoveryv1.EndpointSlice{slice},
			wantProblems: 1,
		},
		{
			name: "ClusterIP without externalIPs ignored",
			svc: makeService("ns1", "svc1", 0, func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeClusterIP
			}),
			wantProblems: 1,
		},
		{
			name: "ETP unset counts as Cluster; ClusterIP with externalIPs",
			svc: makeService("ns1", "svc1", 0, func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeClusterIP
				s.Spec.ExternalTrafficPolicy = ""
				s.Spec.ExternalIPs = []string{"198.51.100.20", "198.51.100.10", "198.51.100.10"}
			}),
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.NodePort = 0
				sp.ExternalIPs = []netip.Addr{addr("198.51.100.10"), addr("198.51.100.20")}
			})},
		},
		{
			name: "LoadBalancer ingress IPs, hostname skipped",
			svc: makeService("ns1", "svc1", 30080, func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.7"}, {Hostname: "lb.example.com"}}
			}),
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.LoadBalancerIPs = []netip.Addr{addr("198.51.100.7")}
			})},
		},
		{
			name: "ipMode Proxy is not an entry point (a problem says so); VIP and unset are",
			svc: makeService("ns1", "svc1", 30080, func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				proxy, vip := corev1.LoadBalancerIPModeProxy, corev1.LoadBalancerIPModeVIP
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
					{IP: "198.51.100.8", IPMode: &proxy}, {IP: "198.51.100.7", IPMode: &vip}, {IP: "198.51.100.9"}}
			}),
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.LoadBalancerIPs = []netip.Addr{addr("198.51.100.7"), addr("198.51.100.9")}
			})},
			wantProblems: 1,
		},
		{
			name: "bad IPs are problems, the rest converts",
			svc: makeService("ns1", "svc1", 30080, func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ExternalIPs = []string{"not-an-ip", "2001:db8::1"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "300.1.1.1"}}
			}),
			slices: []*discoveryv1.EndpointSlice{makeSlice("ns1", "svc1", "svc1-a", ep("10.244.1.5", "node1"), ep("bogus", "node1"))},
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.Endpoints = []flows.Endpoint{e("10.244.1.5", 8080, "node1")}
			})},
			wantProblems: 4,
		},
		{
			name:   "not-ready endpoints skipped",
			svc:    makeService("ns1", "svc1", 30080),
			slices: []*discoveryv1.EndpointSlice{makeSlice("ns1", "svc1", "svc1-a", ep("10.244.1.5", "node1"), ep("10.244.1.6", "node1", notReady))},
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.Endpoints = []flows.Endpoint{e("10.244.1.5", 8080, "node1")}
			})},
		},
		{
			name: "no ready endpoint: serving terminating ones (KEP-1669)",
			svc:  makeService("ns1", "svc1", 30080),
			slices: []*discoveryv1.EndpointSlice{makeSlice("ns1", "svc1", "svc1-a",
				ep("10.244.1.5", "node1", terminating(true)), ep("10.244.1.6", "node1", terminating(false)), ep("10.244.1.7", "node1", notReady))},
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.Endpoints = []flows.Endpoint{e("10.244.1.5", 8080, "node1")}
			})},
		},
		{
			name: "ready endpoints win over terminating ones",
			svc:  makeService("ns1", "svc1", 30080),
			slices: []*discoveryv1.EndpointSlice{makeSlice("ns1", "svc1", "svc1-a",
				ep("10.244.1.5", "node1", terminating(true)), ep("10.244.2.5", "node2"))},
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.Endpoints = []flows.Endpoint{e("10.244.2.5", 8080, "node2")}
			})},
		},
		{
			name: "duplicates across slices deduplicated, IPv6 slices ignored by an IPv4-only Service",
			svc:  makeService("ns1", "svc1", 30080),
			slices: []*discoveryv1.EndpointSlice{
				makeSlice("ns1", "svc1", "svc1-a", ep("10.244.1.5", "node1")),
				makeSlice("ns1", "svc1", "svc1-b", ep("10.244.1.5", "node1")),
				func() *discoveryv1.EndpointSlice {
					s := makeSlice("ns1", "svc1", "svc1-v6", ep("fd00::5", "node1"))
					s.AddressType = discoveryv1.AddressTypeIPv6
					return s
				}(),
			},
			want: []flows.ServicePort{base(func(sp *flows.ServicePort) {
				sp.Endpoints = []flows.Endpoint{e("10.244.1.5", 8080, "node1")}
			})},
		},
		{
			name: "named ports matched by name; UDP; SCTP skipped",
			svc: makeService("ns1", "svc1", 30080, func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: 30053},
					{Name: "web", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080},
					{Name: "sig", Protocol: corev1.ProtocolSCTP, Port: 9, NodePort: 30009},
				}
			}),
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := makeSlice("ns1", "svc1", "svc1-a", ep("10.244.1.5", "node1"))
				s.Ports = []discoveryv1.EndpointPort{
					{Name: ptr.To("web"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)},
					{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](5353)},
					{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](5300)},
				}
				return s
			}()},
			want: []flows.ServicePort{
				base(func(sp *flows.ServicePort) {
					sp.PortName, sp.Protocol, sp.Port, sp.NodePort = "dns", flows.UDP, 53, 30053
					sp.Endpoints = []flows.Endpoint{e("10.244.1.5", 5353, "node1")}
				}),
				base(func(sp *flows.ServicePort) {
					sp.PortName = "web"
					sp.Endpoints = []flows.Endpoint{e("10.244.1.5", 8080, "node1")}
				}),
			},
		},
		{
			name: "slice port without number is a problem",
			svc:  makeService("ns1", "svc1", 30080),
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := makeSlice("ns1", "svc1", "svc1-a", ep("10.244.1.5", "node1"))
				s.Ports[0].Port = nil
				return s
			}()},
			want:         []flows.ServicePort{base()},
			wantProblems: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := ServicePorts(tc.svc, tc.slices)
			assert.Equal(t, tc.want, got)
			assert.Len(t, problems, tc.wantProblems, "problems: %q", problems)
		})
	}
}

func TestConvertNode(t *testing.T) {
	n, err := ConvertNode(makeNode("node2", "192.168.0.2", "10.244.2.0/24"))
	require.NoError(t, err)
	assert.Equal(t, flows.Node{Name: "node2", InternalIP: addr("192.168.0.2"),
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")},
		Rank:     flows.Rank{Tier: 1}}, n, "a Node that is not Ready ranks one tier lower")
	ready, err := ConvertNode(makeNode("node2", "192.168.0.2", "10.244.2.0/24", func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	}))
	require.NoError(t, err)
	assert.Equal(t, 0, ready.Rank.Tier)

	v6, err := ConvertNode(makeNode("node3", "fd00::3", "10.244.3.0/24", func(n *corev1.Node) {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::33"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.3"})
	}))
	require.NoError(t, err, "an IPv6-only-underlay node")
	assert.Equal(t, addr("fd00::3"), v6.InternalIP, "its first IPv6 InternalIP (no IPv4 InternalIP; an ExternalIP is no underlay address)")
	_, err = ConvertNode(makeNode("node3", "node3.example", "10.244.3.0/24"))
	require.Error(t, err)
	assert.Equal(t, "node node3 has no InternalIP (the Geneve underlay address), so the node is not programmed", err.Error())
	_, err = ConvertNode(makeNode("node3", "192.168.0.3", "bad"))
	assert.Error(t, err)
}

func TestNodePortAddresses(t *testing.T) {
	n := makeNode("node1", "192.168.0.1", "10.244.1.0/24", func(n *corev1.Node) {
		n.Status.Addresses = append(n.Status.Addresses,
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.1"},
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "fd00::1"})
	})
	assert.Equal(t, []netip.Addr{addr("192.168.0.1"), addr("198.51.100.1"), addr("fd00::1")}, NodePortAddresses(n, nil))
	assert.Equal(t, []netip.Addr{addr("192.168.0.1"), addr("fd00::1")},
		NodePortAddresses(n, []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")}),
		"a family without a prefix in --nodeport-addresses keeps all its addresses (kube-proxy's rule)")
	assert.Nil(t, NodePortAddresses(nil, nil))
}

func TestLocalPod(t *testing.T) {
	pp := PodPort{Namespace: "ns1", Name: "web-0", Interface: "veth1", OFPort: 10}
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00::5"}}}}
	p, ok, problems := LocalPod(pp, pod)
	assert.True(t, ok)
	assert.Empty(t, problems)
	assert.Equal(t, []netip.Addr{addr("10.244.1.5"), addr("fd00::5")}, p.IPs, "both families")
	assert.Equal(t, 0, p.Rank.Tier, "the Pod confirms the IPs of both families")

	pp.IPs = []netip.Addr{addr("10.244.1.9")}
	p, ok, _ = LocalPod(pp, pod)
	assert.True(t, ok)
	assert.Equal(t, []netip.Addr{addr("10.244.1.9")}, p.IPs, "the port's own IPs win")

	_, ok, _ = LocalPod(PodPort{Namespace: "ns1", Name: "x", OFPort: 11}, nil)
	assert.False(t, ok, "no IP yet")

	pp.IPs, pp.Chained = []netip.Addr{addr("10.88.1.7")}, true
	p, ok, _ = LocalPod(pp, pod)
	assert.True(t, ok)
	assert.True(t, p.Chained, "a chained egress interface stays chained")
	assert.Equal(t, []netip.Addr{addr("10.88.1.7")}, p.IPs, "the main CNI's address, outside the pod CIDRs")
}

func TestClaimsConflict(t *testing.T) {
	c := newClaims()
	a := nn("ns1", "a")
	b := nn("ns1", "b")
	spA, _ := ServicePorts(makeService("ns1", "a", 30080), nil)
	spB, _ := ServicePorts(makeService("ns1", "b", 30080), nil)
	assert.Empty(t, c.set(a, claimRank{name: a}, spA))
	assert.Equal(t, []types.NamespacedName{a}, c.set(b, claimRank{name: b}, spB))

	got, problems := c.resolve(a, spA)
	assert.Equal(t, uint16(30080), got[0].NodePort)
	assert.Empty(t, problems)
	got, problems = c.resolve(b, spB)
	assert.Equal(t, uint16(0), got[0].NodePort, "the younger (here: later name) loses")
	assert.Len(t, problems, 1)

	assert.Equal(t, []types.NamespacedName{b}, c.set(a, claimRank{}, nil), "removing a affects b")
	got, problems = c.resolve(b, spB)
	assert.Equal(t, uint16(30080), got[0].NodePort)
	assert.Empty(t, problems)
}

// C36: a pod recreated under the same name while its predecessor's port lingers.
func TestChoosePodPort(t *testing.T) {
	old := PodPort{Namespace: "ns1", Name: "web-0", Interface: "veth-old", OFPort: 12, UID: "uid-1"}
	nw := PodPort{Namespace: "ns1", Name: "web-0", Interface: "veth-new", OFPort: 11, UID: "uid-2"}
	anon := PodPort{Namespace: "ns1", Name: "web-0", Interface: "veth-anon", OFPort: 13}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web-0", UID: "uid-2"}}

	pp, ok, ignored := ChoosePodPort([]PodPort{old, nw}, pod)
	require.True(t, ok)
	assert.Equal(t, "veth-new", pp.Interface, "the port of the Pod's UID, although older")
	require.Len(t, ignored, 1)
	assert.Contains(t, ignored[0], "veth-old (ofport 12) belongs to a previous pod (UID uid-1, the Pod's is uid-2)")

	_, ok, _ = ChoosePodPort([]PodPort{old}, pod)
	assert.False(t, ok, "only a predecessor's port: nothing is programmed")

	pp, ok, ignored = ChoosePodPort([]PodPort{anon, nw}, pod)
	require.True(t, ok)
	assert.Equal(t, "veth-new", pp.Interface, "a port with the Pod's UID wins over one without")
	assert.Len(t, ignored, 1)

	pp, ok, _ = ChoosePodPort([]PodPort{old, nw, anon}, nil)
	require.True(t, ok)
	assert.Equal(t, "veth-anon", pp.Interface, "no Pod object: the newest port")

	pp, ok, ignored = ChoosePodPort([]PodPort{nw}, pod)
	require.True(t, ok)
	assert.Equal(t, "veth-new", pp.Interface)
	assert.Empty(t, ignored)
}

// A Node whose Ready condition is present and not True is Down (its connections may be taken
// over by another ingress node, flows.BuildNode); without a Ready condition it is not. A change
// of the Ready status alone is not a no-op update (nodeEqual), a heartbeat is.
func TestConvertNodeDown(t *testing.T) {
	n := makeNode("node2", "192.168.0.2", "10.244.2.0/24")
	c, err := ConvertNode(n)
	require.NoError(t, err)
	assert.False(t, c.Down, "no Ready condition: not down")
	for status, down := range map[corev1.ConditionStatus]bool{corev1.ConditionTrue: false, corev1.ConditionFalse: true, corev1.ConditionUnknown: true} {
		m := n.DeepCopy()
		m.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
		c, err := ConvertNode(m)
		require.NoError(t, err)
		assert.Equal(t, down, c.Down, "Ready=%s", status)
		assert.False(t, nodeEqual(n, m), "Ready=%s after no condition must not be a no-op update", status)
		hb := m.DeepCopy()
		hb.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
		assert.True(t, nodeEqual(m, hb), "a heartbeat is a no-op update")
	}
}

func TestTrimObjectKeepsWhatTheAgentReads(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo", Labels: map[string]string{"app": "web"},
		Annotations:   map[string]string{AnnotationPreserveSourceIP: "true", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	if _, err := TrimObject(svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Annotations) != 1 || svc.Annotations[AnnotationPreserveSourceIP] != "true" || svc.ManagedFields != nil || svc.Labels != nil {
		t.Errorf("trimmed Service: %+v", svc.ObjectMeta)
	}
	proxied := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", LabelServiceProxyName: "other", LabelHeadless: ""}}}
	if _, err := TrimObject(proxied); err != nil {
		t.Fatal(err)
	}
	if len(proxied.Labels) != 2 || proxied.Labels[LabelServiceProxyName] != "other" || proxied.Labels[LabelHeadless] != "" {
		t.Errorf("trimmed Service labels: %v (want only %s and %s, which Eligible reads)", proxied.Labels, LabelServiceProxyName, LabelHeadless)
	}
	node := "node2"
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "x", "app": "web"}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.2.5"}, NodeName: &node, Zone: &node,
			TargetRef: &corev1.ObjectReference{Name: "p"}, Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}}}}
	if _, err := TrimObject(sl); err != nil {
		t.Fatal(err)
	}
	if len(sl.Labels) != 1 || sl.Labels[discoveryv1.LabelServiceName] != "web" {
		t.Errorf("trimmed EndpointSlice labels: %v", sl.Labels)
	}
	if e := sl.Endpoints[0]; e.Zone != nil || e.TargetRef != nil || *e.NodeName != "node2" || e.Addresses[0] != "10.244.2.5" ||
		e.Hints == nil || len(e.Hints.ForZones) != 1 || e.Hints.ForZones[0].Name != "zone-a" {
		t.Errorf("trimmed endpoint: %+v", e)
	}
	n := &corev1.Node{Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"a"}}},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	if _, err := TrimObject(n); err != nil {
		t.Fatal(err)
	}
	if n.Status.Images != nil || len(n.Status.Conditions) != 1 || nodeReady(n) != corev1.ConditionTrue {
		t.Errorf("trimmed Node status: %+v", n.Status)
	}
}

// sessionAffinity ClientIP becomes the port's AffinitySeconds: timeoutSeconds, or 10800 when
// unset; None is 0.
func TestAffinitySeconds(t *testing.T) {
	secs := func(v int32) *corev1.Service {
		s := plainService("s", 30080, func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP })
		if v != 0 {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &v}}
		}
		return s
	}
	assert.Equal(t, uint32(10800), AffinitySeconds(secs(0)))
	assert.Equal(t, uint32(60), AffinitySeconds(secs(60)))
	assert.Equal(t, uint32(0), AffinitySeconds(plainService("s", 30080)))
	ports, _ := Selector{Mode: PreserveAll}.ServicePorts(secs(30), nil)
	require.Len(t, ports, 1)
	assert.Equal(t, uint32(30), ports[0].AffinitySeconds)
}
