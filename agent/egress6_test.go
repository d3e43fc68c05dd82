package agent

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	"github.com/ovs-srcip/ovs-srcip/flows"
)

// egressModel is a model of node1 with three Ready nodes (node1 and node2 dual-stack, node3
// IPv4-only), the dual-stack pod demo/job on node1 and the policies given (oldest first).
func egressModel(t *testing.T, policies ...*egressv1.EgressGateway) (*model, flows.Key, *recordingEvents) {
	t.Helper()
	ev := &recordingEvents{}
	m := newModel(thisNode, nil, nil, [2]uint16{30000, 32767}, PreserveAnnotated, ev)
	ready := func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	}
	dual := func(cidr6, ip6 string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Spec.PodCIDRs = append(n.Spec.PodCIDRs, cidr6)
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip6})
		}
	}
	m.nodes["node1"] = makeNode("node1", "192.168.0.1", "10.244.1.0/24", ready, dual("2001:db8:244:1::/64", "2001:db8:ffff::1"))
	m.nodes["node2"] = makeNode("node2", "192.168.0.2", "10.244.2.0/24", ready, dual("2001:db8:244:2::/64", "2001:db8:ffff::2"))
	m.nodes["node3"] = makeNode("node3", "192.168.0.3", "10.244.3.0/24", ready)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "job", Labels: map[string]string{"app": "job"}},
		Spec: corev1.PodSpec{NodeName: thisNode}}
	m.pods[nn("demo", "job")] = pod
	k := flows.Key{Kind: flows.KindPod, Namespace: "demo", Name: "job"}
	m.st.Pods[k] = flows.Pod{Namespace: "demo", Name: "job", IPs: []netip.Addr{addr("10.244.1.5"), addr("2001:db8:244:1::5")}}
	for i, g := range policies {
		g.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC))
		m.egws[g.Name] = g
	}
	return m, k, ev
}

func egressPolicy(name string, ips ...string) *egressv1.EgressGateway {
	return &egressv1.EgressGateway{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
		Spec: egressv1.EgressGatewaySpec{EgressIPs: ips,
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "job"}}}}
}

func policyByName(m *model, name string) *EgressPolicy {
	for _, p := range m.EgressPolicies() {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// A dual-stack pod: its IPv4 traffic follows the oldest policy with an IPv4 egress IP, its
// IPv6 traffic the oldest with an IPv6 one; a policy of one family leaves the other family's
// traffic alone.
func TestEgressPerFamily(t *testing.T) {
	m, k, _ := egressModel(t, egressPolicy("v4only", "192.0.2.50"), egressPolicy("v6only", "2001:db8::50"), egressPolicy("dual", "192.0.2.60", "2001:db8::60"))
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	p := m.st.Pods[k]
	require.NotNil(t, p.Egress)
	require.NotNil(t, p.Egress6)
	assert.Equal(t, "192.0.2.50", p.Egress.IP.String())
	assert.Equal(t, "v4only", p.Egress.Policy)
	assert.Equal(t, "2001:db8::50", p.Egress6.IP.String())
	assert.Equal(t, "v6only", p.Egress6.Policy)
	assert.Len(t, m.st.Egress, 4)

	// Only a v4 policy: the pod's IPv6 keeps the host path (no Egress6), and the reverse.
	m, k, _ = egressModel(t, egressPolicy("v4only", "192.0.2.50"))
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	assert.NotNil(t, m.st.Pods[k].Egress)
	assert.Nil(t, m.st.Pods[k].Egress6)
	m, k, _ = egressModel(t, egressPolicy("v6only", "2001:db8::50"))
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	assert.Nil(t, m.st.Pods[k].Egress)
	assert.NotNil(t, m.st.Pods[k].Egress6)

	// The policy gone: the pod is no longer selected (br-int keeps the IPv6 egress path of its
	// base on every IPv6 node, so connections pinned to the egress IP stay dropped, C37).
	delete(m.egws, "v6only")
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	assert.Nil(t, m.st.Pods[k].Egress6)
	assert.Empty(t, m.st.Egress)
}

// The fail-closed guards per family: IPv4-mapped, non-global-unicast, node addresses of
// either family, an older policy's IP and an IPv6 egress IP whose last 32 bits another one
// already has are refused; an IPv6 egress IP is served only by a node with an IPv6 pod CIDR.
func TestEgress6Guards(t *testing.T) {
	m, _, ev := egressModel(t,
		egressPolicy("a", "2001:db8::50", "::ffff:192.0.2.70", "fe80::50", "ff02::1", "::1", "::", "2001:db8:ffff::2", "0.0.0.0", "169.254.0.5"),
		egressPolicy("b", "2001:db8::50", "2001:db8:1::50", "2001:db8::51"))
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	a, b := policyByName(m, "a"), policyByName(m, "b")
	require.NotNil(t, a)
	require.NotNil(t, b)
	want := map[string]string{
		"2001:db8::50":      "",
		"::ffff:192.0.2.70": egressv1.ReasonUnsupported,
		"fe80::50":          egressv1.ReasonUnsupported,
		"ff02::1":           egressv1.ReasonUnsupported,
		"::1":               egressv1.ReasonUnsupported,
		"::":                egressv1.ReasonUnsupported,
		"2001:db8:ffff::2":  egressv1.ReasonNodeAddress,
		"0.0.0.0":           egressv1.ReasonUnsupported,
		"169.254.0.5":       egressv1.ReasonUnsupported,
	}
	for _, s := range a.IPs {
		assert.Equal(t, want[s.IP.String()], s.Refused, "%s: %s", s.IP, s.Message)
	}
	got := map[string]string{}
	for _, s := range b.IPs {
		got[s.IP.String()] = s.Refused
	}
	assert.Equal(t, map[string]string{"2001:db8::50": egressv1.ReasonEgressIPInUse, "2001:db8:1::50": egressv1.ReasonEgressIPInUse, "2001:db8::51": ""}, got)
	assert.Contains(t, b.IPs[1].Message, "same last 32 bits as the IPv6 egress IP 2001:db8::50")
	for _, s := range append(a.IPs, b.IPs...) {
		if s.Refused == "" && s.IP.Is6() {
			assert.Equal(t, []string{"node1", "node2"}, s.Eligible, "%s: node3 has no IPv6 pod CIDR", s.IP)
		}
	}
	assert.Len(t, m.st.Egress, 2, "2001:db8::50 and 2001:db8::51")

	// Status and Events per family.
	st := PolicyStatus(b, time.Now())
	r := meta.FindStatusCondition(st.Conditions, egressv1.ConditionReady)
	require.NotNil(t, r)
	assert.Contains(t, r.Message, "IPv6: 2001:db8::50 refused (EgressIPInUse), 2001:db8:1::50 refused (EgressIPInUse), 2001:db8::51 on node1")
	events := strings.Join(ev.msgs, "\n")
	assert.Contains(t, events, "SourceIPConflict: IPv6 egress IP refused (Unsupported): fe80::50 is not a global unicast address")
	assert.Contains(t, events, "SourceIPConflict: IPv4 egress IP refused (Unsupported): 169.254.0.5 is not a global unicast address")
	assert.Contains(t, events, "SourceIPConflict: IPv6 egress IP refused (NodeAddress): 2001:db8:ffff::2 is an address of node node2")
	n := len(ev.msgs)
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	assert.Len(t, ev.msgs, n, "unchanged refusals are not reported again")
}

// A v6 egress IP with only IPv4-only eligible nodes has no gateway: NoEligibleNode, per family.
func TestEgress6NoIPv6Gateway(t *testing.T) {
	g := egressPolicy("p", "192.0.2.50", "2001:db8::50")
	g.Spec.GatewayNodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "node3"}}
	m, k, _ := egressModel(t, g)
	m.nodes["node3"].Labels = map[string]string{"kubernetes.io/hostname": "node3"}
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	p := policyByName(m, "p")
	st := PolicyStatus(p, time.Now())
	r := meta.FindStatusCondition(st.Conditions, egressv1.ConditionReady)
	require.NotNil(t, r)
	assert.Equal(t, egressv1.ReasonNoEligibleNode, r.Reason)
	assert.Contains(t, r.Message, "2001:db8::50: no Ready node with an IPv6 pod CIDR matches gatewayNodeSelector")
	assert.Contains(t, r.Message, "IPv4: 192.0.2.50 on node3; IPv6: 2001:db8::50 without gateway")
	// The pod's IPv6 is pinned to the egress IP without gateway: dropped (C29), never the host path.
	assert.Equal(t, "2001:db8::50", m.st.Pods[k].Egress6.IP.String())
	assert.Equal(t, "", m.st.Egress[addr("2001:db8::50")].Gateway)
}

// Lease names are DNS subdomains for both families.
func TestLeaseNameIPv6(t *testing.T) {
	assert.Equal(t, "egress-192.0.2.50", LeaseName(addr("192.0.2.50")))
	assert.Equal(t, "egress-2001-db8-0-2--50", LeaseName(addr("2001:db8:0:2::50")))
	assert.Equal(t, "egress-2001-db8-1--0", LeaseName(addr("2001:db8:1::")))
}

// In a cluster that mixes underlay families, a node whose underlay is IPv6 (no IPv4 InternalIP)
// is not elected while other nodes tunnel over IPv4: the IPv4-underlay nodes could not tunnel to
// it. The status says which node matched and why.
func TestEgressMixedUnderlayNoGateway(t *testing.T) {
	g := egressPolicy("p", "192.0.2.50", "2001:db8::50")
	g.Spec.GatewayNodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "node1"}}
	m, _, _ := egressModel(t, g)
	n1 := m.nodes["node1"]
	n1.Labels = map[string]string{"kubernetes.io/hostname": "node1"}
	n1.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "2001:db8:0:2::11"}}
	require.True(t, nodeHasIPv6PodCIDR(n1), "the fixture's node1 runs IPv6")
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	p := policyByName(m, "p")
	for _, s := range p.IPs {
		assert.Empty(t, s.Eligible, s.IP)
		assert.Equal(t, []string{"node1"}, s.OtherUnderlay, s.IP)
		assert.Equal(t, flows.IPv4, s.Underlay, s.IP)
		assert.Equal(t, "", m.st.Egress[s.IP].Gateway, s.IP)
	}
	r := meta.FindStatusCondition(PolicyStatus(p, time.Now()).Conditions, egressv1.ConditionReady)
	require.NotNil(t, r)
	assert.Equal(t, egressv1.ReasonNoEligibleNode, r.Reason)
	assert.Contains(t, r.Message, "192.0.2.50: no Ready node matches gatewayNodeSelector (node1 matched but have no IPv4 underlay address: the egress path runs over the IPv4 underlay of the other nodes, and a node tunnels only to nodes of its own underlay family)")
}

// Over an IPv6 underlay (every node has only IPv6 InternalIPs) nodes are elected for egress IPs
// of both families, as over an IPv4 one; a Ready node without any InternalIP is not.
func TestEgressIPv6UnderlayGateways(t *testing.T) {
	g := egressPolicy("p", "192.0.2.50", "2001:db8::50")
	m, _, _ := egressModel(t, g)
	for i, name := range []string{"node1", "node2", "node3"} {
		m.nodes[name].Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8:0:2::1%d", i+1)}}
	}
	m.nodes["node4"] = makeNode("node4", "192.168.0.4", "10.244.4.0/24", func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		n.Status.Addresses = nil
	})
	assert.Equal(t, flows.IPv6, egressUnderlay(m.nodes))
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	p := policyByName(m, "p")
	require.Len(t, p.IPs, 2)
	for _, s := range p.IPs {
		assert.Equal(t, flows.IPv6, s.Underlay, s.IP)
		assert.Equal(t, []string{"node4"}, s.OtherUnderlay, s.IP)
	}
	assert.Equal(t, []string{"node1", "node2", "node3"}, p.IPs[0].Eligible)
	assert.Equal(t, []string{"node1", "node2"}, p.IPs[1].Eligible, "an IPv6 egress IP needs an IPv6 pod CIDR")
	assert.Equal(t, "node1", m.st.Egress[addr("192.0.2.50")].Gateway)
	assert.Equal(t, "node1", m.st.Egress[addr("2001:db8::50")].Gateway)
}

// A chained pod (srcip-cni's chained mode, its main CNI's addresses of both families) gets its
// IPv6 assignment as any pod: its egress interface carries IPv6 too (flows.chainedPodFlows).
func TestEgressPerFamilyChained(t *testing.T) {
	m, k, _ := egressModel(t, egressPolicy("dual", "192.0.2.60", "2001:db8::60"))
	p := m.st.Pods[k]
	p.Chained, p.IPs = true, []netip.Addr{addr("10.88.1.7"), addr("2001:db8:88:1::7")}
	m.st.Pods[k] = p
	m.updateEgress(klog.Background(), map[flows.Key]bool{})
	p = m.st.Pods[k]
	require.NotNil(t, p.Egress)
	require.NotNil(t, p.Egress6)
	assert.Equal(t, "192.0.2.60", p.Egress.IP.String())
	assert.Equal(t, "2001:db8::60", p.Egress6.IP.String())
}
