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
