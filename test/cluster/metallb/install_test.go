//go:build metallb

package metallb

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	metalLBVersion  = "v0.15.2" // hack/metallb/go.mod
	metalLBNS       = "metallb-system"
	controllerImage = "localhost/ovs-srcip/metallb-controller:" + metalLBVersion
	speakerImage    = "localhost/ovs-srcip/metallb-speaker:" + metalLBVersion
)

var (
	poolGVR      = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	l2AdvGVR     = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}
	l2StatusGVR  = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "servicel2statuses"}
	dynamicCache dynamic.Interface
)

// metalLBObjects reads the module's metallb-native.yaml (copied by hack/metallb/build.sh) and
// edits it for the lab, in memory:
//   - the images are the lab's (mkimage, imported into every node), imagePullPolicy Never;
//   - webhooks off: the API server runs in the root netns, which reaches pod IPs but no ClusterIP,
//     and the webhook Service would be called on its ClusterIP. The controller gets
//     --webhook-mode=disabled --disable-cert-rotation, the ValidatingWebhookConfiguration and the
//     metallb-webhook-service Service are dropped, and the bgppeers CRD's conversion webhook
//     becomes strategy None (the tests use v1beta2 only, its storage version). A production
//     install keeps the webhooks.
func metalLBObjects(dir string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(filepath.Join(dir, "metallb-native.yaml"))
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if err != nil {
			if err == io.EOF {
				break
			}
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if len(u.Object) == 0 {
			continue
		}
		switch {
		case u.GetKind() == "ValidatingWebhookConfiguration",
			u.GetKind() == "Service" && u.GetName() == "metallb-webhook-service":
			continue
		case u.GetKind() == "CustomResourceDefinition" && u.GetName() == "bgppeers.metallb.io":
			if err := unstructured.SetNestedMap(u.Object, map[string]any{"strategy": "None"}, "spec", "conversion"); err != nil {
				return nil, err
			}
			// myASN and peerASN say format int32 with maximum 4294967295, and this API server
			// refuses every BGPPeer for it ("Maximum boundary value must be of type integer
			// with format int32 in spec.myASN"): the lab drops such a maximum (its ASNs are
			// 64500 and 64512).
			dropInt32Maximum(u.Object)
		case u.GetKind() == "Deployment" || u.GetKind() == "DaemonSet":
			cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
			for i := range cs {
				c := cs[i].(map[string]any)
				switch c["name"] {
				case "controller":
					c["image"] = controllerImage
					args, _ := c["args"].([]any)
					c["args"] = append(args, "--webhook-mode=disabled", "--disable-cert-rotation")
				case "speaker":
					c["image"] = speakerImage
				default:
					return nil, fmt.Errorf("%s %s: unexpected container %v", u.GetKind(), u.GetName(), c["name"])
				}
				c["imagePullPolicy"] = "Never"
			}
			if err := unstructured.SetNestedSlice(u.Object, cs, "spec", "template", "spec", "containers"); err != nil {
				return nil, err
			}
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// dropInt32Maximum removes, anywhere in a CRD's schemas, a maximum above MaxInt32 beside format
// int32.
func dropInt32Maximum(v any) {
	switch x := v.(type) {
	case map[string]any:
		if x["format"] == "int32" {
			switch m := x["maximum"].(type) {
			case int64:
				if m > math.MaxInt32 {
					delete(x, "maximum")
				}
			case float64:
				if m > math.MaxInt32 {
					delete(x, "maximum")
				}
			}
		}
		for _, e := range x {
			dropInt32Maximum(e)
		}
	case []any:
		for _, e := range x {
			dropInt32Maximum(e)
		}
	}
}

// installMetalLB applies metalLBObjects (server-side, in the manifest's order, waiting for each
// CRD to be served) and waits for the controller and the 3 speakers to be Ready.
func installMetalLB(ctx context.Context, c *cluster.Cluster, dir string) error {
	objs, err := metalLBObjects(dir)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.CP.Client.Discovery()))
	dyn, err := dynamic.NewForConfig(c.CP.RESTConfig)
	if err != nil {
		return err
	}
	dynamicCache = dyn
	for _, u := range objs {
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
		}, 30*time.Second); err != nil {
			return fmt.Errorf("%s: %w", gvk, err)
		}
		if err := lab.WaitFor(func() error {
			_, err := ri.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "metallb-test", Force: true})
			return err
		}, 30*time.Second); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
	}
	if _, err := c.WaitPodsReady(ctx, metalLBNS, "component=controller", 1, 3*time.Minute); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if _, err := c.WaitPodsReady(ctx, metalLBNS, "component=speaker", 3, 3*time.Minute); err != nil {
		return fmt.Errorf("speakers: %w", err)
	}
	return nil
}

// metalLBLogs returns the last lines of every MetalLB pod's log (for a failure).
func metalLBLogs(c *cluster.Cluster) string {
	ctx := context.Background()
	pods, err := c.Client.CoreV1().Pods(metalLBNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("metallb pods: %v\n", err)
	}
	var b strings.Builder
	tail := int64(30)
	opts := &corev1.PodLogOptions{TailLines: &tail}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "--- %s on %s: phase %s\n", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, "    %s ready=%v restarts=%d state=%+v\n", cs.Name, cs.Ready, cs.RestartCount, cs.State)
		}
		out, err := c.Client.CoreV1().Pods(metalLBNS).GetLogs(p.Name, opts).DoRaw(ctx)
		if err != nil {
			fmt.Fprintf(&b, "    logs: %v\n", err)
			continue
		}
		b.Write(out)
	}
	return b.String()
}
