// Package install installs ovs-srcip on a real-kubelet lab whose nodes run nothing of it yet
// (test/cluster's CNIDaemonSet mode, the release image of `make image` imported on every node) the
// ways an operator would, and takes it back out:
//
//   - TestDaemonSetInstall: kubectl apply -k deploy/crds and the lab's overlay of deploy/ (with the
//     Component labelled-nodes); the nodes labelled ovs-srcip.io/enabled=true one first, then the
//     rest (only labelled nodes get an agent and go Ready); pods of a Deployment talk across nodes;
//     the DaemonSet rolled to a second image tag, then kubectl rollout undo (the pods back on the
//     first tag, traffic still working, a new pod attached; srcipctl version in each agent pod
//     names the tag the pod runs); kubectl delete -k of the overlay keeps
//     the CRD and an EgressGateway.
//   - TestHelmInstall: helm install of deploy/helm/ovs-srcip with the lab's values, the nodes go
//     Ready, pods talk across nodes; helm upgrade to a second tag and helm rollback (the agents
//     back on the first, traffic); helm uninstall keeps the CRD and an EgressGateway
//     (helm.sh/resource-policy: keep).
//   - TestRollingUpgrade (upgrade_test.go; alone: make test-upgrade): an older commit's image
//     installed with apply -k, rolled to this checkout's (built with a test-only flow layout
//     change) and back under long-lived streams and new connections through every node; no reset,
//     no silence over 1 s, no moment without flows, the other build's layout gone after each roll.
//
// Each test starts its own lab: TestDaemonSetInstall's uninstall leaves the nodes' bridges,
// flows, conflist and plugins (the node-teardown of docs/install.md "Uninstall" is not run) and
// its pods, so the next test would not start from nodes that run nothing of ovs-srcip.
package install

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	enabledLabel = "ovs-srcip.io/enabled"
	imageRepo    = "ghcr.io/ovs-srcip/srcip-agent"
	agentPods    = "app.kubernetes.io/name=srcip-agent"
)

var (
	crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	egwGVR = schema.GroupVersionResource{Group: "ovs-srcip.io", Version: "v1alpha1", Resource: "egressgateways"}
)

// release is the repository's VERSION: the tag deploy/ and the chart are pinned to.
func release(t *testing.T) string {
	b, err := os.ReadFile("../../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// startLab builds the lab's test binaries and starts a cluster in CNIDaemonSet mode: the nodes
// registered, NotReady (no CNI), the release image imported on each.
func startLab(t *testing.T, ctx context.Context) *cluster.Cluster {
	tmp := t.TempDir()
	bins := map[string]string{"echo": "../../echo", "pause": "../../pause"}
	for name, pkg := range bins {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(tmp, name), pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, b)
		}
	}
	if err := cluster.CleanupStale("", t.Logf); err != nil {
		t.Fatal(err)
	}
	logf := func(string, ...any) {}
	if os.Getenv("SRCIP_CLUSTER_VERBOSE") != "" {
		logf = t.Logf
	}
	t0 := time.Now()
	c, err := cluster.Start(ctx, cluster.Config{
		Lab:     lab.Config{ManifestsDir: "../testdata/nodes", NoGateway: true, EchoBin: filepath.Join(tmp, "echo")},
		EchoBin: filepath.Join(tmp, "echo"), PauseBin: filepath.Join(tmp, "pause"),
		CNI: cluster.CNIDaemonSet, Logf: logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails(30))
			keep := filepath.Join(os.TempDir(), "srcip-cluster-logs-"+c.Lab.Prefix)
			if err := c.SaveLogs(keep); err == nil {
				t.Logf("cluster logs kept in %s", keep)
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	t.Logf("lab up in %v, image %s:%s imported on every node", time.Since(t0).Round(time.Millisecond), imageRepo, release(t))
	for _, n := range c.Lab.Nodes {
		t.Logf("node %s registered %v after its start, NotReady (no CNI yet)", n.Name, c.NodeReady[n.Name].Round(time.Millisecond))
	}
	return c
}

// run runs one of the lab's operator tools (kubectl from hack/cluster, helm from hack/helm) against
// the lab's API server.
func run(t *testing.T, c *cluster.Cluster, tool string, args ...string) string {
	t.Helper()
	bin := tool
	switch tool {
	case "kubectl":
		bin = filepath.Join(c.BinDir, "kubectl")
	case "helm":
		out, err := exec.Command("../../../hack/helm/build.sh").Output()
		if err != nil {
			t.Fatalf("hack/helm/build.sh: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		bin = lines[len(lines)-1]
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(c.Lab.Dir, "helm"), "HELM_CONFIG_HOME="+filepath.Join(c.Lab.Dir, "helm"),
		"HELM_DATA_HOME="+filepath.Join(c.Lab.Dir, "helm"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", tool, strings.Join(args, " "), err, out)
	}
	t.Logf("$ %s %s\n%s", tool, strings.Join(args, " "), strings.TrimSpace(string(out)))
	return string(out)
}

// applyKustomize applies the kustomization in dir as `kubectl apply -k` does (server-side, in the
// order kustomize emits, waiting for a CRD applied just before to be served).
func applyKustomize(t *testing.T, ctx context.Context, c *cluster.Cluster, dir string) {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.CP.Client.Discovery()))
	dyn, err := dynamic.NewForConfig(c.CP.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rm.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		gvk := u.GroupVersionKind()
		var ri dynamic.ResourceInterface
		if err := lab.WaitFor(func() error {
			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				mapper.Reset() // a CRD applied just before
				return err
			}
			ri = dyn.Resource(mapping.Resource)
			if mapping.Scope.Name() == "namespace" {
				ri = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
			}
			return nil
		}, 20*time.Second); err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		if err := lab.WaitFor(func() error {
			_, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "kubectl", Force: true})
			return err
		}, 20*time.Second); err != nil {
			t.Fatalf("apply %s %s/%s: %v", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
}

func label(t *testing.T, ctx context.Context, c *cluster.Cluster, node string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, enabledLabel)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// agentsOn returns the agent pods by node.
func agentsOn(t *testing.T, ctx context.Context, c *cluster.Cluster) map[string]corev1.Pod {
	t.Helper()
	l, err := c.Client.CoreV1().Pods("ovs-srcip").List(ctx, metav1.ListOptions{LabelSelector: agentPods})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]corev1.Pod{}
	for _, p := range l.Items {
		m[p.Spec.NodeName] = p
	}
	return m
}

// podsTalk checks that every pod of app=NAME in namespace app reaches every other across nodes,
// with its own pod IP as the source.
func podsTalk(t *testing.T, ctx context.Context, c *cluster.Cluster, name string, n int, what string) {
	t.Helper()
	pods, err := c.WaitPodsReady(ctx, "app", "app="+name, n, 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pairs := 0
	for _, src := range pods {
		for _, dst := range pods {
			if src.Spec.NodeName == dst.Spec.NodeName {
				continue
			}
			var r lab.Reply
			if err := lab.WaitFor(func() (err error) {
				r, err = c.PodRequest(&src, "tcp", dst.Status.PodIP+":8080")
				return err
			}, 20*time.Second); err != nil {
				t.Fatalf("%s: %s -> %s: %v", what, src.Name, dst.Name, err)
			}
			if r.Pod != dst.Name || r.ClientIP() != src.Status.PodIP {
				t.Errorf("%s: %s -> %s: %+v", what, src.Name, dst.Name, r)
			}
			pairs++
		}
	}
	t.Logf("%s: pod -> pod across nodes, %d pairs, source IP kept: ok", what, pairs)
}

// agentImages returns the image of each agent pod's containers (init and main), by node.
func agentImages(t *testing.T, ctx context.Context, c *cluster.Cluster) map[string]string {
	out := map[string]string{}
	for node, p := range agentsOn(t, ctx, c) {
		out[node] = p.Spec.InitContainers[0].Image + " " + p.Spec.Containers[0].Image
	}
	return out
}

// waitAgentsOn waits until every node has a Ready agent pod whose containers run image.
func waitAgentsOn(t *testing.T, ctx context.Context, c *cluster.Cluster, image string) {
	t.Helper()
	if err := lab.WaitFor(func() error {
		pods := agentsOn(t, ctx, c)
		if len(pods) != len(c.Lab.Nodes) {
			return fmt.Errorf("%d agent pods", len(pods))
		}
		for node, p := range pods {
			if p.DeletionTimestamp != nil || p.Spec.Containers[0].Image != image || p.Spec.InitContainers[0].Image != image {
				return fmt.Errorf("node %s: pod %s image %s", node, p.Name, p.Spec.Containers[0].Image)
			}
			ready := false
			for _, cond := range p.Status.Conditions {
				ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
			}
			if !ready {
				return fmt.Errorf("node %s: pod %s not Ready", node, p.Name)
			}
		}
		return nil
	}, 180*time.Second); err != nil {
		t.Fatalf("agents on %s: %v", image, err)
	}
}

// checkVersions runs `srcipctl version` in every agent pod (kubectl exec, against the agent's
// status socket, as docs/install.md says) and checks that srcipctl and the agent both report
// release (stamped by make image).
func checkVersions(t *testing.T, ctx context.Context, c *cluster.Cluster, release string) {
	t.Helper()
	for node, p := range agentsOn(t, ctx, c) {
		out := run(t, c, "kubectl", "-n", "ovs-srcip", "exec", p.Name, "-c", "srcip-agent", "--",
			"srcipctl", "version", "--agent", "unix:/tmp/srcip-agent.sock")
		if !strings.Contains(out, "srcipctl:    "+release+" (") || !strings.Contains(out, "srcip-agent: "+release+" (") ||
			!strings.Contains(out, "(node "+node+")") {
			t.Errorf("node %s: srcipctl version:\n%s\nwant srcipctl and srcip-agent %s", node, out, release)
		}
	}
}

// importNext writes the release image under a second tag (VERSION-next, stamped so) and imports
// it on every node as an operator would (ctr -n k8s.io images import); it returns the tag.
func importNext(t *testing.T, ctx context.Context, c *cluster.Cluster) string {
	t.Helper()
	next := release(t) + "-next"
	tarball, err := cluster.ReleaseImage(ctx, next, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Lab.Nodes {
		if err := c.KNodes[n.Name].ImportImage(tarball); err != nil {
			t.Fatal(err)
		}
	}
	return next
}

// createEgressGateway creates an EgressGateway that selects no pod (it only has to survive the
// uninstall).
func createEgressGateway(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.CP.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	egw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ovs-srcip.io/v1alpha1", "kind": "EgressGateway",
		"metadata": map[string]any{"name": "kept"},
		"spec": map[string]any{"egressIPs": []any{"203.0.113.50"}, "gatewayNodeSelector": map[string]any{},
			"podSelector": map[string]any{"matchLabels": map[string]any{"app": "none"}}},
	}}
	if err := lab.WaitFor(func() error {
		_, err := dyn.Resource(egwGVR).Create(ctx, egw, metav1.CreateOptions{})
		return err
	}, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// checkKept checks that the CRD and the EgressGateway "kept" outlived the uninstall and that the
// agent's namespace is gone.
func checkKept(t *testing.T, ctx context.Context, c *cluster.Cluster, how string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.CP.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.WaitFor(func() error {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, "ovs-srcip", metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("namespace ovs-srcip still there")
		}
		if !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}, 120*time.Second); err != nil {
		t.Errorf("%s: %v", how, err)
	}
	if _, err := dyn.Resource(crdGVR).Get(ctx, "egressgateways.ovs-srcip.io", metav1.GetOptions{}); err != nil {
		t.Errorf("%s: CRD: %v", how, err)
	}
	if _, err := dyn.Resource(egwGVR).Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Errorf("%s: EgressGateway kept: %v", how, err)
	}
	t.Logf("%s: namespace ovs-srcip gone, CRD and EgressGateway kept", how)
}

func TestDaemonSetInstall(t *testing.T) {
	ctx := context.Background()
	c := startLab(t, ctx)
	v1 := imageRepo + ":" + release(t)

	// kubectl apply -k deploy/crds; kubectl apply -k testdata/overlay (deploy/ with the lab's
	// settings and the Component labelled-nodes).
	t0 := time.Now()
	applyKustomize(t, ctx, c, "../../../deploy/crds")
	applyKustomize(t, ctx, c, "testdata/overlay")
	t.Logf("deploy/crds and deploy/ applied in %v", time.Since(t0).Round(time.Millisecond))

	// Some nodes first: only the labelled node gets an agent and a CNI.
	first := c.Lab.Nodes[0].Name
	label(t, ctx, c, first)
	if _, err := c.WaitNodeReady(ctx, first, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s labelled %s=true: Ready %v after the apply", first, enabledLabel, time.Since(t0).Round(time.Millisecond))
	time.Sleep(5 * time.Second) // time for a wrong DaemonSet controller to place pods elsewhere
	if pods := agentsOn(t, ctx, c); len(pods) != 1 || pods[first].Name == "" {
		t.Fatalf("agent pods on %v, want only on %s", pods, first)
	}
	for _, n := range c.Lab.Nodes[1:] {
		kn, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range kn.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				t.Errorf("node %s (not labelled) is Ready: it has a CNI without ovs-srcip?", n.Name)
			}
		}
	}
	t.Logf("unlabelled nodes: no agent pod, still NotReady (no CNI): ok")
	for _, n := range c.Lab.Nodes[1:] {
		label(t, ctx, c, n.Name)
	}
	for _, n := range c.Lab.Nodes {
		if _, err := c.WaitNodeReady(ctx, n.Name, 120*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Printf("install: 3 nodes Ready %v after kubectl apply -k style install of deploy/crds and deploy/ (labelled one, then two)\n", time.Since(t0).Round(time.Millisecond))
	waitAgentsOn(t, ctx, c, v1)
	fmt.Printf("install: 3 srcip-agent pods Ready on %s %v after the apply\n", v1, time.Since(t0).Round(time.Millisecond))

	// Pods of a Deployment on srcip-cni talk across nodes.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments("app").Create(ctx, cluster.EchoDeployment("app", "echo", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podsTalk(t, ctx, c, "echo", 3, "installed")
	checkVersions(t, ctx, c, release(t))

	// A second release tag, imported as an operator would (ctr -n k8s.io images import), the
	// DaemonSet rolled to it, then kubectl rollout undo.
	next := importNext(t, ctx, c)
	v2 := imageRepo + ":" + next
	t1 := time.Now()
	run(t, c, "kubectl", "-n", "ovs-srcip", "set", "image", "daemonset/srcip-agent", "node-setup="+v2, "srcip-agent="+v2)
	run(t, c, "kubectl", "-n", "ovs-srcip", "rollout", "status", "daemonset/srcip-agent", "--timeout=180s")
	waitAgentsOn(t, ctx, c, v2)
	fmt.Printf("rollout: 3 agents on %s %v after kubectl set image\n", v2, time.Since(t1).Round(time.Millisecond))
	podsTalk(t, ctx, c, "echo", 3, "rolled to "+next)
	checkVersions(t, ctx, c, next)

	t2 := time.Now()
	run(t, c, "kubectl", "-n", "ovs-srcip", "rollout", "undo", "daemonset/srcip-agent")
	run(t, c, "kubectl", "-n", "ovs-srcip", "rollout", "status", "daemonset/srcip-agent", "--timeout=180s")
	waitAgentsOn(t, ctx, c, v1)
	fmt.Printf("rollout undo: 3 agents back on %s %v after kubectl rollout undo\n", v1, time.Since(t2).Round(time.Millisecond))
	t.Logf("agent images after undo: %v", agentImages(t, ctx, c))
	podsTalk(t, ctx, c, "echo", 3, "after rollout undo")
	checkVersions(t, ctx, c, release(t))
	// A pod created after the undo is attached by the rolled-back agent's CNI.
	if _, err := c.Client.AppsV1().Deployments("app").Create(ctx, cluster.EchoDeployment("app", "after", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podsTalk(t, ctx, c, "after", 3, "new pods after rollout undo")

	// Uninstall: kubectl delete -k of the overlay keeps the CRD (deploy/crds) and its objects.
	createEgressGateway(t, ctx, c)
	run(t, c, "kubectl", "delete", "-k", "testdata/overlay", "--wait=false")
	checkKept(t, ctx, c, "kubectl delete -k deploy/ (overlay)")
}

func TestHelmInstall(t *testing.T) {
	ctx := context.Background()
	c := startLab(t, ctx)
	v1 := imageRepo + ":" + release(t)
	for _, n := range c.Lab.Nodes {
		label(t, ctx, c, n.Name)
	}
	t0 := time.Now()
	run(t, c, "helm", "install", "ovs-srcip", "../../../deploy/helm/ovs-srcip", "--namespace", "kube-system",
		"--values", "testdata/values.yaml")
	for _, n := range c.Lab.Nodes {
		if _, err := c.WaitNodeReady(ctx, n.Name, 120*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	waitAgentsOn(t, ctx, c, v1)
	fmt.Printf("helm install: 3 nodes Ready, 3 srcip-agent pods Ready on %s %v after helm install\n", v1, time.Since(t0).Round(time.Millisecond))
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments("app").Create(ctx, cluster.EchoDeployment("app", "echo", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podsTalk(t, ctx, c, "echo", 3, "helm install")
	checkVersions(t, ctx, c, release(t))

	// helm upgrade to a second tag, then helm rollback.
	next := importNext(t, ctx, c)
	t1 := time.Now()
	run(t, c, "helm", "upgrade", "ovs-srcip", "../../../deploy/helm/ovs-srcip", "--namespace", "kube-system",
		"--reuse-values", "--set", "image.tag="+next)
	waitAgentsOn(t, ctx, c, imageRepo+":"+next)
	fmt.Printf("helm upgrade: 3 agents on %s %v after helm upgrade\n", next, time.Since(t1).Round(time.Millisecond))
	checkVersions(t, ctx, c, next)
	t2 := time.Now()
	run(t, c, "helm", "rollback", "ovs-srcip", "--namespace", "kube-system")
	waitAgentsOn(t, ctx, c, v1)
	fmt.Printf("helm rollback: 3 agents back on %s %v after helm rollback\n", v1, time.Since(t2).Round(time.Millisecond))
	podsTalk(t, ctx, c, "echo", 3, "after helm rollback")
	checkVersions(t, ctx, c, release(t))

	createEgressGateway(t, ctx, c)
	run(t, c, "helm", "uninstall", "ovs-srcip", "--namespace", "kube-system")
	checkKept(t, ctx, c, "helm uninstall")
}
