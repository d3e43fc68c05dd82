package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// TestControlPlane starts the real control plane and checks what the project's tests rely on:
// /version, the EndpointSlice controller turning a bound, Ready Pod into a ready endpoint, the
// API server restarting under running clients and controllers, the garbage collector and the
// namespace controller. It fails (never skips) when something is missing.
func TestControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t0 := time.Now()
	cp := StartT(t, Options{})
	t.Logf("start: %v; RSS: %s", time.Since(t0).Round(time.Millisecond), rss(cp))
	c := cp.Client

	v, err := c.Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("/version: %v", err)
	}
	if v.GitVersion != "v1.37.2" || v.Major != "1" || v.Minor != "37" {
		t.Errorf("/version = %s (major %q minor %q), want v1.37.2", v.GitVersion, v.Major, v.Minor)
	}

	const ns, nodeName, podIP = "kube-test", "node1", "10.244.1.5"
	mustCreate(t, "namespace", func() error {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, "node", func() error {
		_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName},
			Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "192.168.50.11"},
			}},
		}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, "service", func() error {
		_, err := c.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{
				Type:                  corev1.ServiceTypeNodePort,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
				Selector:              map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{
					Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
				}},
			},
		}, metav1.CreateOptions{})
		return err
	})
	zero := int64(0)
	pod, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name: "web", Image: "example.invalid/echo",
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	setPodReady(t, ctx, c, pod, podIP, true)
	tw := time.Now()
	waitSlice(t, ctx, c, ns, "web", podIP, nodeName, true)
	t.Logf("EndpointSlice with the ready endpoint %v after the pod status write", time.Since(tw).Round(time.Millisecond))

	// The API server goes away and comes back: clients and the controllers carry on.
	tr := time.Now()
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restart kube-apiserver: %v", err)
	}
	t.Logf("kube-apiserver restart: %v", time.Since(tr).Round(time.Millisecond))
	if _, err := c.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{}); err != nil {
		t.Fatalf("get node after the restart: %v", err)
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after the restart: %v", err)
	}
	pod, err = c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod after the restart: %v", err)
	}
	setPodReady(t, ctx, c, pod, podIP, false)
	tw = time.Now()
	waitSlice(t, ctx, c, ns, "web", podIP, nodeName, false)
	t.Logf("endpoint not ready %v after the pod status write (controller-manager reconnected)", time.Since(tw).Round(time.Millisecond))

	// Garbage collector: a deleted Service's EndpointSlices go (they are owned by it).
	if err := c.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete service: %v", err)
	}
	waitFor(t, ctx, "the EndpointSlices of the deleted Service to be garbage collected", func() (bool, string) {
		l, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, err.Error()
		}
		return len(l.Items) == 0, fmt.Sprintf("%d slices", len(l.Items))
	})

	// Namespace controller: deleting the namespace removes its Pods (grace period 0) and itself.
	if err := c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	waitFor(t, ctx, "namespace deletion", func() (bool, string) {
		n, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("phase %s, conditions %v", n.Status.Phase, n.Status.Conditions)
	})
	t.Logf("RSS before stop: %s", rss(cp))
}

// TestStopEndsOnlyItsProcesses checks Stop ends the three pids and that the ports are free again.
func TestStopEndsOnlyItsProcesses(t *testing.T) {
	cp, err := Start(context.Background(), Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	pids := cp.PIDs()
	if len(pids) != 3 {
		t.Errorf("PIDs() = %v, want 3 components", pids)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/health", cp.EtcdPort)
	if err := cp.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for c, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("%s (pid %d) still exists after Stop", c, pid)
		}
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("etcd still answers on %s after Stop", url)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func mustCreate(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatalf("create %s: %v", what, err)
	}
}

// setPodReady writes what a kubelet would: phase Running, the pod IP and the Ready condition.
func setPodReady(t *testing.T, ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ip string, ready bool) {
	t.Helper()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:  corev1.PodRunning,
		HostIP: "192.168.50.11", HostIPs: []corev1.HostIP{{IP: "192.168.50.11"}},
		PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
		},
	}
	if _, err := c.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update pod status: %v", err)
	}
}

// waitSlice waits until the Service's EndpointSlices hold ip on node with Ready == ready.
func waitSlice(t *testing.T, ctx context.Context, c kubernetes.Interface, ns, svc, ip, node string, ready bool) {
	t.Helper()
	waitFor(t, ctx, fmt.Sprintf("an EndpointSlice of %s/%s with %s ready=%v", ns, svc, ip, ready), func() (bool, string) {
		l, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if len(e.Addresses) == 1 && e.Addresses[0] == ip && e.NodeName != nil && *e.NodeName == node &&
					e.Conditions.Ready != nil && *e.Conditions.Ready == ready {
					return true, ""
				}
			}
		}
		b, _ := json.Marshal(l.Items)
		return false, string(b)
	})
}

func waitFor(t *testing.T, ctx context.Context, what string, f func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last string
	for {
		ok, detail := f()
		if ok {
			return
		}
		last = detail
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; last: %s", what, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func rss(cp *ControlPlane) string {
	m := cp.RSS()
	return fmt.Sprintf("etcd %d MiB, kube-apiserver %d MiB, kube-controller-manager %d MiB",
		m[Etcd]>>20, m[APIServer]>>20, m[ControllerManager]>>20)
}
