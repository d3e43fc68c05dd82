package agent

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ofctltest"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

// newCTReconciler returns a Reconciler whose conntrack is the fake br-ex.
func (f *fixture) newCTReconciler(mod ...func(*ReconcilerConfig)) *Reconciler {
	cfg := ReconcilerConfig{
		NodeName:  thisNode,
		Bridges:   map[flows.Bridge]FlowBridge{flows.BrEx: f.ex, flows.BrInt: f.in},
		Dataplane: f.dp,
		HasSynced: func() bool { return f.synced },
		Events:    f.events,
		Conntrack: f.ex,
	}
	for _, m := range mod {
		m(&cfg)
	}
	return NewReconciler(cfg)
}

func udpService(ns, name string, nodePort int32) *corev1.Service {
	return makeService(ns, name, nodePort, func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, NodePort: nodePort}}
	})
}

func udpSlice(ns, svc, name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	s := makeSlice(ns, svc, name, eps...)
	s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To[int32](8080)}}
	return s
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func (f *fixture) seedNodes(r *Reconciler) {
	r.OnNode(nil, makeNode("node1", "192.168.0.1", "10.244.1.0/24", ready))
	r.OnNode(nil, makeNode("node2", "192.168.0.2", "10.244.2.0/24", ready))
	r.OnPod(nil, &corev1.Pod{ObjectMeta: metaNS("ns1", "web-0"), Spec: corev1.PodSpec{NodeName: thisNode},
		Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}}})
}

func ready(n *corev1.Node) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
}

func (f *fixture) flowText() string { return strings.Join(f.ex.Flows(), "\n") }

// UDP: an endpoint removed from a Service port (in a partial and in a full sync) and a deleted
// Service port flush the ZoneService entries whose reply source is that endpoint, behind each entry
// point of the port; TCP endpoints are never flushed.
func TestUDPRemovedEndpointFlushesConntrack(t *testing.T) {
	f := newFixture(t)
	f.r = f.newCTReconciler()
	f.seedNodes(f.r)
	f.r.OnService(nil, udpService("ns1", "dns", 31000))
	s1 := udpSlice("ns1", "dns", "dns-a", ep("10.244.1.5", "node1"), ep("10.244.2.7", "node2"))
	f.r.OnEndpointSlice(nil, s1)
	f.r.OnService(nil, makeService("ns1", "web", 30000))
	w1 := makeSlice("ns1", "web", "web-a", ep("10.244.1.5", "node1"), ep("10.244.2.7", "node2"))
	f.r.OnEndpointSlice(nil, w1)
	require.NoError(t, f.sync())
	assert.Empty(t, f.ex.Flushes())

	// Partial sync: 10.244.2.7 leaves both Services.
	s2 := udpSlice("ns1", "dns", "dns-a", ep("10.244.1.5", "node1"))
	f.r.OnEndpointSlice(s1, s2)
	w2 := makeSlice("ns1", "web", "web-a", ep("10.244.1.5", "node1"))
	f.r.OnEndpointSlice(w1, w2)
	require.NoError(t, f.sync())
	assert.Equal(t, []flows.ConntrackFilter{{Zone: flows.ZoneService, Protocol: flows.UDP, ReplySrc: ap("10.244.2.7:8080"), OrigDst: ap("192.168.0.1:31000")}}, f.ex.Flushes())

	// Full sync: 10.244.2.8 joins and leaves between two full syncs (the second one sees it go).
	s3 := udpSlice("ns1", "dns", "dns-a", ep("10.244.1.5", "node1"), ep("10.244.2.8", "node2"))
	f.r.OnEndpointSlice(s2, s3)
	require.NoError(t, f.sync())
	f.r.OnEndpointSlice(s3, s2)
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	require.Len(t, f.ex.Flushes(), 2)
	assert.Equal(t, ap("10.244.2.8:8080"), f.ex.Flushes()[1].ReplySrc)

	// The Service goes away: every endpoint is flushed; no drain for UDP.
	f.r.OnService(udpService("ns1", "dns", 31000), nil)
	require.NoError(t, f.sync())
	require.Len(t, f.ex.Flushes(), 3)
	assert.Equal(t, ap("10.244.1.5:8080"), f.ex.Flushes()[2].ReplySrc)
	assert.NotContains(t, f.flowText(), "priority=90")
	n := len(f.ex.Flushes())
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Len(t, f.ex.Flushes(), n, "nothing flushed twice")
}

// A TCP entry point whose Service port went away keeps forwarding (drain flow set, priority below
// the live entry flows) while ZoneService has live connections to it, also across an agent
// restart; the drain ends at the first full sync that finds none, or when another Service serves
// the entry point.
func TestDrainKeepsEstablishedConnections(t *testing.T) {
	f := newFixture(t)
	f.r = f.newCTReconciler()
	f.seedNodes(f.r)
	svc := makeService("ns1", "web", 30000)
	f.r.OnService(nil, svc)
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "web", "web-a", ep("10.244.2.7", "node2")))
	require.NoError(t, f.sync())
	f.ex.AddConn(ofctltest.Conn{Zone: flows.ZoneService, Protocol: flows.TCP, OrigDst: ap("192.168.0.1:30000"), ReplySrc: ap("10.244.2.7:8080")})

	noAnnot := makeService("ns1", "web", 30000, func(s *corev1.Service) { delete(s.Annotations, AnnotationPreserveSourceIP) })
	f.r.OnService(svc, noAnnot)
	require.NoError(t, f.sync())
	drain := flows.DrainKey(flows.EntryPoint{Protocol: flows.TCP, Addr: ap("192.168.0.1:30000")})
	require.Contains(t, f.r.Applied(flows.BrEx), drain)
	assert.NotContains(t, f.r.Applied(flows.BrEx), svcKey("web"))
	assert.Contains(t, f.flowText(), "priority=90,tcp,nw_dst=192.168.0.1,tp_dst=30000")
	assert.Empty(t, f.ex.Flushes(), "TCP entries are not flushed")

	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Contains(t, f.r.Applied(flows.BrEx), drain, "a live connection keeps the drain")

	// A restarted agent keeps the drain and writes nothing.
	n := f.bundles()
	f.r = f.newCTReconciler()
	f.seedNodes(f.r)
	f.r.OnService(nil, noAnnot)
	f.r.OnEndpointSlice(nil, makeSlice("ns1", "web", "web-a", ep("10.244.2.7", "node2")))
	require.NoError(t, f.sync())
	assert.Equal(t, n, f.bundles(), "the restarted agent rewrote flows")
	assert.Contains(t, f.r.Applied(flows.BrEx), drain)

	// The connection ends: the next full sync removes the drain.
	require.NoError(t, f.ex.FlushConntrack(f.ctx, flows.ConntrackFilter{Zone: flows.ZoneService, Protocol: flows.TCP, ReplySrc: ap("10.244.2.7:8080")}))
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.NotContains(t, f.r.Applied(flows.BrEx), drain)
	assert.NotContains(t, f.flowText(), "priority=90")

	// Served again, then gone again with a connection: drained; a new Service on the same
	// NodePort ends the drain in the partial sync.
	f.r.OnService(noAnnot, svc)
	require.NoError(t, f.sync())
	f.ex.AddConn(ofctltest.Conn{Zone: flows.ZoneService, Protocol: flows.TCP, OrigDst: ap("192.168.0.1:30000"), ReplySrc: ap("10.244.2.7:8080")})
	f.r.OnService(svc, nil)
	require.NoError(t, f.sync())
	require.Contains(t, f.r.Applied(flows.BrEx), drain)
	f.r.OnService(nil, makeService("ns1", "other", 30000))
	require.NoError(t, f.sync())
	assert.NotContains(t, f.r.Applied(flows.BrEx), drain)
	assert.Contains(t, f.flowText(), "priority=100,tcp,nw_dst=192.168.0.1,tp_dst=30000")
}

// A drain ends after DrainPeriod even while connections remain; a drain cookie of a previous agent
// without connections is removed at the first full sync.
func TestDrainPeriodAndStaleDrainCookie(t *testing.T) {
	f := newFixture(t)
	f.r = f.newCTReconciler(func(c *ReconcilerConfig) { c.DrainPeriod = time.Nanosecond })
	f.seedNodes(f.r)
	svc := makeService("ns1", "web", 30000)
	f.r.OnService(nil, svc)
	require.NoError(t, f.sync())
	f.ex.AddConn(ofctltest.Conn{Zone: flows.ZoneService, Protocol: flows.TCP, OrigDst: ap("192.168.0.1:30000"), ReplySrc: ap("10.244.2.7:8080")})
	f.r.OnService(svc, nil)
	require.NoError(t, f.sync())
	assert.Contains(t, f.flowText(), "priority=90")
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.NotContains(t, f.flowText(), "priority=90", "maximum drain period")

	fs, err := flows.BuildServiceDrain(flows.EntryPoint{Protocol: flows.TCP, Addr: ap("203.0.113.9:80")})
	require.NoError(t, err)
	p := flows.Plan{Bridge: flows.BrEx, Add: []*flows.FlowSet{fs}}
	require.NoError(t, f.ex.Bundle(f.ctx, p.Messages()))
	f.r = f.newCTReconciler()
	f.seedNodes(f.r)
	require.NoError(t, f.sync())
	assert.NotContains(t, f.flowText(), "203.0.113.9")
}

// Two pod ports with one IP: the one whose Pod object lists the IP wins, whatever the arrival
// order, over one whose Pod object does not list it yet (status.podIPs is written after the CNI
// ADD); the loser is not programmed at all, nothing is rewritten in steady state or after a
// restart, and the loser gets its flows when the winner goes away.
func TestDuplicatePodIP(t *testing.T) {
	evilPod := &corev1.Pod{ObjectMeta: metaNS("ns1", "evil"), Spec: corev1.PodSpec{NodeName: thisNode}}
	evil := PodPort{Namespace: "ns1", Name: "evil", Interface: "evil0", OFPort: 11,
		MAC: []byte{0x0a, 0x58, 10, 244, 1, 99}, IPs: []netip.Addr{addr("10.244.1.5")}}
	final := map[bool]string{}
	for _, evilFirst := range []bool{false, true} {
		f := newFixture(t)
		real := f.dp.podPorts[0]
		if evilFirst {
			f.dp.podPorts = []PodPort{evil}
		} else {
			f.dp.podPorts = []PodPort{real}
		}
		f.seedNodes(f.r)
		f.r.OnPod(nil, evilPod)
		require.NoError(t, f.sync())
		f.dp.podPorts = []PodPort{real, evil}
		f.r.RequestFullSync()
		require.NoError(t, f.sync())
		in := strings.Join(f.in.Flows(), "\n")
		assert.Contains(t, in, "load:0xa->NXM_NX_REG1[]", "the confirmed pod is delivered to")
		assert.NotContains(t, in, "in_port=11", "the unconfirmed pod is not programmed")
		assert.NotContains(t, in, "load:0xb->NXM_NX_REG1[]")
		final[evilFirst] = in

		n := f.bundles()
		f.r.RequestFullSync()
		require.NoError(t, f.sync())
		f.r = f.newReconciler()
		f.seedNodes(f.r)
		f.r.OnPod(nil, evilPod)
		require.NoError(t, f.sync())
		assert.Equal(t, n, f.bundles(), "steady state or restart rewrote flows")

		f.dp.podPorts = []PodPort{evil}
		f.r.RequestFullSync()
		require.NoError(t, f.sync())
		assert.Contains(t, strings.Join(f.in.Flows(), "\n"), "in_port=11", "the loser gets its flows back")
	}
	assert.Equal(t, final[false], final[true], "the winner depends on the arrival order")
}

// A Node that is not Ready and claims a Ready node's pod CIDR loses the Geneve route, in a partial
// sync and across full syncs, and gets it when the Ready node goes away.
func TestOverlappingNodeCIDR(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	require.NoError(t, f.sync())
	ghost := makeNode("aaa-ghost", "192.168.0.99", "10.244.2.0/24")
	f.r.OnNode(nil, ghost)
	require.NoError(t, f.sync())
	in := strings.Join(f.in.Flows(), "\n")
	assert.Contains(t, in, "set_field:192.168.0.2->tun_dst")
	assert.NotContains(t, in, "set_field:192.168.0.99->tun_dst", "the ghost loses the route")
	n := f.bundles()
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Equal(t, n, f.bundles())
	f.r.OnNode(makeNode("node2", "192.168.0.2", "10.244.2.0/24", ready), nil)
	require.NoError(t, f.sync())
	assert.Contains(t, strings.Join(f.in.Flows(), "\n"), "set_field:192.168.0.99->tun_dst")
}

// An externalIP equal to a node address is refused outright (CVE-2020-8554 class): the NodePort
// Service keeps its NodePort whatever the order, the other Service gets a SourceIPRefused Event,
// and nothing flaps.
func TestExternalIPOnNodeAddressRefused(t *testing.T) {
	for _, order := range [][]string{{"npa", "npb"}, {"npb", "npa"}} {
		f := newFixture(t)
		f.r = f.newReconcilerWith(func(c *ReconcilerConfig) { c.ExternalIPCIDRs = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")} })
		f.seedNodes(f.r)
		svcs := map[string]*corev1.Service{
			"npa": makeService("ns1", "npa", 30310),
			"npb": makeService("ns1", "npb", 0, func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeClusterIP
				s.Spec.ExternalIPs = []string{"192.168.0.1"}
				s.Spec.Ports[0].Port = 30310
				s.Spec.Ports[0].NodePort = 0
			}),
		}
		for _, name := range order {
			f.r.OnService(nil, svcs[name])
			require.NoError(t, f.sync())
		}
		a, b := f.r.Applied(flows.BrEx)[svcKey("npa")], f.r.Applied(flows.BrEx)[svcKey("npb")]
		assert.Len(t, a.EntryPoints, 1)
		assert.Empty(t, b.EntryPoints, "order %v", order)
		assert.Contains(t, strings.Join(f.events.msgs, "\n"), "SourceIPRefused: externalIP 192.168.0.1 is an address of Node node1")
		n := f.bundles()
		f.r.RequestFullSync()
		require.NoError(t, f.sync())
		assert.Equal(t, n, f.bundles())
	}
}

// Admission of LoadBalancer IPs and externalIPs: the allow-list, node addresses of any node,
// another Service's LoadBalancer IP (opted in or not); refusals follow changes of the nodes and of
// the other Services.
func TestEntryPointAdmission(t *testing.T) {
	f := newFixture(t)
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
		c.ExternalIPCIDRs = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	})
	f.seedNodes(f.r)
	lb := func(ip string) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		}
	}
	ext := func(ips ...string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.ExternalIPs = ips }
	}
	entries := func(name string) []string {
		var out []string
		for _, e := range f.r.Applied(flows.BrEx)[svcKey(name)].EntryPoints {
			out = append(out, e.String())
		}
		return out
	}
	// Allowed externalIP and LB IP; an externalIP outside the allow-list is refused.
	f.r.OnService(nil, makeService("ns1", "a", 30001, lb("203.0.113.1"), ext("198.51.100.7", "203.0.113.9")))
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"192.168.0.1:30001/TCP", "203.0.113.1:80/TCP", "198.51.100.7:80/TCP"}, entries("a"))
	assert.Contains(t, strings.Join(f.events.msgs, "\n"), "SourceIPRefused: externalIP 203.0.113.9 is outside the allowed externalIP ranges (--external-ip-cidrs: 198.51.100.0/24): refused")
	// An LB IP equal to another node's address is refused.
	f.r.OnService(nil, makeService("ns1", "b", 30002, lb("192.168.0.2")))
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30002/TCP"}, entries("b"))
	assert.Contains(t, strings.Join(f.events.msgs, "\n"), "loadBalancer ingress IP 192.168.0.2 is an address of Node node2")
	// An externalIP equal to a not-opted-in Service's LB IP is refused; when that Service lets the
	// IP go, the externalIP is served.
	plain := makeService("ns1", "plain", 30003, lb("198.51.100.50"), func(s *corev1.Service) { s.Annotations = nil })
	f.r.OnService(nil, plain)
	f.r.OnService(nil, makeService("ns1", "c", 30004, ext("198.51.100.50")))
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30004/TCP"}, entries("c"))
	assert.Contains(t, strings.Join(f.events.msgs, "\n"), "externalIP 198.51.100.50 is the LoadBalancer ingress IP of Service ns1/plain")
	f.r.OnService(plain, nil)
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"192.168.0.1:30004/TCP", "198.51.100.50:80/TCP"}, entries("c"))
	// A node taking an externalIP's address takes it from the Service.
	f.r.OnNode(nil, makeNode("node3", "198.51.100.7", "10.244.3.0/24"))
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"192.168.0.1:30001/TCP", "203.0.113.1:80/TCP"}, entries("a"))
}

// A LoadBalancer ingress that turns from ipMode VIP to Proxy (KEP-1860) stops being an entry
// point in the next sync, with a problem that says why; the nodePort stays, and the address is
// neither refused nor claimed (an LB IP equal to a node address is refused as VIP only).
func TestLoadBalancerIPModeProxyNotAnEntryPoint(t *testing.T) {
	f := newFixture(t)
	f.r = f.newReconcilerWith()
	f.seedNodes(f.r)
	lb := func(ip string, mode corev1.LoadBalancerIPMode) func(*corev1.Service) {
		return func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip, IPMode: &mode}}
		}
	}
	entries := func(name string) []string {
		var out []string
		for _, e := range f.r.Applied(flows.BrEx)[svcKey(name)].EntryPoints {
			out = append(out, e.String())
		}
		return out
	}
	vip := makeService("ns1", "a", 30001, lb("203.0.113.1", corev1.LoadBalancerIPModeVIP))
	f.r.OnService(nil, vip)
	require.NoError(t, f.sync())
	assert.ElementsMatch(t, []string{"192.168.0.1:30001/TCP", "203.0.113.1:80/TCP"}, entries("a"))
	assert.Contains(t, f.flowText(), "nw_dst=203.0.113.1")

	proxy := makeService("ns1", "a", 30001, lb("203.0.113.1", corev1.LoadBalancerIPModeProxy))
	f.r.OnService(vip, proxy)
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30001/TCP"}, entries("a"))
	assert.NotContains(t, f.flowText(), "nw_dst=203.0.113.1")
	assert.Contains(t, strings.Join(f.events.msgs, "\n"), `status.loadBalancer.ingress ip "203.0.113.1" skipped: ipMode Proxy`)

	// Proxy on a node's address: not an entry point, so nothing to refuse.
	f.r.OnService(nil, makeService("ns1", "b", 30002, lb("192.168.0.2", corev1.LoadBalancerIPModeProxy)))
	require.NoError(t, f.sync())
	assert.Equal(t, []string{"192.168.0.1:30002/TCP"}, entries("b"))
	assert.NotContains(t, strings.Join(f.events.msgs, "\n"), "loadBalancer ingress IP 192.168.0.2 is an address of Node node2")
}

// The generic guard: two flow sets rendering the same flow (here two Services given the same
// entry point behind the claims index's back) keep one winner, chosen by creationTimestamp.
func TestCollisionGuardPicksOlderService(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	old := makeService("ns1", "zzz-old", 30400)
	old.CreationTimestamp = metav1.NewTime(time.Unix(1000, 0))
	young := makeService("ns1", "aaa-young", 30401)
	young.CreationTimestamp = metav1.NewTime(time.Unix(2000, 0))
	f.r.OnService(nil, young)
	f.r.OnService(nil, old)
	require.NoError(t, f.sync())
	// Bypass the claims index: give the young Service's port the old one's NodePort directly in
	// the model's state, then run the syncer's full pipeline on it.
	youngKey := flows.Key{Kind: flows.KindServicePort, Namespace: "ns1", Name: "aaa-young", Port: "http", Protocol: flows.TCP}
	oldKey := flows.Key{Kind: flows.KindServicePort, Namespace: "ns1", Name: "zzz-old", Port: "http", Protocol: flows.TCP}
	st := f.r.model.st
	sp := st.Services[youngKey]
	sp.NodePort = 30400
	st.SetService(sp)
	fullSync := func() {
		_, err := f.r.syncer.run(f.ctx, st, changes{full: true})
		require.NoError(t, err)
	}
	fullSync()
	ex := f.r.Applied(flows.BrEx)
	assert.Len(t, ex[oldKey].EntryPoints, 1)
	assert.Empty(t, ex[youngKey].EntryPoints)
	assert.Equal(t, 2, f.r.syncer.conflicts.Count(), "table 40 and table 41 flows")
	n := f.bundles()
	fullSync()
	assert.Equal(t, n, f.bundles(), "a second full sync rewrites nothing")
}

// The deep repair restores a flow edited in place (same cookie, same count) at the first full sync
// after RepairPeriod, and not at the first full sync of the agent.
func TestDeepRepairRestoresModifiedFlow(t *testing.T) {
	f := newFixture(t)
	f.r = f.newCTReconciler(func(c *ReconcilerConfig) { c.RepairPeriod = time.Nanosecond })
	f.seedNodes(f.r)
	f.r.OnService(nil, makeService("ns1", "web", 30000))
	require.NoError(t, f.sync())
	n := f.bundles()
	var line string
	var drifted openflow.Flow
	for _, fl := range f.ex.InstalledFlows() {
		if l := fl.String(); strings.Contains(l, "table=41") && strings.Contains(l, "tp_dst=30000") {
			line, drifted = l, fl
		}
	}
	require.NotEmpty(t, line)
	drifted.Actions = []openflow.Action{openflow.Drop{}}
	mod := drifted.String()
	require.NoError(t, f.ex.Bundle(f.ctx, []openflow.Message{openflow.FlowMod{Command: openflow.FlowModifyStrict, Flow: &drifted}}))
	require.Contains(t, f.ex.Flows(), mod)
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Contains(t, f.ex.Flows(), line)
	assert.NotContains(t, f.ex.Flows(), mod)
	assert.Equal(t, n+1+2, f.bundles(), "one repair bundle per bridge")
}

// C36: web-0 is recreated under the same name (new UID and IP) while its predecessor's port
// lingers: delivery moves to the new port as soon as the new Pod object shows its IP, the old
// port gets nothing, and removing the old port afterwards changes nothing.
func TestPodRecreatedWhileOldPortLingers(t *testing.T) {
	f := newFixture(t)
	oldPort := PodPort{Namespace: "ns1", Name: "web-0", Interface: "veth-old", OFPort: 10, UID: "uid-1",
		MAC: []byte{0x0a, 0x58, 10, 244, 1, 5}}
	newPort := PodPort{Namespace: "ns1", Name: "web-0", Interface: "veth-new", OFPort: 11, UID: "uid-2",
		MAC: []byte{0x0a, 0x58, 10, 244, 1, 9}}
	f.dp.podPorts = []PodPort{oldPort}
	f.r.OnNode(nil, makeNode("node1", "192.168.0.1", "10.244.1.0/24", ready))
	oldPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web-0", UID: "uid-1"}, Spec: corev1.PodSpec{NodeName: thisNode},
		Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}}}
	f.r.OnPod(nil, oldPod)
	require.NoError(t, f.sync())
	in := strings.Join(f.in.Flows(), "\n")
	assert.Contains(t, in, "in_port=10,")
	// The successor's port appears (OVSDB change: a full sync) before the old one is deleted.
	f.dp.podPorts = []PodPort{oldPort, newPort}
	newPod := oldPod.DeepCopy()
	newPod.UID = "uid-2"
	newPod.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.9"}}
	f.r.OnPod(oldPod, newPod)
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	in = strings.Join(f.in.Flows(), "\n")
	assert.Contains(t, in, "in_port=11,dl_src=0a:58:0a:f4:01:09,nw_src=10.244.1.9")
	assert.Contains(t, in, "load:0xb->NXM_NX_REG1[]", "delivery to the new port")
	assert.NotContains(t, in, "in_port=10,", "the predecessor's port gets no flows")
	assert.NotContains(t, in, "load:0xa->NXM_NX_REG1[]")
	assert.Contains(t, strings.Join(f.events.msgs, "\n"), "veth-old (ofport 10) belongs to a previous pod (UID uid-1, the Pod's is uid-2)")
	n := f.bundles()
	f.dp.podPorts = []PodPort{newPort}
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Equal(t, n, f.bundles(), "removing the old port changes nothing")
}

// A NodePort outside the cluster's NodePort range (possible in a manifests directory, never through
// the API server) is refused: it could capture a node's own port, e.g. SSH.
func TestNodePortOutsideRangeRefused(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	f.r.OnService(nil, makeService("ns1", "ssh", 22))
	f.r.OnService(nil, makeService("ns1", "web", 30080))
	require.NoError(t, f.sync())
	assert.Empty(t, f.r.Applied(flows.BrEx)[svcKey("ssh")].EntryPoints)
	assert.Len(t, f.r.Applied(flows.BrEx)[svcKey("web")].EntryPoints, 1)
	assert.NotContains(t, f.flowText(), "tp_dst=22,")
	assert.Contains(t, strings.Join(f.events.msgs, "\n"), `SourceIPRefused: nodePort 22 of port "http" is outside the NodePort range 30000-32767 (--service-node-port-range): refused`)
}

// A pod port is programmed from its external_ids (ip_addresses) as soon as its Pod object exists,
// before status.podIPs is written (srcip-cni's ADD waits for these flows, the kubelet writes the
// status after it); a port without a Pod object, or whose UID is not the Pod's, gets no flows.
func TestPodPortNeedsPodObjectNotPodIPs(t *testing.T) {
	f := newFixture(t)
	cni := PodPort{Namespace: "ns1", Name: "new", Interface: "srcipabc", OFPort: 12, UID: "uid-new",
		MAC: []byte{0x0a, 0x58, 10, 244, 1, 7}, IPs: []netip.Addr{addr("10.244.1.7")}}
	f.dp.podPorts = append(f.dp.podPorts, cni)
	f.seedNodes(f.r)
	require.NoError(t, f.sync())
	assert.NotContains(t, strings.Join(f.in.Flows(), "\n"), "in_port=12", "a port without a Pod object got flows")

	wrong := &corev1.Pod{ObjectMeta: metaNS("ns1", "new"), Spec: corev1.PodSpec{NodeName: thisNode}}
	wrong.UID = "uid-other"
	f.r.OnPod(nil, wrong)
	require.NoError(t, f.sync())
	assert.NotContains(t, strings.Join(f.in.Flows(), "\n"), "in_port=12", "a port of another UID got flows")

	pod := wrong.DeepCopy()
	pod.UID = "uid-new"
	f.r.OnPod(wrong, pod)
	require.NoError(t, f.sync())
	in := strings.Join(f.in.Flows(), "\n")
	assert.Contains(t, in, "in_port=12", "the pod is not programmed without status.podIPs")
	assert.Contains(t, in, "nw_src=10.244.1.7")
}

// A node that becomes the gateway of an egress IP flushes its SNAT entries of that IP (TCP and
// UDP, ZoneEgress or ZoneEgress6, reply tuple to the egress IP) before announcing it: entries of
// an earlier term as its gateway are stale and would swallow the SYN-ACK of a new connection on
// the same translated tuple. Once per term: not while it stays the gateway, again after it lost
// and regained the role; never for another node's egress IP.
func TestEgressTakeoverFlushesStaleConntrack(t *testing.T) {
	f := newFixture(t)
	r := f.newCTReconciler()
	v4, v6 := netip.MustParseAddr("192.0.2.50"), netip.MustParseAddr("2001:db8::50")
	egress := func(gw4, gw6 string) {
		r.model.st.Egress = map[netip.Addr]flows.EgressIP{
			v4: {IP: v4, Policy: "p", Gateway: gw4},
			v6: {IP: v6, Policy: "p", Gateway: gw6},
		}
	}
	flush := func(zone uint16, ip netip.Addr) []flows.ConntrackFilter {
		return []flows.ConntrackFilter{{Zone: zone, Protocol: flows.TCP, ReplyDst: ip}, {Zone: zone, Protocol: flows.UDP, ReplyDst: ip}}
	}
	egress(thisNode, "node2")
	r.afterSync(f.ctx)
	assert.Equal(t, flush(flows.ZoneEgress, v4), f.ex.Flushes())

	r.afterSync(f.ctx) // still the gateway: nothing more
	assert.Len(t, f.ex.Flushes(), 2)

	egress("node2", thisNode) // v4 moves away, v6 comes here
	r.afterSync(f.ctx)
	assert.Equal(t, flush(flows.ZoneEgress6, v6), f.ex.Flushes()[2:])

	egress(thisNode, thisNode) // v4 back: a new term
	r.afterSync(f.ctx)
	assert.Equal(t, flush(flows.ZoneEgress, v4), f.ex.Flushes()[4:])
}
