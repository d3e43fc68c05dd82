// Package ctlkube runs `srcipctl desired --kubeconfig` against a live API server (test/kube: the
// real kube-apiserver, etcd and kube-controller-manager): the flows of a node come from the
// cluster's Nodes, Services, EndpointSlices and the node's Pods, and an unknown node is an error.
package ctlkube

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ovs-srcip/ovs-srcip/test/kube"
)

func TestDesiredFromCluster(t *testing.T) {
	ctl := os.Getenv("SRCIPCTL")
	if ctl == "" {
		ctl = filepath.Join(t.TempDir(), "srcipctl")
		b, err := exec.Command("go", "build", "-o", ctl, "github.com/ovs-srcip/ovs-srcip/cmd/srcipctl").CombinedOutput()
		require.NoError(t, err, "%s", b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := kube.StartT(t, kube.Options{})
	c := cp.Client
	for i, n := range []string{"node1", "node2"} {
		_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec:       corev1.NodeSpec{PodCIDRs: []string{[]string{"10.244.1.0/24", "10.244.2.0/24"}[i]}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: []string{"192.0.2.11", "192.0.2.12"}[i]},
			}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{"ovs-srcip.io/preserve-source-ip": "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.DiscoveryV1().EndpointSlices("demo").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.2.5"}, NodeName: ptr.To("node2"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	out, err := exec.CommandContext(ctx, ctl, "desired", "--kubeconfig", cp.Kubeconfig, "--node", "node1", "--bridge", "br-ex").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "tp_dst=30080")
	assert.Contains(t, string(out), "# service-port demo/web http/TCP; ExServiceCT; group of demo/web http/TCP, 1 bucket(s)")
	assert.Contains(t, string(out), "nat(dst=10.244.2.5:8080)")

	out, err = exec.CommandContext(ctx, ctl, "desired", "--kubeconfig", cp.Kubeconfig, "--node", "node9").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), `node "node9" is not among the Nodes of the objects (node1, node2)`)
}
