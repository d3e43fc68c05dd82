package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// podIPOfFamily is the pod's address of addr's family (status.podIPs), "" when it has none.
func podIPOfFamily(p *corev1.Pod, addr string) string {
	v4, v6 := podIPsByFamily(p)
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() {
		if v6.IsValid() {
			return v6.String()
		}
		return ""
	}
	if v4.IsValid() {
		return v4.String()
	}
	return ""
}

// podIPsByFamily returns the pod's IPv4 and IPv6 addresses from status.podIPs, by family.
func podIPsByFamily(p *corev1.Pod) (v4, v6 netip.Addr) {
	for _, s := range p.Status.PodIPs {
		a, err := netip.ParseAddr(s.IP)
		switch {
		case err != nil:
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !a.Is4In6() && !v6.IsValid():
			v6 = a
		}
	}
	return v4, v6
}

// On a dual-stack cluster (SRCIP_LAB_DUAL_STACK=1, make test's nftables run) every pod gets an address of each family, from
// its node's spec.podCIDRs (srcip-cni with host-local, both ranges); pods reach pods on the other
// nodes over IPv6 (TCP and UDP, across Geneve over the IPv4 underlay), seen with their own IPv6
// address; pods reach the lab client over IPv6, masqueraded to their node's IPv6 address; and a
// PreferDualStack Service gets a ClusterIP of each family, the IPv6 one served by
// kube-proxy to a pod over IPv6 with answers from pods on the other nodes.
func TestDualStackPods(t *testing.T) {
	ctx := context.Background()
	cs := theCluster.Client
	const dsNS = "dualstack"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dsNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), dsNS, metav1.DeleteOptions{}) })
	t0 := time.Now()
	if _, err := cs.AppsV1().Deployments(dsNS).Create(ctx, EchoDeployment(dsNS, "echo6", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := theCluster.WaitPodsReady(ctx, dsNS, "app=echo6", 3, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	printf("dual-stack: 3 echo pods Ready %v after create\n", time.Since(t0).Round(time.Millisecond))
	if !theCluster.DualStack() {
		// The IPv4-only run (make test runs the lab both ways): pods stay single-stack.
		for i := range pods {
			p := &pods[i]
			v4, v6 := podIPsByFamily(p)
			printf("IPv4-only cluster: pod %s on %s: status.podIPs %v\n", p.Name, p.Spec.NodeName, p.Status.PodIPs)
			if len(p.Status.PodIPs) != 1 || !v4.IsValid() || v6.IsValid() {
				t.Errorf("pod %s on an IPv4-only cluster: status.podIPs %v, want one IPv4 address", p.Name, p.Status.PodIPs)
			}
		}
		return
	}
	v6of := map[string]netip.Addr{}
	for i := range pods {
		p := &pods[i]
		v4, v6 := podIPsByFamily(p)
		kn := theCluster.KNodes[p.Spec.NodeName]
		printf("dual-stack: pod %s on %s: status.podIPs %v\n", p.Name, p.Spec.NodeName, p.Status.PodIPs)
		if len(p.Status.PodIPs) != 2 || !v4.IsValid() || !v6.IsValid() {
			t.Errorf("pod %s: status.podIPs %v, want one IPv4 and one IPv6 address", p.Name, p.Status.PodIPs)
			continue
		}
		if kn == nil || !kn.PodCIDR.Contains(v4) || !kn.PodCIDR6.Contains(v6) {
			t.Errorf("pod %s on %s: %s %s not inside the node's pod CIDRs", p.Name, p.Spec.NodeName, v4, v6)
		}
		v6of[p.Name] = v6
	}
	if t.Failed() {
		t.FailNow()
	}

	// Pod to pod over IPv6 across nodes.
	for i := range pods {
		src := &pods[i]
		for j := range pods {
			dst := &pods[j]
			if src.Spec.NodeName == dst.Spec.NodeName {
				continue
			}
			for _, proto := range []string{"tcp", "udp"} {
				addr := net.JoinHostPort(v6of[dst.Name].String(), "8080")
				var r lab.Reply
				retry(t, src.Name+" -> "+proto+" "+addr, func() (err error) { r, err = theCluster.PodRequest(src, proto, addr); return err })
				printf("dual-stack: %s (%s) -> %s %s: answered by %s, which saw %s\n", src.Spec.NodeName, v6of[src.Name], proto, addr, r.Pod, r.Client)
				if r.Pod != dst.Name || r.ClientIP() != v6of[src.Name].String() {
					t.Errorf("%s -> %s %s: reply %+v, want pod %s seeing %s", src.Name, proto, addr, r, dst.Name, v6of[src.Name])
				}
			}
		}
	}

	// Pod to outside over IPv6 (the lab client's IPv6 address): masqueraded to the node's IPv6
	// InternalIP (node-setup's table ip6 masquerade), out br-ex.
	c := theCluster
	cns, err := c.Lab.Netns("client")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.start("outside server v6", filepath.Join(c.dir, "outside6.log"),
		"ip", "netns", "exec", cns, c.cfg.EchoBin, "serve", "--tcp", ":9091", "--name", "outside6", "--node", "client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.stop(c.logf, 5*time.Second) })
	out := net.JoinHostPort(c.ClientIP6("client").String(), "9091")
	for i := range pods {
		p := &pods[i]
		want := c.KNodes[p.Spec.NodeName].IP6.String()
		var r lab.Reply
		retry(t, p.Name+" -> outside "+out, func() (err error) { r, err = c.PodRequest(p, "tcp", out); return err })
		printf("dual-stack: %s (%s on %s) -> outside %s: the outside server saw %s\n", p.Name, v6of[p.Name], p.Spec.NodeName, out, r.Client)
		if r.ClientIP() != want {
			t.Errorf("outside server saw %s, want node %s's IPv6 %s", r.Client, p.Spec.NodeName, want)
		}
	}

	// A PreferDualStack ClusterIP Service: both families, the IPv6 one reached from a pod.
	policy := corev1.IPFamilyPolicyPreferDualStack
	svc := echoService("echo6-cip", corev1.ServiceTypeClusterIP, 0)
	svc.Namespace = dsNS
	svc.Spec.Selector = map[string]string{"app": "echo6"}
	svc.Spec.IPFamilyPolicy = &policy
	svc, err = cs.CoreV1().Services(dsNS).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	printf("dual-stack: Service %s: ipFamilies %v, clusterIPs %v\n", svc.Name, svc.Spec.IPFamilies, svc.Spec.ClusterIPs)
	var cip6 netip.Addr
	for _, s := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(s); err == nil && a.Is6() {
			cip6 = a
		}
	}
	if len(svc.Spec.ClusterIPs) != 2 || !cip6.IsValid() {
		t.Fatalf("Service %s: clusterIPs %v, want one per family", svc.Name, svc.Spec.ClusterIPs)
	}
	src := &pods[0]
	addr := net.JoinHostPort(cip6.String(), "80")
	remote := map[string]lab.Reply{}
	retry(t, "answers from pods on the other nodes through "+addr, func() error {
		r, err := theCluster.PodRequest(src, "tcp", addr)
		if err != nil {
			return err
		}
		if r.Node != src.Spec.NodeName {
			remote[r.Node] = r
		}
		if len(remote) < 2 {
			return fmt.Errorf("answers from other nodes so far: %v", remote)
		}
		return nil
	})
	for n, r := range remote {
		printf("dual-stack: %s (%s) -> ClusterIP %s: answered by %s on %s, which saw %s\n", src.Spec.NodeName, v6of[src.Name], addr, r.Pod, n, r.Client)
		if r.ClientIP() != v6of[src.Name].String() {
			t.Errorf("backend %s saw %s, want the source pod %s", r.Pod, r.Client, v6of[src.Name])
		}
	}
}

// On a dual-stack cluster an annotated RequireDualStack LoadBalancer Service (externalTrafficPolicy
// Cluster) keeps the client's IP in both families: the lab client reaches it on its IPv6 LB IP and
// on the IPv6 NodePort of two nodes, and on the IPv4 ones, and every backend, on every node, sees
// the client's own address of that family (the agent ct-DNATs on the ingress node, Geneve over
// the IPv4 underlay, replies tunnelled back). Then each node's host reaches a pod on another node
// over IPv6 (from its pod gateway address, node-setup's route source). On the IPv4-only run the
// Service is single-stack and its IPv4 path is checked alone.
func TestDualStackAnnotatedService(t *testing.T) {
	ctx := context.Background()
	c := theCluster
	svc := echoService("echo-lb-ds", corev1.ServiceTypeLoadBalancer, 30086)
	svc.Annotations = map[string]string{"ovs-srcip.io/preserve-source-ip": "true"}
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	lbIPs := []string{"203.0.113.106"}
	if c.DualStack() {
		policy := corev1.IPFamilyPolicyRequireDualStack
		svc.Spec.IPFamilyPolicy = &policy
		lbIPs = append(lbIPs, "2001:db8:0:113::106")
	}
	s := createService(t, svc)
	for _, ip := range lbIPs {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	if _, err := c.Client.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	printf("dual-stack Service %s: ipFamilies %v, clusterIPs %v, LB IPs %v\n", s.Name, s.Spec.IPFamilies, s.Spec.ClusterIPs, lbIPs)
	type target struct{ addr, client string }
	targets := []target{{"203.0.113.106:80", clientIP}, {nodeIP("node1") + ":30086", clientIP}}
	if c.DualStack() {
		cip6 := c.ClientIP6("client").String()
		targets = append(targets,
			target{"[2001:db8:0:113::106]:80", cip6},
			target{net.JoinHostPort(c.KNodes["node1"].IP6.String(), "30086"), cip6},
			target{net.JoinHostPort(c.KNodes["node2"].IP6.String(), "30086"), cip6})
	}
	for _, tg := range targets {
		seen := map[string]string{}
		retry(t, "answers from every node through "+tg.addr, func() error {
			r, err := c.Lab.Request("client", "tcp", tg.addr)
			if err != nil {
				return err
			}
			if r.ClientIP() != tg.client {
				t.Fatalf("%s: backend %s on %s saw %s, want the client %s", tg.addr, r.Pod, r.Node, r.Client, tg.client)
			}
			seen[r.Node] = r.Pod
			if len(seen) < 3 {
				return fmt.Errorf("answers from %v", seen)
			}
			return nil
		})
		printf("client %s -> %s: answered by %v, each saw %s\n", tg.client, tg.addr, seen, tg.client)
	}
	if !c.DualStack() {
		return
	}
	// The host of each node to a pod on another node, over IPv6.
	ps := pods(t)
	for _, n := range []string{"node1", "node2", "node3"} {
		for i := range ps {
			p := &ps[i]
			if p.Spec.NodeName == n {
				continue
			}
			_, v6 := podIPsByFamily(p)
			addr := net.JoinHostPort(v6.String(), "8080")
			var r lab.Reply
			retry(t, n+" host -> "+addr, func() (err error) { r, err = c.Lab.Request(n, "tcp", addr); return err })
			printf("dual-stack: host of %s -> pod %s on %s at %s: answered, the pod saw %s\n", n, p.Name, p.Spec.NodeName, addr, r.Client)
			if r.Pod != p.Name {
				t.Errorf("host of %s -> %s: answered by %s, want %s", n, addr, r.Pod, p.Name)
			}
			break
		}
	}
}
