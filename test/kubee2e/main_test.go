// Package kubee2e runs the lab (test/lab: real OVS per emulated node, real packets) with the agents
// watching a LIVE Kubernetes API server (test/kube: kube-apiserver, kube-controller-manager with
// the EndpointSlice controller, etcd, built from the Go module proxy). Tests create Nodes, Pods
// (status written as a kubelet would) and Services; the real EndpointSlice controller writes the
// EndpointSlices the agents consume. No fake clientset at this seam.
//
// Topology: test/manifests/demo nodes and pods (node1 192.0.2.11 is the ingress node; echo-a
// 10.244.2.5 on node2, echo-b 10.244.3.5 on node3, echo-c 10.244.1.5 on node1), client 198.51.100.10.
package kubee2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	egressclient "github.com/ovs-srcip/ovs-srcip/client/clientset/versioned"

	"github.com/ovs-srcip/ovs-srcip/test/kube"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	clientIP = "198.51.100.10"
	ns       = "e2e"
	// leaseNS holds the gateway-election Leases (the agents' --lease-namespace).
	leaseNS = "ovs-srcip"
)

var (
	theLab *lab.Lab
	cp     *kube.ControlPlane
	cs     kubernetes.Interface
	ecs    egressclient.Interface
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return 1
	}
	agent, echo := os.Getenv("SRCIP_AGENT"), os.Getenv("SRCIP_ECHO")
	tmp, err := os.MkdirTemp("", "srcip-kubee2e")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(tmp)
	if agent == "" || echo == "" {
		agent, echo = filepath.Join(tmp, "srcip-agent"), filepath.Join(tmp, "echo")
		for out, pkg := range map[string]string{agent: "../../cmd/srcip-agent", echo: "../echo"} {
			if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
				return fail("build %s: %v\n%s", pkg, err, b)
			}
		}
	}
	cp, err = kube.Start(context.Background(), kube.Options{})
	if err != nil {
		return fail("control plane: %v", err)
	}
	defer cp.Stop()
	cs = cp.Client

	topo := filepath.Join("..", "manifests", "demo")
	mf, err := lab.LoadManifests(topo)
	if err != nil {
		return fail("manifests: %v", err)
	}
	ctx := context.Background()
	if err := createTopology(ctx, mf); err != nil {
		return fail("topology in the API: %v", err)
	}
	// The lab's nodes and pods come from the demo manifests; its agents watch the API server.
	dir := filepath.Join(tmp, "topology")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail("%v", err)
	}
	for _, f := range []string{"nodes.yaml", "pods.yaml"} {
		b, err := os.ReadFile(filepath.Join(topo, f))
		if err == nil {
			// The pods live in the test's namespace (createTopology), and their ports must say so:
			// the agents program a port only with its Pod object.
			b = []byte(strings.ReplaceAll(string(b), "namespace: demo", "namespace: "+ns))
			err = os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		if err != nil {
			return fail("%v", err)
		}
	}
	theLab, err = lab.New(lab.Config{ManifestsDir: dir, AgentBin: agent, EchoBin: echo,
		Kubeconfig: cp.Kubeconfig, AgentArgs: []string{"--full-sync-period=5s", "--lease-namespace=" + leaseNS,
			"--egress-lease-duration=3s", "--egress-renew-deadline=2s", "--egress-retry-period=500ms"}})
	if err != nil {
		return fail("lab: %v", err)
	}
	code := func() int {
		if err := theLab.StartAgents(); err != nil {
			return fail("agents: %v", err)
		}
		return m.Run()
	}()
	if code != 0 {
		for _, n := range theLab.Nodes {
			if b, err := os.ReadFile(theLab.AgentLog(n.Name)); err == nil {
				fmt.Fprintf(os.Stderr, "==== agent log %s (tail)\n%s\n", n.Name, tail(string(b), 30))
			}
		}
	}
	if err := theLab.Close(); err != nil && code == 0 {
		code = fail("lab close: %v", err)
	}
	return code
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// createTopology writes the lab's Nodes and Pods to the API server as a kubelet would: the Node
// with its addresses and pod CIDRs, each Pod with spec.nodeName, then its status (podIPs, Ready).
func createTopology(ctx context.Context, mf *lab.Manifests) error {
	for _, name := range []string{ns, leaseNS} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	// The agents watch EgressGateways: their CRD is installed as deploy/ installs it.
	if err := installCRD(ctx); err != nil {
		return err
	}
	for i := range mf.Nodes {
		if err := createNode(ctx, mf.Nodes[i].DeepCopy()); err != nil {
			return err
		}
	}
	for i := range mf.Pods {
		p := mf.Pods[i].DeepCopy()
		p.Namespace = ns
		if err := createPod(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func createNode(ctx context.Context, n *corev1.Node) error {
	n.ResourceVersion = ""
	st := n.Status
	created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	created.Status = st
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", n.Name, err)
	}
	return nil
}

func createPod(ctx context.Context, p *corev1.Pod) error {
	p.ResourceVersion = ""
	st := p.Status
	created, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create pod %s: %w", p.Name, err)
	}
	created.Status = st
	if _, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s status: %w", p.Name, err)
	}
	return nil
}

// setPodReady flips a pod's Ready condition as a kubelet would on a failing readiness probe.
func setPodReady(ctx context.Context, name string, ready bool) error {
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			p.Status.Conditions[i].Status = status
			p.Status.Conditions[i].LastTransitionTime = metav1.Now()
		}
	}
	_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// installCRD applies deploy/crds/crd-egressgateway.yaml and waits until EgressGateways are served.
func installCRD(ctx context.Context) error {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "crds", "crd-egressgateway.yaml"))
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		return fmt.Errorf("CRD: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cp.RESTConfig)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(gvr).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "kubee2e", Force: true}); err != nil {
		return fmt.Errorf("apply CRD: %w", err)
	}
	ecs, err = egressclient.NewForConfig(cp.RESTConfig)
	if err != nil {
		return err
	}
	return lab.WaitFor(func() error {
		_, err := ecs.OvsSrcipV1alpha1().EgressGateways().List(ctx, metav1.ListOptions{})
		return err
	}, time.Minute)
}

// waitOK retries a request until it succeeds.
func waitOK(t *testing.T, proto, addr string) lab.Reply {
	t.Helper()
	var r lab.Reply
	if err := lab.WaitFor(func() error {
		var err error
		r, err = theLab.Request("", proto, addr)
		return err
	}, 20*time.Second); err != nil {
		t.Fatalf("%s %s never answered: %v", proto, addr, err)
	}
	return r
}
