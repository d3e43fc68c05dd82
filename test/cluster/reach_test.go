package cluster

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API server dials every kubelet (serving certificate checked against the cluster CA, its
// client certificate accepted by the kubelet's webhook authentication and authorization): pod
// logs and the node proxy work; and the root netns reaches pods by their IP (the API server's
// pods/proxy and services/proxy) through its routes into the lab. Without them kubectl logs/exec/port-forward fail, as do the
// e2e tests that use them.
func TestAPIServerReachesKubeletsAndPods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := theCluster.Client
	for _, p := range pods(t) {
		retry(t, "logs of "+p.Name, func() error {
			_, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			return err
		})
		t.Logf("logs of %s on %s: read through its kubelet", p.Name, p.Spec.NodeName)
		// From the root netns, where the API server is (pods/proxy, services/proxy dial from there).
		var got string
		retry(t, "root netns -> "+p.Name, func() error {
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(p.Status.PodIP, "8080"), 2*time.Second)
			if err != nil {
				return err
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := conn.Write([]byte("hello\n")); err != nil {
				return err
			}
			got, err = bufio.NewReader(conn).ReadString('\n')
			return err
		})
		t.Logf("root netns -> %s (%s:8080): %s", p.Name, p.Status.PodIP, strings.TrimSpace(got))
	}
	for _, n := range theCluster.Lab.Nodes {
		var got []byte
		retry(t, "node proxy "+n.Name, func() error {
			var err error
			got, err = cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + n.Name + "/proxy/healthz").DoRaw(ctx)
			return err
		})
		if string(got) != "ok" {
			t.Errorf("node %s: kubelet /healthz through the API server = %q", n.Name, got)
		}
	}
	// The lease endpoint reconciler keeps the kubernetes Service pointing at the API server.
	ep, err := cs.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(ep.Subsets) == 0 || len(ep.Subsets[0].Addresses) == 0 || ep.Subsets[0].Addresses[0].IP != theCluster.linkIP.String() {
		t.Fatalf("Endpoints default/kubernetes = %+v (err %v), want %s", ep, err, theCluster.linkIP)
	}
}
