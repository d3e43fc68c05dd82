// Package install applies deploy/ (kustomize, as `kubectl apply -k`) to a real-kubelet lab whose
// nodes run nothing of ovs-srcip yet (test/cluster's CNIDaemonSet mode): the DaemonSet's
// node-setup init container installs srcip-cni and its conflist, the nodes go Ready, the agent
// pods go Ready, and a Deployment's pods talk across nodes.
package install

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

func TestDaemonSetInstall(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	bins := map[string]string{"srcip-agent": "../../../cmd/srcip-agent", "srcip-cni": "../../../cmd/srcip-cni",
		"echo": "../../echo", "pause": "../../pause", "portmap": "github.com/containernetworking/plugins/plugins/meta/portmap"}
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
	c, err := cluster.Start(ctx, cluster.Config{
		Lab:      lab.Config{ManifestsDir: "../testdata/nodes", NoGateway: true, EchoBin: filepath.Join(tmp, "echo")},
		AgentBin: filepath.Join(tmp, "srcip-agent"), CNIBin: filepath.Join(tmp, "srcip-cni"), PortmapBin: filepath.Join(tmp, "portmap"),
		EchoBin: filepath.Join(tmp, "echo"), PauseBin: filepath.Join(tmp, "pause"),
		CNI: cluster.CNIDaemonSet, Logf: logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
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
	}()
	for _, n := range c.Lab.Nodes {
		t.Logf("node %s registered %v after its start, NotReady (no CNI yet)", n.Name, c.NodeReady[n.Name].Round(time.Millisecond))
	}

	// kubectl apply -k testdata/overlay (deploy/ with the lab's image and settings).
	t0 := time.Now()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), "testdata/overlay")
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	dc := c.CP.Client.Discovery()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
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
		var m *metaRESTMapping
		if err := lab.WaitFor(func() error {
			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				mapper.Reset() // a CRD applied just before
				return err
			}
			m = &metaRESTMapping{mapping.Resource, mapping.Scope.Name() == "namespace"}
			return nil
		}, 20*time.Second); err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		ri := dyn.Resource(m.gvr)
		var apply func() error
		if m.namespaced {
			apply = func() error {
				_, err := ri.Namespace(u.GetNamespace()).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "kubectl", Force: true})
				return err
			}
		} else {
			apply = func() error {
				_, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "kubectl", Force: true})
				return err
			}
		}
		if err := lab.WaitFor(apply, 20*time.Second); err != nil {
			t.Fatalf("apply %s %s/%s: %v", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
	t.Logf("deploy/ applied in %v", time.Since(t0).Round(time.Millisecond))

	for _, n := range c.Lab.Nodes {
		if _, err := c.WaitNodeReady(ctx, n.Name, 120*time.Second); err != nil {
			t.Fatal(err)
		}
		t.Logf("node %s Ready %v after the apply", n.Name, time.Since(t0).Round(time.Millisecond))
	}
	fmt.Printf("install: 3 nodes Ready %v after kubectl apply -k style install of deploy/\n", time.Since(t0).Round(time.Millisecond))
	agents, err := c.WaitPodsReady(ctx, "ovs-srcip", "app.kubernetes.io/name=srcip-agent", 3, 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 srcip-agent pods Ready %v after the apply", time.Since(t0).Round(time.Millisecond))
	fmt.Printf("install: 3 srcip-agent pods Ready %v after the apply\n", time.Since(t0).Round(time.Millisecond))
	for _, p := range agents {
		t.Logf("agent pod %s on %s", p.Name, p.Spec.NodeName)
	}

	// Pods of a Deployment on srcip-cni talk across nodes.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	if _, err := c.Client.AppsV1().Deployments("app").Create(ctx, cluster.EchoDeployment("app", "echo", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := c.WaitPodsReady(ctx, "app", "app=echo", 3, 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 echo pods Ready %v after create", time.Since(t1).Round(time.Millisecond))
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
				t.Fatalf("%s -> %s: %v", src.Name, dst.Name, err)
			}
			if r.Pod != dst.Name || r.ClientIP() != src.Status.PodIP {
				t.Errorf("%s -> %s: %+v", src.Name, dst.Name, r)
			}
		}
	}
	t.Logf("pod <-> pod across the 3 nodes: ok")
}

type metaRESTMapping struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}
