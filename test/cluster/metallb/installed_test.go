//go:build metallb

package metallb

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMetalLBInstalled: MetalLB's controller (a Deployment on srcip-cni, reaching the API server
// through the kubernetes ClusterIP) and one speaker per node (hostNetwork) are Ready, and the
// controller wrote the memberlist Secret the speakers find each other with.
func TestMetalLBInstalled(t *testing.T) {
	ctx := context.Background()
	c := theCluster.Client.CoreV1()
	ctrl, err := theCluster.WaitPodsReady(ctx, metalLBNS, "component=controller", 1, 10*time.Second)
	if err != nil {
		t.Fatalf("controller: %v", err)
	}
	sp, err := theCluster.WaitPodsReady(ctx, metalLBNS, "component=speaker", 3, 10*time.Second)
	if err != nil {
		t.Fatalf("speakers: %v", err)
	}
	nodes := map[string]string{}
	for _, p := range sp {
		if !p.Spec.HostNetwork {
			t.Errorf("speaker %s: not hostNetwork", p.Name)
		}
		nodes[p.Spec.NodeName] = p.Status.PodIP
	}
	if len(nodes) != 3 {
		t.Errorf("speakers on %v, want one on each of the 3 nodes", nodes)
	}
	if _, err := c.Secrets(metalLBNS).Get(ctx, "memberlist", metav1.GetOptions{}); err != nil {
		t.Errorf("memberlist Secret: %v", err)
	}
	t.Logf("MetalLB %s: controller %s on %s (pod IP %s); speakers (node: pod IP) %v; Ready %v after the apply",
		metalLBVersion, ctrl[0].Name, ctrl[0].Spec.NodeName, ctrl[0].Status.PodIP, nodes, installDur.Round(time.Millisecond))
}
