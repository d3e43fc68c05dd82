package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const clientIP = "198.51.100.10"

// pods returns the echo pods (Ready, one per node), failing t when TestDeployment did not run.
func pods(t *testing.T) []corev1.Pod {
	t.Helper()
	if len(echoPods) != 3 {
		t.Fatal("no echo pods (TestDeployment failed)")
	}
	return echoPods
}

func refreshPods(t *testing.T) {
	t.Helper()
	p, err := theCluster.WaitPodsReady(context.Background(), ns, "app=echo", 3, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	echoPods = p
}

func nodeIP(node string) string { return theCluster.Lab.Node(node).IP.String() }

// retry runs f until it succeeds (20 s).
func retry(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := lab.WaitFor(f, 20*time.Second); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Every pod reaches every pod on the other nodes (TCP and UDP) over Geneve; the backend sees the
// source pod's IP.
func TestPodToPodAcrossNodes(t *testing.T) {
	for _, src := range pods(t) {
		for _, dst := range pods(t) {
			if src.Spec.NodeName == dst.Spec.NodeName {
				continue
			}
			for _, proto := range []string{"tcp", "udp"} {
				addr := net.JoinHostPort(dst.Status.PodIP, "8080") // the first family's (IPv6 on an IPv6-first cluster)
				var r lab.Reply
				retry(t, src.Name+" -> "+addr, func() (err error) { r, err = theCluster.PodRequest(&src, proto, addr); return err })
				t.Logf("%s (%s) -> %s %s: answered by %s, which saw %s", src.Spec.NodeName, src.Status.PodIP, proto, addr, r.Pod, r.Client)
				if r.Pod != dst.Name || r.ClientIP() != src.Status.PodIP {
					t.Errorf("%s -> %s: reply %+v, want pod %s seeing %s", src.Name, addr, r, dst.Name, src.Status.PodIP)
				}
			}
		}
	}
}

func createService(t *testing.T, svc *corev1.Service) *corev1.Service {
	t.Helper()
	s, err := theCluster.Client.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = theCluster.Client.CoreV1().Services(ns).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	})
	return s
}

func echoService(name string, typ corev1.ServiceType, nodePort int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80,
				TargetPort: intstr.FromInt32(8080), NodePort: nodePort}},
		},
	}
}

// A pod reaches a ClusterIP Service through kube-proxy on its node (DNAT in the host, out
// srcip-gw0 into br-int), answered by pods on the other nodes too.
func TestPodToClusterIPService(t *testing.T) {
	svc := createService(t, echoService("echo-cip", corev1.ServiceTypeClusterIP, 0))
	src := pods(t)[0]
	addr := net.JoinHostPort(svc.Spec.ClusterIP, "80")
	want := podIPOfFamily(&src, svc.Spec.ClusterIP) // the source address of the ClusterIP's family
	remote := map[string]lab.Reply{}
	retry(t, "answers from pods on the other nodes through "+addr, func() error {
		r, err := theCluster.PodRequest(&src, "tcp", addr)
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
		t.Logf("%s (%s) -> ClusterIP %s: answered by %s on %s, which saw %s", src.Spec.NodeName, src.Status.PodIP, addr, r.Pod, n, r.Client)
		if r.ClientIP() != want {
			t.Errorf("backend %s saw %s, want the source pod %s", r.Pod, r.Client, want)
		}
	}
}

// A pod reaches a server outside the cluster (in the lab's client netns), masqueraded to its
// node's IP.
func TestPodToOutside(t *testing.T) {
	c := theCluster
	ns, err := c.Lab.Netns("client")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.start("outside server", filepath.Join(c.dir, "outside.log"),
		"ip", "netns", "exec", ns, c.cfg.EchoBin, "serve", "--tcp", ":9090", "--name", "outside", "--node", "client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.stop(c.logf, 5*time.Second) })
	for _, p := range pods(t) {
		var r lab.Reply
		retry(t, p.Name+" -> outside", func() (err error) { r, err = c.PodRequest(&p, "tcp", clientIP+":9090"); return err })
		t.Logf("%s (%s on %s) -> %s:9090: the outside server saw %s", p.Name, p.Status.PodIP, p.Spec.NodeName, clientIP, r.Client)
		if r.ClientIP() != nodeIP(p.Spec.NodeName) {
			t.Errorf("outside server saw %s, want node %s's IP %s", r.Client, p.Spec.NodeName, nodeIP(p.Spec.NodeName))
		}
	}
}

// The kubelet's probes reach the pods through srcip-gw0: the echo pods' TCP liveness and readiness
// probes pass (Ready, never restarted), and probes against a closed port fail as they should
// (not Ready; restarted by the liveness probe).
func TestProbes(t *testing.T) {
	ctx := context.Background()
	d := EchoDeployment(ns, "badprobe", 1)
	c0 := &d.Spec.Template.Spec.Containers[0]
	c0.ReadinessProbe.TCPSocket.Port = intstr.FromInt32(9999)
	c0.LivenessProbe.TCPSocket.Port = intstr.FromInt32(9999)
	if _, err := theCluster.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = theCluster.Client.AppsV1().Deployments(ns).Delete(ctx, "badprobe", metav1.DeleteOptions{})
	})
	var bad corev1.Pod
	retry(t, "the bad-probe pod restarted by its liveness probe", func() error {
		l, err := theCluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=badprobe"})
		if err != nil || len(l.Items) != 1 {
			return fmt.Errorf("pods %v %v", l, err)
		}
		bad = l.Items[0]
		if len(bad.Status.ContainerStatuses) == 0 || bad.Status.ContainerStatuses[0].RestartCount == 0 {
			return fmt.Errorf("not restarted yet")
		}
		return nil
	})
	if podReady(&bad) {
		t.Errorf("pod %s with a failing readiness probe is Ready", bad.Name)
	}
	t.Logf("pod %s (probes on a closed port): Ready=false, restarted %d times by its liveness probe", bad.Name, bad.Status.ContainerStatuses[0].RestartCount)
	for _, p := range pods(t) {
		cur, err := theCluster.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rc := cur.Status.ContainerStatuses[0].RestartCount
		t.Logf("pod %s on %s: Ready=%v, restarts %d (probes every 1 s since %s)", cur.Name, cur.Spec.NodeName, podReady(cur), rc, cur.Status.StartTime.Format(time.TimeOnly))
		if !podReady(cur) || rc != 0 {
			t.Errorf("pod %s: Ready=%v restarts=%d, want Ready and never restarted", cur.Name, podReady(cur), rc)
		}
	}
}

// An external client reaches an annotated LoadBalancer Service (externalTrafficPolicy Cluster)
// on its LB IP and its NodePort; every backend, on every node, sees the client's IP.
func TestAnnotatedService(t *testing.T) {
	ctx := context.Background()
	svc := echoService("echo-lb", corev1.ServiceTypeLoadBalancer, 30080)
	svc.Annotations = map[string]string{"ovs-srcip.io/preserve-source-ip": "true"}
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	s := createService(t, svc)
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.100"}}
	if _, err := theCluster.Client.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"203.0.113.100:80", nodeIP("node1") + ":30080", nodeIP("node2") + ":30080"} {
		seen := map[string]string{}
		retry(t, "answers from every node through "+addr, func() error {
			r, err := theCluster.Lab.Request("client", "tcp", addr)
			if err != nil {
				return err
			}
			if r.ClientIP() != clientIP {
				t.Fatalf("%s: backend %s on %s saw %s, want the client %s", addr, r.Pod, r.Node, r.Client, clientIP)
			}
			seen[r.Node] = r.Pod
			if len(seen) < 3 {
				return fmt.Errorf("answers from %v", seen)
			}
			return nil
		})
		t.Logf("client %s -> %s: answered by %v, each saw %s", clientIP, addr, seen, clientIP)
	}
}

// An unannotated NodePort is left to kube-proxy and still works.
func TestUnannotatedNodePort(t *testing.T) {
	createService(t, echoService("echo-np", corev1.ServiceTypeNodePort, 30081))
	for _, n := range []string{"node1", "node3"} {
		addr := nodeIP(n) + ":30081"
		var r lab.Reply
		retry(t, addr, func() (err error) { r, err = theCluster.Lab.Request("client", "tcp", addr); return err })
		t.Logf("client -> %s (kube-proxy): answered by %s on %s, which saw %s", addr, r.Pod, r.Node, r.Client)
	}
}

// A NodePort on the node's own 127.0.0.1 is where kube-proxy's modes differ, for an annotated
// Service too: br-ex never sees a node's loopback traffic, so the agent's flows do not serve it.
// In iptables mode kube-proxy does (localhostNodePorts: route_localnet, masqueraded, so the
// backends see the node's InternalIP, never 127.0.0.1); in nftables mode nothing answers
// (kube-proxy's nftables mode has no localhost NodePorts). The node IP's NodePort from outside is
// the agent's in both modes (the client's IP kept).
func TestLocalhostNodePort(t *testing.T) {
	svc := echoService("echo-lo", corev1.ServiceTypeNodePort, 30082)
	svc.Annotations = map[string]string{"ovs-srcip.io/preserve-source-ip": "true"}
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	createService(t, svc)
	n := theCluster.Lab.Nodes[0]
	ext := n.IP.String() + ":30082"
	retry(t, "client -> "+ext, func() error {
		r, err := theCluster.Lab.Request("client", "tcp", ext)
		if err == nil && r.ClientIP() != clientIP {
			return fmt.Errorf("backend %s saw %s, want the client %s (served by the agent)", r.Pod, r.Client, clientIP)
		}
		return err
	})
	addr := "127.0.0.1:30082"
	if theCluster.ProxyMode() == ProxyNFTables {
		if r, err := theCluster.Lab.RequestWith(n.Name, "tcp", addr, lab.RequestOpts{Timeout: "2s"}); err == nil {
			t.Fatalf("host of %s -> %s answered by %s with kube-proxy in nftables mode, which has no localhost NodePorts", n.Name, addr, r.Pod)
		}
		t.Logf("host of %s -> %s: no answer (kube-proxy in nftables mode: no localhost NodePorts)", n.Name, addr)
		return
	}
	seen := map[string]lab.Reply{}
	retry(t, "answers from every node through "+addr, func() error {
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
		t.Logf("host of %s -> %s (kube-proxy, iptables mode): answered by %s on %s, which saw %s", n.Name, addr, r.Pod, node, r.Client)
		if r.ClientIP() != n.IP.String() {
			t.Errorf("backend %s on %s saw %s, want the node's InternalIP %s (masqueraded by kube-proxy)", r.Pod, node, r.Client, n.IP)
		}
	}
}

// podPort finds the pod's port on its node's br-int by external_ids:pod-uid: name and ofport.
func podPort(t *testing.T, p *corev1.Pod) (name string, ofport int) {
	t.Helper()
	out, err := theCluster.Lab.Vsctl(p.Spec.NodeName, "--bare", "--columns=name,ofport", "find", "Interface",
		"external_ids:pod-uid="+string(p.UID))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) < 2 {
		return "", 0
	}
	ofport, _ = strconv.Atoi(f[1])
	return f[0], ofport
}

// Deleting a pod removes its OVS port and every flow for its port and address; the Deployment's
// replacement gets a new port.
func TestDeletePodRemovesPort(t *testing.T) {
	ctx := context.Background()
	p := pods(t)[2]
	name, ofport := podPort(t, &p)
	if name == "" {
		t.Fatalf("pod %s has no port on %s's br-int", p.Name, p.Spec.NodeName)
	}
	match := "in_port=" + strconv.Itoa(ofport)
	flows, err := theCluster.Lab.DumpFlows(p.Spec.NodeName, "br-int", match)
	if err != nil {
		t.Fatal(err)
	}
	before := strings.Count(flows, "cookie=")
	t.Logf("pod %s (%s) on %s: port %s ofport %d, %d flows with %s", p.Name, p.Status.PodIP, p.Spec.NodeName, name, ofport, before, match)
	if before == 0 {
		t.Fatalf("no flows for %s", match)
	}
	zero := int64(0)
	if err := theCluster.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	retry(t, "port and flows of "+p.Name+" gone", func() error {
		if n, _ := podPort(t, &p); n != "" {
			return fmt.Errorf("port %s still on br-int", n)
		}
		all, err := theCluster.Lab.DumpFlows(p.Spec.NodeName, "br-int")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(all, "\n") {
			if strings.Contains(l, match+",") || strings.Contains(l, match+" ") || strings.Contains(l, "="+p.Status.PodIP+",") || strings.Contains(l, "="+p.Status.PodIP+" ") {
				return fmt.Errorf("flow left: %s", l)
			}
		}
		return nil
	})
	t.Logf("pod %s deleted: port %s and its flows gone", p.Name, name)
	refreshPods(t)
}

// Restarting the agent on a node disturbs none of its pods: an established connection from the
// client through the annotated LB IP keeps being answered, pods keep their ports, and nothing is
// restarted.
func TestAgentRestart(t *testing.T) {
	ctx := context.Background()
	svc := echoService("echo-restart", corev1.ServiceTypeLoadBalancer, 30082)
	svc.Annotations = map[string]string{"ovs-srcip.io/preserve-source-ip": "true"}
	s := createService(t, svc)
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.101"}}
	if _, err := theCluster.Client.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Served by the agents' flows (the client's IP preserved), not by kube-proxy's rules for the
	// LB IP on the ingress node, and settled.
	retry(t, "LB IP answers through the agents' flows", func() error {
		r, err := theCluster.Lab.Request("client", "tcp", "203.0.113.101:80")
		if err == nil && r.ClientIP() != clientIP {
			err = fmt.Errorf("answered by %s seeing %s: not the agents' path yet", r.Pod, r.Client)
		}
		return err
	})
	time.Sleep(2 * time.Second)

	// One long-lived connection from the client, through node1 (the ingress node).
	cns, _ := theCluster.Lab.Netns("client")
	cmd := exec.Command("ip", "netns", "exec", cns, theCluster.cfg.EchoBin, "stream", "--addr", "203.0.113.101:80", "--timeout", "3s")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	out := bufio.NewReader(stdout)
	exchange := func(when string) string {
		t.Helper()
		if when != "open" {
			if _, err := io.WriteString(stdin, "x\n"); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
		}
		line, err := out.ReadString('\n')
		if err != nil || strings.HasPrefix(line, "ERROR") {
			t.Fatalf("stream %s: %q %v", when, line, err)
		}
		return strings.TrimSpace(line)
	}
	t.Logf("stream opened: %s", exchange("open"))
	time.Sleep(time.Second)
	t.Logf("stream before the restarts: %s", exchange("before"))

	type portState struct {
		name   string
		ofport int
	}
	before := map[string]portState{}
	for _, p := range pods(t) {
		n, o := podPort(t, &p)
		before[p.Name] = portState{n, o}
	}
	for _, n := range theCluster.Lab.Nodes {
		kn := theCluster.KNodes[n.Name]
		old := kn.AgentPid()
		if err := kn.StopAgent(); err != nil {
			t.Fatal(err)
		}
		// Agent down: pods still answer (pod to pod across nodes, the stream).
		a, b := pods(t)[0], pods(t)[1]
		if _, err := theCluster.PodRequest(&a, "tcp", net.JoinHostPort(b.Status.PodIP, "8080")); err != nil {
			t.Errorf("agent of %s down: %s -> %s: %v", n.Name, a.Name, b.Name, err)
		}
		t.Logf("agent of %s down: stream %s", n.Name, exchange("agent down"))
		if err := kn.StartAgent(); err != nil {
			t.Fatal(err)
		}
		retry(t, "agent of "+n.Name+" ready", func() error {
			_, err := kn.Exec("curl", "-sf", "-m", "2", "http://127.0.0.1:9464/readyz")
			return err
		})
		t.Logf("agent of %s restarted (pid %d -> %d): stream %s", n.Name, old, kn.AgentPid(), exchange("after restart"))
	}
	for _, p := range pods(t) {
		n, o := podPort(t, &p)
		if (portState{n, o}) != before[p.Name] {
			t.Errorf("pod %s: port %v before the restarts, %v after", p.Name, before[p.Name], portState{n, o})
		}
		cur, err := theCluster.Client.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !podReady(cur) || cur.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s: Ready=%v restarts %d after the agent restarts", p.Name, podReady(cur), cur.Status.ContainerStatuses[0].RestartCount)
		}
	}
}
