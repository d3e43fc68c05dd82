package kubee2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Bad input gets a Kubernetes Event on the object and disturbs nobody: a Service whose externalIP
// is node1's own address with UDP port 6081 (the Geneve tunnel endpoint) must not capture the
// tunnels; the agents refuse that externalIP (a node address) with a Warning Event
// SourceIPRefused on the Service, and the other Services keep working across nodes.
func TestBadInputRecordsEvent(t *testing.T) {
	ctx := context.Background()
	victim := newService("victim", 30230, "echo-a")
	_, err := cs.CoreV1().Services(ns).Create(ctx, victim, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Services(ns).Delete(ctx, "victim", metav1.DeleteOptions{}) })
	eventually(t, "victim programmed", has("tp_dst=30230"))

	bad := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "tunnel-thief", Namespace: ns, Annotations: map[string]string{annotation: "true"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			ExternalIPs: []string{"192.0.2.11"},
			Selector:    map[string]string{"pod": "echo-b"},
			Ports:       []corev1.ServicePort{{Name: "gnv", Protocol: corev1.ProtocolUDP, Port: 6081, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	_, err = cs.CoreV1().Services(ns).Create(ctx, bad, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Services(ns).Delete(ctx, "tunnel-thief", metav1.DeleteOptions{}) })

	var ev corev1.Event
	require.NoError(t, lab.WaitFor(func() error {
		list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "Service", "involvedObject.name": "tunnel-thief"}.String()})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "SourceIPRefused" && strings.Contains(e.Message, "externalIP 192.0.2.11 is an address of Node node1") {
				ev = e
				return nil
			}
		}
		return fmt.Errorf("no Warning Event on the Service yet (%d events)", len(list.Items))
	}, followTimeout))
	t.Logf("event: %s %s: %s (from %s)", ev.Type, ev.Reason, ev.Message, ev.Source.Host)

	// The tunnels to node2 still carry the victim's traffic entered on node1.
	time.Sleep(time.Second)
	for i := 0; i < 3; i++ {
		r := waitOK(t, "tcp", "192.0.2.11:30230")
		assert.Equal(t, clientIP, r.ClientIP())
		assert.Equal(t, "echo-a", r.Pod)
	}
	for _, n := range theLab.Nodes {
		running, exitErr := theLab.AgentRunning(n.Name)
		assert.True(t, running, "agent %s: %v", n.Name, exitErr)
	}
}

// C34 against a live API server: a Service whose only endpoint is a hostNetwork address (node2's
// InternalIP, outside every node's pod CIDRs, from a selector-less Service's own EndpointSlice)
// cannot keep the client's address on our path; the agents decline it with a Warning Event
// SourceIPDeclined on the Service that names the endpoint, program no entry point for it (its
// NodePort is left to the host, i.e. kube-proxy), and the other Services keep working.
func TestHostNetworkEndpointDeclinedWithEvent(t *testing.T) {
	ctx := context.Background()
	healthy := newService("healthy", 30232, "echo-a")
	_, err := cs.CoreV1().Services(ns).Create(ctx, healthy, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Services(ns).Delete(ctx, "healthy", metav1.DeleteOptions{}) })
	eventually(t, "healthy programmed", has("tp_dst=30232"))
	svc := newService("hostnet", 30231)
	svc.Spec.Selector = nil
	_, err = cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Services(ns).Delete(ctx, "hostnet", metav1.DeleteOptions{}) })
	port, proto, ready := int32(8080), corev1.ProtocolTCP, true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "hostnet-manual", Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: "hostnet", discoveryv1.LabelManagedBy: "ovs-srcip-test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.12"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Port: &port, Protocol: &proto}},
	}
	_, err = cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "hostnet-manual", metav1.DeleteOptions{}) })

	var ev corev1.Event
	require.NoError(t, lab.WaitFor(func() error {
		list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "Service", "involvedObject.name": "hostnet"}.String()})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "SourceIPDeclined" && strings.Contains(e.Message, "192.0.2.12:8080") {
				ev = e
				return nil
			}
		}
		return fmt.Errorf("no SourceIPDeclined Event on the Service yet (%d events)", len(list.Items))
	}, followTimeout))
	t.Logf("event: %s %s: %s (from %s)", ev.Type, ev.Reason, ev.Message, ev.Source.Host)
	// Until its EndpointSlice arrives the Service has no endpoints (its entry point is programmed
	// to refuse); then every node declines it and removes the entry point.
	require.NoError(t, lab.WaitFor(func() error {
		for _, n := range theLab.Nodes {
			out, err := theLab.DumpFlows(n.Name, "br-ex")
			if err != nil {
				return err
			}
			if strings.Contains(out, "tp_dst=30231") {
				return fmt.Errorf("node %s still has an entry point for the declined Service", n.Name)
			}
		}
		return nil
	}, followTimeout))
	r := waitOK(t, "tcp", "192.0.2.11:30232")
	assert.Equal(t, clientIP, r.ClientIP())
	assert.Equal(t, "echo-a", r.Pod)
}

func ptrTo[T any](v T) *T { return &v }

// Against a live API server, admission knows the Service CIDR without --service-cidrs (the agents
// here run without it): the API server's --service-cluster-ip-range is the ServiceCIDR object
// "kubernetes" (networking.k8s.io/v1), which the agents watch. A LoadBalancer IP inside it is
// refused with a SourceIPRefused Event that names the object, and the Service's NodePort is still
// served with the client IP kept.
func TestLoadBalancerIPInServiceCIDRRefused(t *testing.T) {
	ctx := context.Background()
	svc := newService("in-svc-cidr", 30233, "echo-a")
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	created, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.CoreV1().Services(ns).Delete(ctx, "in-svc-cidr", metav1.DeleteOptions{}) })
	const lbIP = "10.96.250.250"
	created.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbIP}}
	_, err = cs.CoreV1().Services(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	require.NoError(t, err)

	want := "loadBalancer ingress IP " + lbIP + " is inside the Service CIDR 10.96.0.0/16 (ServiceCIDR kubernetes): refused"
	var ev corev1.Event
	require.NoError(t, lab.WaitFor(func() error {
		list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "Service", "involvedObject.name": "in-svc-cidr"}.String()})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "SourceIPRefused" && strings.Contains(e.Message, want) {
				ev = e
				return nil
			}
		}
		return fmt.Errorf("no Warning Event %q on the Service yet (%d events)", want, len(list.Items))
	}, followTimeout))
	t.Logf("event: %s %s: %s (from %s)", ev.Type, ev.Reason, ev.Message, ev.Source.Host)

	eventually(t, "NodePort programmed", has("tp_dst=30233"))
	for _, n := range theLab.Nodes {
		out, err := theLab.DumpFlows(n.Name, "br-ex")
		require.NoError(t, err)
		assert.NotContains(t, out, "nw_dst="+lbIP, "node %s programs the refused LB IP", n.Name)
	}
	r := waitOK(t, "tcp", "192.0.2.11:30233")
	assert.Equal(t, clientIP, r.ClientIP())
	assert.Equal(t, "echo-a", r.Pod)
}
