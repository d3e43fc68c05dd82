package cluster

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
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

// kubectl exec's path: the API server's pods/exec upgrades to the kubelet's streaming server,
// which asks containerd (CRI Exec) to start a process in the running container (runc exec:
// setns into the container's namespaces, join its cgroup). The process here is the pod's own
// echo client asking the pod's server; its stdout comes back through the stream. Kubernetes'
// e2e framework runs most of its network probes this way.
func TestExecIntoContainer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := theCluster.Client
	for _, p := range pods(t) {
		req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).
			SubResource("exec").VersionedParams(&corev1.PodExecOptions{
			Container: "echo", Stdout: true, Stderr: true,
			Command: []string{"/echo", "get", "--proto", "tcp", "--addr", "127.0.0.1:8080", "--timeout", "3s"},
		}, scheme.ParameterCodec)
		exec, err := remotecommand.NewSPDYExecutor(theCluster.CP.RESTConfig, "POST", req.URL())
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
			t.Fatalf("exec in %s on %s: %v (stderr %q)\n%s", p.Name, p.Spec.NodeName, err, stderr.String(),
				theCluster.LogTails(40))
		}
		if !strings.Contains(stdout.String(), p.Name) {
			t.Errorf("exec in %s: stdout %q, want the pod's name", p.Name, stdout.String())
		}
		t.Logf("exec in %s on %s: %s", p.Name, p.Spec.NodeName, strings.TrimSpace(stdout.String()))
	}
}
