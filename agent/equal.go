package agent

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
)

// The equality functions below decide which updates are no-ops for the agent: they compare only
// the fields conversion reads, so status heartbeats and metadata churn never cause a sync.

func nodeEqual(a, b *corev1.Node) bool {
	// Labels: EgressGateway gatewayNodeSelector.
	return nodeReady(a) == nodeReady(b) && a.CreationTimestamp.Equal(&b.CreationTimestamp) &&
		equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		equality.Semantic.DeepEqual(a.Status.Addresses, b.Status.Addresses) &&
		equality.Semantic.DeepEqual(a.Spec.PodCIDRs, b.Spec.PodCIDRs) &&
		a.Spec.PodCIDR == b.Spec.PodCIDR
}

// nodeReady is the status of n's Ready condition ("" without one): ConvertNode's rank and Down
// depend on it, the heartbeat times of the conditions do not.
func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func serviceEqual(a, b *corev1.Service) bool {
	// The annotation's presence matters, not only its value (an empty value is not opted in and
	// says so; no annotation is served under --preserve-source-ip=all); the proxy-name and
	// headless labels decide Eligible.
	av, aSet := a.Annotations[AnnotationPreserveSourceIP]
	bv, bSet := b.Annotations[AnnotationPreserveSourceIP]
	_, aProxy := a.Labels[LabelServiceProxyName]
	_, bProxy := b.Labels[LabelServiceProxyName]
	_, aHeadless := a.Labels[LabelHeadless]
	_, bHeadless := b.Labels[LabelHeadless]
	return av == bv && aSet == bSet && aProxy == bProxy && aHeadless == bHeadless &&
		a.CreationTimestamp.Equal(&b.CreationTimestamp) &&
		equality.Semantic.DeepEqual(a.Spec, b.Spec) &&
		equality.Semantic.DeepEqual(a.Status.LoadBalancer, b.Status.LoadBalancer)
}

func sliceEqual(a, b *discoveryv1.EndpointSlice) bool {
	return sliceService(a) == sliceService(b) && a.AddressType == b.AddressType &&
		equality.Semantic.DeepEqual(a.Endpoints, b.Endpoints) &&
		equality.Semantic.DeepEqual(a.Ports, b.Ports)
}

func podEqual(a, b *corev1.Pod) bool {
	// Labels: EgressGateway pod selectors (a relabel changes the pod's egress path).
	return a.UID == b.UID && a.Spec.NodeName == b.Spec.NodeName && a.Status.PodIP == b.Status.PodIP &&
		equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		equality.Semantic.DeepEqual(a.Status.PodIPs, b.Status.PodIPs)
}

// sliceService returns the Service an EndpointSlice belongs to (label kubernetes.io/service-name),
// with an empty Name when it has none.
func sliceService(s *discoveryv1.EndpointSlice) types.NamespacedName {
	if s == nil || s.Labels[discoveryv1.LabelServiceName] == "" {
		return types.NamespacedName{}
	}
	return types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[discoveryv1.LabelServiceName]}
}

func nn(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

// serviceCIDREqual compares what admission reads of a ServiceCIDR: spec.cidrs.
func serviceCIDREqual(a, b *networkingv1.ServiceCIDR) bool {
	return slices.Equal(a.Spec.CIDRs, b.Spec.CIDRs)
}
