package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const ns = "cluster"

// echoPods are the pods of the echo Deployment (one per node), set by TestDeployment.
var echoPods []corev1.Pod

func TestNodesReady(t *testing.T) {
	for _, n := range theCluster.Lab.Nodes {
		t.Logf("node %s Ready %v after its start (pod CIDR %s)", n.Name, theCluster.NodeReady[n.Name].Round(time.Millisecond), theCluster.KNodes[n.Name].PodCIDR)
	}
}

// A Deployment's pods are scheduled by kube-scheduler, one per node, and become Ready (their
// readiness probes pass).
func TestDeployment(t *testing.T) {
	ctx := context.Background()
	cs := theCluster.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, EchoDeployment(ns, "echo", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := theCluster.WaitPodsReady(ctx, ns, "app=echo", 3, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d := time.Since(t0)
	t.Logf("3 echo pods Ready %v after the Deployment was created", d.Round(time.Millisecond))
	printf("cluster: echo Deployment: 3 pods Ready %v after create\n", d.Round(time.Millisecond))
	nodes := map[string]bool{}
	for _, p := range pods {
		t.Logf("pod %s on %s, IP %s", p.Name, p.Spec.NodeName, p.Status.PodIP)
		nodes[p.Spec.NodeName] = true
	}
	if len(nodes) != 3 {
		t.Fatalf("pods on %d nodes, want 3", len(nodes))
	}
	echoPods = pods
}

// kube-proxy serves Services in the lab's mode (SRCIP_CLUSTER_PROXY_MODE) on every node: its
// rules are iptables chains (KUBE-SERVICES in table nat, through iptables' nf_tables backend) in
// iptables mode, its own nftables table ip kube-proxy in nftables mode, never both.
func TestKubeProxyMode(t *testing.T) {
	mode := theCluster.ProxyMode()
	for _, n := range theCluster.Lab.Nodes {
		var ipt, nft string
		err := lab.WaitFor(func() (err error) {
			if ipt, err = theCluster.Lab.Exec(n.Name, "iptables-save", "-t", "nat"); err != nil {
				return err
			}
			nft, _ = theCluster.Lab.Exec(n.Name, "nft", "list", "tables")
			inIPT, inNFT := strings.Contains(ipt, "-A KUBE-SERVICES "), strings.Contains(nft, "table ip kube-proxy")
			if want := mode == ProxyIPTables; inIPT != want || inNFT == want {
				return fmt.Errorf("KUBE-SERVICES in iptables nat: %v, nftables table ip kube-proxy: %v", inIPT, inNFT)
			}
			return nil
		}, 20*time.Second)
		if err != nil {
			t.Fatalf("node %s, kube-proxy in %s mode: %v\n%s\n%s", n.Name, mode, err, tail(ipt, 20), nft)
		}
		t.Logf("node %s: kube-proxy in %s mode, %d iptables nat rules", n.Name, mode, strings.Count(ipt, "\n-A KUBE-"))
	}
}

// Every node is a zone of its own (kubelet --node-labels), and the EndpointSlice controller
// copies it into each endpoint's zone, as topology hints and trafficDistribution need.
func TestNodeZones(t *testing.T) {
	ctx := context.Background()
	for _, n := range theCluster.Lab.Nodes {
		node, err := theCluster.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := node.Labels[corev1.LabelTopologyZone]; got != ZoneOf(n.Name) {
			t.Errorf("node %s: label %s=%q, want %q", n.Name, corev1.LabelTopologyZone, got, ZoneOf(n.Name))
		}
	}
	createService(t, echoService("echo-zones", corev1.ServiceTypeClusterIP, 0))
	retry(t, "endpoint zones of echo-zones", func() error {
		l, err := theCluster.Client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=echo-zones"})
		if err != nil {
			return err
		}
		n := 0
		for _, s := range l.Items {
			for _, ep := range s.Endpoints {
				if ep.NodeName == nil || ep.Zone == nil || *ep.Zone != ZoneOf(*ep.NodeName) {
					return fmt.Errorf("endpoint %v: node %v zone %v", ep.Addresses, ep.NodeName, ep.Zone)
				}
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d endpoints, want 3", n)
		}
		return nil
	})
}
