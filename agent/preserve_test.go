package agent

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ofctltest"
)

func TestParsePreserveMode(t *testing.T) {
	for in, want := range map[string]PreserveMode{"": PreserveAnnotated, "annotated": PreserveAnnotated, " all ": PreserveAll} {
		got, err := ParsePreserveMode(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"All", "true", "none"} {
		_, err := ParsePreserveMode(in)
		assert.Error(t, err, in)
	}
}

// plainService is makeService without the annotation.
func plainService(name string, nodePort int32, mods ...func(*corev1.Service)) *corev1.Service {
	return makeService("ns1", name, nodePort, append([]func(*corev1.Service){func(s *corev1.Service) { s.Annotations = nil }}, mods...)...)
}

func annotate(v string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Annotations = map[string]string{AnnotationPreserveSourceIP: v} }
}

func clusterIPOnly(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeClusterIP
	s.Spec.Ports[0].NodePort = 0
}

// Eligibility over Service shapes x mode: whether the Service is served and how, whether the
// reason it is not is reported (status) and whether it becomes an Event (a problem of
// ServicePorts). Annotated Services are judged alike in both modes (except "false", an opt-out
// worded for the mode); without the annotation, annotated mode serves nothing and says nothing,
// all mode serves exactly the eligible shapes and says nothing about the others.
func TestSelectorEligibility(t *testing.T) {
	allowed := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	type want struct {
		via    string // "": not served
		reason bool   // a reason is reported (srcipctl status)
		event  bool   // ... and becomes an Event
	}
	no, annotationOK := want{}, want{via: ViaAnnotation}
	tests := []struct {
		name           string
		svc            *corev1.Service
		annotated, all want
	}{
		{"NodePort, ETP Cluster", plainService("s", 30080), no, want{via: ViaAll}},
		{"NodePort, ETP unset", plainService("s", 30080, func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = "" }), no, want{via: ViaAll}},
		{"LoadBalancer", plainService("s", 30080, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }), no, want{via: ViaAll}},
		{"LoadBalancer without nodePorts, no ingress yet", plainService("s", 0, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer }), no, want{via: ViaAll}},
		{"NodePort with an externalIP outside the allow-list (refused later, with an Event)", plainService("s", 30080, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"203.0.113.9"} }), no, want{via: ViaAll}},
		{"NodePort, ETP Local", plainService("s", 30080, func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }), no, no},
		{"LoadBalancer, ETP Local", plainService("s", 30080, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), no, no},
		{"ClusterIP only", plainService("s", 0, clusterIPOnly), no, no},
		{"ClusterIP with an allowed externalIP", plainService("s", 0, clusterIPOnly, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"198.51.100.7"} }), no, want{via: ViaAll}},
		{"ClusterIP with externalIPs outside the allow-list", plainService("s", 0, clusterIPOnly, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"203.0.113.9", "not-an-ip", "2001:db8::1"} }), no, no},
		{"ClusterIP with an allowed externalIP, ETP Local", plainService("s", 0, clusterIPOnly, func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"198.51.100.7"}
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		}), no, no},
		{"headless with an allowed externalIP", plainService("s", 0, clusterIPOnly, func(s *corev1.Service) {
			s.Spec.ClusterIP = corev1.ClusterIPNone
			s.Spec.ExternalIPs = []string{"198.51.100.7"}
		}), no, no},
		{"ExternalName", plainService("s", 0, func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeExternalName
			s.Spec.ExternalName = "example.com"
			s.Spec.ExternalTrafficPolicy = ""
			s.Spec.Ports[0].NodePort = 0
		}), no, no},
		{"sessionAffinity ClientIP (served with its affinity)", plainService("s", 30080, func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }), no, want{via: ViaAll}},
		{"another proxy's", plainService("s", 30080, func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "other"} }), no, no},
		{"labelled headless (kube-proxy ignores it)", plainService("s", 30080, func(s *corev1.Service) { s.Labels = map[string]string{LabelHeadless: ""} }), no, no},

		{"annotated true", plainService("s", 30080, annotate("true")), annotationOK, annotationOK},
		{"annotated true, sessionAffinity ClientIP (served as before)", plainService("s", 30080, annotate("true"), func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }), annotationOK, annotationOK},
		{"annotated true, ClusterIP with externalIPs outside the allow-list (refused later)", plainService("s", 0, clusterIPOnly, annotate("true"), func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"203.0.113.9"} }), annotationOK, annotationOK},
		{"annotated false: opt-out, no Event", plainService("s", 30080, annotate("false")), want{reason: true}, want{reason: true}},
		{"annotated false on a Service that is not eligible", plainService("s", 0, clusterIPOnly, annotate("false")), want{reason: true}, want{reason: true}},
		{"annotated yes", plainService("s", 30080, annotate("yes")), want{reason: true, event: true}, want{reason: true, event: true}},
		{"annotated empty", plainService("s", 30080, annotate("")), want{reason: true, event: true}, want{reason: true, event: true}},
		{"annotated true, ETP Local", plainService("s", 30080, annotate("true"), func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }), want{reason: true, event: true}, want{reason: true, event: true}},
		{"annotated true, ClusterIP only", plainService("s", 0, clusterIPOnly, annotate("true")), want{reason: true, event: true}, want{reason: true, event: true}},
	}
	for _, tc := range tests {
		for _, mode := range []PreserveMode{PreserveAnnotated, PreserveAll} {
			w := tc.annotated
			if mode == PreserveAll {
				w = tc.all
			}
			sel := Selector{Mode: mode, ExternalIPCIDRs: allowed}
			ok, via, reason := sel.Select(tc.svc)
			assert.Equal(t, w.via != "", ok, "%s, %s: served", tc.name, mode)
			assert.Equal(t, w.via, via, "%s, %s: via", tc.name, mode)
			assert.Equal(t, w.reason, reason != "", "%s, %s: reason %q", tc.name, mode, reason)
			sps, problems := sel.ServicePorts(tc.svc, []*discoveryv1.EndpointSlice{makeSlice("ns1", "s", "s-a", ep("10.244.2.5", "node2"))})
			assert.Equal(t, ok, len(sps) == 1, "%s, %s: ports %v", tc.name, mode, sps)
			if w.event {
				assert.Equal(t, []string{reason}, problems, "%s, %s", tc.name, mode)
			} else {
				assert.Empty(t, problems, "%s, %s", tc.name, mode)
			}
			if mode == PreserveAnnotated {
				// The default mode is today's rule, word for word.
				optIn, optReason := OptIn(tc.svc)
				assert.Equal(t, optIn, ok, tc.name)
				assert.Equal(t, optReason, reason, tc.name)
				zeroSPs, zeroProblems := ServicePorts(tc.svc, []*discoveryv1.EndpointSlice{makeSlice("ns1", "s", "s-a", ep("10.244.2.5", "node2"))})
				assert.Equal(t, sps, zeroSPs, tc.name)
				assert.Equal(t, problems, zeroProblems, tc.name)
			}
		}
	}
}

// The tracker must see every change that moves a Service on or off the path in all mode: the
// annotation's presence (an empty value is not no annotation) and the proxy-name label.
func TestServiceEqualSeesEligibility(t *testing.T) {
	base := plainService("s", 30080)
	for name, mod := range map[string]func(*corev1.Service){
		"annotation added empty": annotate(""),
		"annotation false":       annotate("false"),
		"proxy-name label":       func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "x"} },
		"headless label":         func(s *corev1.Service) { s.Labels = map[string]string{LabelHeadless: ""} },
		"ETP Local":              func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal },
		"type ClusterIP":         clusterIPOnly,
		"sessionAffinity":        func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP },
	} {
		assert.False(t, serviceEqual(base, plainService("s", 30080, mod)), name)
	}
	assert.True(t, serviceEqual(base, plainService("s", 30080, func(s *corev1.Service) { s.Labels = map[string]string{"app": "x"} })),
		"other labels are not read")
}

// In all mode (a Reconciler on the fake bridges): unannotated eligible Services get flows, the
// others (ETP Local, ClusterIP only, externalIPs outside the allow-list, opted out) get none and no
// Event; an eligible Service with a refused field gets the Event an annotated one gets in annotated
// mode. Eligibility changes move a Service on and off the path in partial syncs that touch no other
// flow set, and a Service leaving with a live TCP connection is drained as on an annotation
// removal.
func TestPreserveAllFollowsEligibility(t *testing.T) {
	allowed := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	f := newFixture(t)
	f.r = f.newCTReconciler(func(c *ReconcilerConfig) {
		c.PreserveSourceIP = PreserveAll
		c.ExternalIPCIDRs = allowed
	})
	f.seedNodes(f.r)
	web := plainService("web", 30000)
	svcs := []*corev1.Service{
		web,
		plainService("other", 30001),
		plainService("local", 30002, func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }),
		plainService("internal", 0, clusterIPOnly),
		plainService("extout", 0, clusterIPOnly, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"203.0.113.9"} }),
		plainService("optout", 30003, annotate("false")),
	}
	for _, s := range svcs {
		f.r.OnService(nil, s)
		f.r.OnEndpointSlice(nil, makeSlice("ns1", s.Name, s.Name+"-a", ep("10.244.2.7", "node2")))
	}
	require.NoError(t, f.sync())
	applied := f.r.Applied(flows.BrEx)
	for _, name := range []string{"web", "other"} {
		assert.Contains(t, applied, svcKey(name))
	}
	for _, name := range []string{"local", "internal", "extout", "optout"} {
		assert.NotContains(t, applied, svcKey(name))
	}
	assert.Contains(t, f.flowText(), "tp_dst=30000")
	for _, np := range []string{"tp_dst=30002", "tp_dst=30003", "203.0.113.9"} {
		assert.NotContains(t, f.flowText(), np)
	}
	assert.Empty(t, f.events.msgs, "no Event for Services that are not eligible or opted out")

	rep := f.r.Report()
	assert.Equal(t, "all", rep.PreserveSourceIP)
	byName := map[string]ServiceReport{}
	for _, s := range rep.Services {
		byName[s.Name] = s
	}
	assert.Len(t, byName, 3, "the served Services and the annotated one: %v", byName)
	assert.True(t, byName["web"].OptedIn)
	assert.Equal(t, ViaAll, byName["web"].Via)
	assert.False(t, byName["web"].Annotated)
	assert.False(t, byName["optout"].OptedIn)
	assert.Contains(t, byName["optout"].Reason, "opted out")
	assert.Len(t, byName["web"].Ports, 1)

	// Each change below must leave "other" alone and be a partial sync.
	otherCookie := applied[svcKey("other")].Cookie
	syncs := func(kind string) uint64 {
		m := &dto.Metric{}
		require.NoError(t, f.r.metrics.SyncDuration.WithLabelValues(kind).(prometheus.Histogram).Write(m))
		return m.GetHistogram().GetSampleCount()
	}
	step := func(what string, prev, cur *corev1.Service, served bool) {
		t.Helper()
		full, partial := syncs("full"), syncs("partial")
		f.r.OnService(prev, cur)
		require.NoError(t, f.sync(), what)
		assert.Equal(t, full, syncs("full"), "%s: a full sync", what)
		assert.Equal(t, partial+1, syncs("partial"), "%s: no partial sync", what)
		a := f.r.Applied(flows.BrEx)
		if served {
			assert.Contains(t, a, svcKey("web"), what)
			assert.Contains(t, f.flowText(), "priority=100,tcp,nw_dst=192.168.0.1,tp_dst=30000", what)
		} else {
			assert.NotContains(t, a, svcKey("web"), what)
			assert.NotContains(t, f.flowText(), "priority=100,tcp,nw_dst=192.168.0.1,tp_dst=30000", what)
		}
		assert.Equal(t, otherCookie, a[svcKey("other")].Cookie, "%s: other Service rewritten", what)
		assert.Empty(t, f.events.msgs, what)
	}

	// ETP Local with a live connection: off the path, the connection drained as on an
	// annotation removal (TCP: no conntrack flush).
	f.ex.AddConn(ofctltest.Conn{Zone: flows.ZoneService, Protocol: flows.TCP, OrigDst: ap("192.168.0.1:30000"), ReplySrc: ap("10.244.2.7:8080")})
	local := plainService("web", 30000, func(s *corev1.Service) { s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })
	step("ETP Local", web, local, false)
	drain := flows.DrainKey(flows.EntryPoint{Protocol: flows.TCP, Addr: ap("192.168.0.1:30000")})
	assert.Contains(t, f.r.Applied(flows.BrEx), drain)
	assert.Empty(t, f.ex.Flushes())
	require.NoError(t, f.ex.FlushConntrack(f.ctx, flows.ConntrackFilter{Zone: flows.ZoneService, Protocol: flows.TCP, ReplySrc: ap("10.244.2.7:8080")}))

	step("ETP Cluster again", local, web, true)
	assert.NotContains(t, f.r.Applied(flows.BrEx), drain, "served again: no drain")
	optOut := plainService("web", 30000, annotate("false"))
	step("annotated false", web, optOut, false)
	step("annotation removed", optOut, web, true)
	internal := plainService("web", 0, clusterIPOnly)
	step("type ClusterIP", web, internal, false)
	withExt := plainService("web", 0, clusterIPOnly, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"198.51.100.7"} })
	f.r.OnService(internal, withExt)
	require.NoError(t, f.sync())
	assert.Contains(t, f.r.Applied(flows.BrEx), svcKey("web"), "an allowed externalIP makes it eligible")
	assert.Contains(t, f.flowText(), "nw_dst=198.51.100.7")
	step("type NodePort", withExt, web, true)
	proxied := plainService("web", 30000, func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "other-proxy"} })
	step("handed to another proxy", web, proxied, false)
	step("back to kube-proxy's", proxied, web, true)

	// Annotated "true", then the annotation removed: served all along, nothing rewritten.
	cookie, n := f.r.Applied(flows.BrEx)[svcKey("web")].Cookie, f.bundles()
	annotated := plainService("web", 30000, annotate("true"))
	step("annotated true", web, annotated, true)
	step("annotation true removed", annotated, web, true)
	assert.Equal(t, cookie, f.r.Applied(flows.BrEx)[svcKey("web")].Cookie)
	assert.Equal(t, n, f.bundles(), "the way a Service is served changes none of its flows")

	// A full sync ends the drain of the externalIP entry point (no connection); the next one
	// finds nothing to do.
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	n = f.bundles()
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Equal(t, n, f.bundles(), "a full sync finds nothing to repair")
}

// An eligible Service with a field the agent refuses gets in all mode, without the annotation,
// the Event an annotated one gets in annotated mode; its other entry points are served.
func TestPreserveAllDeclinesLikeAnnotated(t *testing.T) {
	allowed := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	mods := []func(*corev1.Service){func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalIPs = []string{"203.0.113.9"}                                      // outside the allow-list
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.168.0.2"}} // node2's address
		s.Spec.LoadBalancerSourceRanges = []string{"not-a-cidr", "203.0.113.0/24"}        // a bad entry
	}}
	events := map[PreserveMode][]string{}
	for mode, svc := range map[PreserveMode]*corev1.Service{
		PreserveAnnotated: makeService("ns1", "lb", 30100, mods...),
		PreserveAll:       plainService("lb", 30100, mods...),
	} {
		f := newFixture(t)
		f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
			c.PreserveSourceIP = mode
			c.ExternalIPCIDRs = allowed
		})
		f.seedNodes(f.r)
		f.r.OnService(nil, svc)
		require.NoError(t, f.sync())
		assert.Contains(t, f.flowText(), "tp_dst=30100", mode)
		assert.NotContains(t, f.flowText(), "203.0.113.9", mode)
		events[mode] = f.events.msgs
	}
	require.Len(t, events[PreserveAll], 3, strings.Join(events[PreserveAll], "\n"))
	assert.ElementsMatch(t, events[PreserveAnnotated], events[PreserveAll])
}
