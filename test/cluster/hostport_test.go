package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const hostPortNum = 54323

// hostPortPod is an echo pod on node with one hostPort (hostIP, proto) to its port 8080.
func hostPortPod(name, node, hostIP string, proto corev1.Protocol) *corev1.Pod {
	zero := int64(0)
	no := false
	arg := "--tcp"
	if proto == corev1.ProtocolUDP {
		arg = "--udp"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "hostport"}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Containers: []corev1.Container{{
				Name: "echo", Image: EchoImage, ImagePullPolicy: corev1.PullNever,
				Args:  []string{"serve", arg, ":8080", "--name", name, "--node", node},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: proto, HostPort: hostPortNum, HostIP: hostIP}},
			}},
		},
	}
}

// The upstream conformance test "[sig-network] HostPort validates that there is no conflict
// between pods with same hostPort but different hostIP and protocol", and then some: three pods
// on node1 with hostPort 54323 - TCP on 127.0.0.1, TCP on node1's IP, UDP on node1's IP - are
// scheduled together, and containerd's CNI call (srcip-cni, then portmap from node-setup's
// conflist) makes each reachable at its own hostIP/protocol: from node1 itself (127.0.0.1 and the
// node IP), from node2's host, from a pod on node2 and from the external client. Every client but
// 127.0.0.1 (which portmap masquerades) is seen with its own address.
func TestHostPort(t *testing.T) {
	ctx := context.Background()
	c := theCluster
	n1 := nodeIP("node1")
	hp := map[string]*corev1.Pod{
		"hp-local": hostPortPod("hp-local", "node1", "127.0.0.1", corev1.ProtocolTCP),
		"hp-tcp":   hostPortPod("hp-tcp", "node1", n1, corev1.ProtocolTCP),
		"hp-udp":   hostPortPod("hp-udp", "node1", n1, corev1.ProtocolUDP),
	}
	for _, p := range hp {
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for name := range hp {
			_ = c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
	})
	ready, err := c.WaitPodsReady(ctx, ns, "app=hostport", 3, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ready {
		t.Logf("pod %s on %s, IP %s, hostPort %d %s on %s", p.Name, p.Spec.NodeName, p.Status.PodIP, hostPortNum,
			p.Spec.Containers[0].Ports[0].Protocol, p.Spec.Containers[0].Ports[0].HostIP)
	}
	var remotePod *corev1.Pod
	for _, p := range pods(t) {
		if p.Spec.NodeName == "node2" {
			remotePod = &p
		}
	}
	for _, tc := range []struct {
		from, proto, addr, wantPod, wantClient string
	}{
		{"node1", "tcp", fmt.Sprintf("127.0.0.1:%d", hostPortNum), "hp-local", ""},
		{"node1", "tcp", fmt.Sprintf("%s:%d", n1, hostPortNum), "hp-tcp", n1},
		{"node1", "udp", fmt.Sprintf("%s:%d", n1, hostPortNum), "hp-udp", n1},
		{"node2", "tcp", fmt.Sprintf("%s:%d", n1, hostPortNum), "hp-tcp", nodeIP("node2")},
		{"node2", "udp", fmt.Sprintf("%s:%d", n1, hostPortNum), "hp-udp", nodeIP("node2")},
		{"client", "tcp", fmt.Sprintf("%s:%d", n1, hostPortNum), "hp-tcp", clientIP},
		{"client", "udp", fmt.Sprintf("%s:%d", n1, hostPortNum), "hp-udp", clientIP},
		{"pod on node2", "tcp", fmt.Sprintf("%s:%d", n1, hostPortNum), "hp-tcp", nodeIP("node2")},
	} {
		var r lab.Reply
		retry(t, tc.from+" -> "+tc.proto+" "+tc.addr, func() (err error) {
			if tc.from == "pod on node2" {
				r, err = c.PodRequest(remotePod, tc.proto, tc.addr)
			} else {
				r, err = c.Lab.Request(tc.from, tc.proto, tc.addr)
			}
			return err
		})
		t.Logf("%s -> %s %s: answered by %s, which saw %s", tc.from, tc.proto, tc.addr, r.Pod, r.Client)
		if r.Pod != tc.wantPod {
			t.Errorf("%s -> %s %s: answered by %s, want %s", tc.from, tc.proto, tc.addr, r.Pod, tc.wantPod)
		}
		if tc.wantClient != "" && r.ClientIP() != tc.wantClient {
			t.Errorf("%s -> %s %s: the pod saw %s, want %s", tc.from, tc.proto, tc.addr, r.Client, tc.wantClient)
		}
	}
}

// A hostNetwork client (the node's own network namespace) reaches a pod on another node from its
// node's InternalIP (node-setup's route of the cluster CIDR into srcip-gw0 has it as source), not
// from its pod gateway address, and gets the pod's answers (tunnelled back to its node): what the
// conformance test "Services should implement NodePort and HealthCheckNodePort correctly when
// ExternalTrafficPolicy changes" expects ("expected client IP to be preserved").
func TestHostNetworkClientSeenWithNodeIP(t *testing.T) {
	for _, p := range pods(t) {
		for _, n := range theCluster.Lab.Nodes {
			if n.Name == p.Spec.NodeName {
				continue
			}
			for _, proto := range []string{"tcp", "udp"} {
				addr := net.JoinHostPort(p.Status.PodIP, "8080")
				// IPv4: the node's InternalIP. IPv6 (the first family on an IPv6-first cluster): the
				// gateway address of the node's IPv6 pod CIDR, by design (nodesetup routeSource6:
				// IPv6 has no twin of the OriginNode path that tunnels replies to a node address
				// back, so the host's IPv6 connections to pods take a source that routes back
				// over Geneve; as Calico's tunnel addresses do).
				wantIP := n.IP.String()
				if a, err := netip.ParseAddr(p.Status.PodIP); err == nil && a.Is6() {
					wantIP = theCluster.KNodes[n.Name].PodCIDR6.Addr().Next().String()
				}
				var r lab.Reply
				retry(t, n.Name+" -> "+proto+" "+addr, func() (err error) { r, err = theCluster.Lab.Request(n.Name, proto, addr); return err })
				t.Logf("host of %s -> %s %s (%s on %s): the pod saw %s", n.Name, proto, addr, p.Name, p.Spec.NodeName, r.Client)
				if r.ClientIP() != wantIP {
					t.Errorf("host of %s -> %s %s: the pod saw %s, want %s", n.Name, proto, addr, r.Client, wantIP)
				}
			}
		}
	}
}

// A node's own connection to a ClusterIP Service leaves masqueraded by kube-proxy (its source is
// not in the cluster CIDR) out of srcip-gw0 towards the endpoint; the masquerade takes the node's
// InternalIP, never the link-scoped pod gateway address of srcip-gw0 (the e2e test "Services
// should implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes"
// expects the client node's IP through its own NodePort's short-circuit the same way). Backends on
// this node and on the others.
func TestHostToClusterIPMasqueradedToNodeIP(t *testing.T) {
	svc := createService(t, echoService("echo-hostcip", corev1.ServiceTypeClusterIP, 0))
	addr := net.JoinHostPort(svc.Spec.ClusterIP, "80")
	n := theCluster.Lab.Nodes[0]
	seen := map[string]lab.Reply{}
	retry(t, "answers from every node's pod through "+addr, func() error {
		r, err := theCluster.Lab.Request(n.Name, "tcp", addr)
		if err != nil {
			return err
		}
		seen[r.Node] = r
		if len(seen) < 3 {
			return fmt.Errorf("answered from %d nodes so far", len(seen))
		}
		return nil
	})
	for node, r := range seen {
		t.Logf("host of %s -> ClusterIP %s: answered by %s on %s, which saw %s", n.Name, addr, r.Pod, node, r.Client)
		if r.ClientIP() != n.IP.String() {
			t.Errorf("backend %s on %s saw %s, want the node's InternalIP %s (not srcip-gw0's gateway address)", r.Pod, node, r.Client, n.IP)
		}
	}
}
