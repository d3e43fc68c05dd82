//go:build metallb

package metallb

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	ns = "default"
	// l2Pool is on the nodes' underlay segment (10.89.0.0/24: router .1, nodes .11-.13), where the
	// router ARPs for its addresses itself.
	l2Pool = "10.89.0.200/29"
)

var nPackets = regexp.MustCompile(`n_packets=(\d+)`)

// applyL2 creates the IPAddressPool l2 and its L2Advertisement, announced on br-ex only (the
// node's IP interface; eth0 is the OVS uplink with ARP off, and without `interfaces` the speaker
// would also answer on srcip-gw0, the host's port into br-int).
func applyL2(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "l2", "namespace": metalLBNS},
		"spec":     map[string]any{"addresses": []any{l2Pool}},
	}}
	adv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
		"metadata": map[string]any{"name": "l2", "namespace": metalLBNS},
		"spec":     map[string]any{"ipAddressPools": []any{"l2"}, "interfaces": []any{"br-ex"}},
	}}
	if _, err := dynamicCache.Resource(poolGVR).Namespace(metalLBNS).Apply(ctx, "l2", pool, metav1.ApplyOptions{FieldManager: "metallb-test", Force: true}); err != nil {
		t.Fatalf("IPAddressPool l2: %v", err)
	}
	if _, err := dynamicCache.Resource(l2AdvGVR).Namespace(metalLBNS).Apply(ctx, "l2", adv, metav1.ApplyOptions{FieldManager: "metallb-test", Force: true}); err != nil {
		t.Fatalf("L2Advertisement l2: %v", err)
	}
}

// deployOn creates the echo Deployment name (1 replica) pinned to node and returns its pod.
func deployOn(t *testing.T, name, node string) corev1.Pod {
	t.Helper()
	ctx := context.Background()
	d := cluster.EchoDeployment(ns, name, 1)
	d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	if _, err := theCluster.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theCluster.Client.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{}) })
	return waitBackendOn(t, name, node)
}

// repin moves the Deployment name's pod to node.
func repin(t *testing.T, name, node string) corev1.Pod {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"nodeSelector":{"kubernetes.io/hostname":%q}}}}}`, node)
	if _, err := theCluster.Client.AppsV1().Deployments(ns).Patch(context.Background(), name, types.StrategicMergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitBackendOn(t, name, node)
}

func waitBackendOn(t *testing.T, name, node string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	if err := lab.WaitFor(func() error {
		pods, err := theCluster.WaitPodsReady(context.Background(), ns, "app="+name, 1, 0)
		if err != nil {
			return err
		}
		if pods[0].Spec.NodeName != node {
			return fmt.Errorf("pod %s on %s, want %s", pods[0].Name, pods[0].Spec.NodeName, node)
		}
		pod = pods[0]
		return nil
	}, 2*time.Minute); err != nil {
		t.Fatalf("echo %s on %s: %v", name, node, err)
	}
	return pod
}

// lbService is a LoadBalancer Service (externalTrafficPolicy Cluster) on port 80 of the echo pods
// app=app, annotated (ovs-srcip serves it) when preserve.
func lbService(name, app string, preserve bool) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			Selector:              map[string]string{"app": app},
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80,
				TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if preserve {
		s.Annotations = map[string]string{"ovs-srcip.io/preserve-source-ip": "true"}
	}
	return s
}

func createService(t *testing.T, svc *corev1.Service) {
	t.Helper()
	ctx := context.Background()
	if _, err := theCluster.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = theCluster.Client.CoreV1().Services(ns).Delete(ctx, svc.Name, metav1.DeleteOptions{}) })
}

// assignedIP waits for MetalLB's controller to write status.loadBalancer.ingress and checks the
// address is in l2Pool.
func assignedIP(t *testing.T, name string) netip.Addr {
	t.Helper()
	return lbIP(t, name, l2Pool)
}

// announcer waits for the ServiceL2Status of Service name and returns the node it names (the
// speaker that answers ARP for the Service's IP).
func announcer(t *testing.T, name string) string {
	t.Helper()
	var node string
	if err := lab.WaitFor(func() error {
		l, err := dynamicCache.Resource(l2StatusGVR).Namespace(metalLBNS).List(context.Background(),
			metav1.ListOptions{LabelSelector: "metallb.io/service-name=" + name})
		if err != nil {
			return err
		}
		if len(l.Items) != 1 {
			return fmt.Errorf("%d ServiceL2Statuses for %s, want 1", len(l.Items), name)
		}
		node, _, _ = unstructured.NestedString(l.Items[0].Object, "status", "node")
		if node == "" {
			return fmt.Errorf("ServiceL2Status %s: no status.node", l.Items[0].GetName())
		}
		return nil
	}, time.Minute); err != nil {
		t.Fatal(err)
	}
	return node
}

// routerNeigh returns the router's neighbour entry (lladdr and state) for ip on br0.
func routerNeigh(ip netip.Addr) (mac, state string, err error) {
	out, err := theCluster.Lab.Exec("router", "ip", "-j", "neigh", "show", ip.String())
	if err != nil {
		return "", "", err
	}
	var ns []struct {
		Dev    string   `json:"dev"`
		LLAddr string   `json:"lladdr"`
		State  []string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &ns); err != nil {
		return "", "", fmt.Errorf("ip -j neigh: %q: %w", out, err)
	}
	if len(ns) == 0 {
		return "", "", fmt.Errorf("router: no neighbour entry for %s", ip)
	}
	return ns[0].LLAddr, strings.Join(ns[0].State, ","), nil
}

// brExMAC is the MAC of node's br-ex as its netns sees it.
func brExMAC(t *testing.T, node string) string {
	t.Helper()
	out, err := theCluster.Lab.Exec(node, "ip", "-j", "link", "show", "br-ex")
	if err != nil {
		t.Fatal(err)
	}
	var l []struct {
		Address string `json:"address"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l) != 1 {
		t.Fatalf("%s: ip -j link show br-ex: %q: %v", node, out, err)
	}
	return l[0].Address
}

// lbFlows returns node's br-ex flows naming ip as destination and the sum of their n_packets.
func lbFlows(t *testing.T, node string, ip netip.Addr) ([]string, int) {
	t.Helper()
	out, err := theCluster.Lab.DumpFlows(node, "br-ex")
	if err != nil {
		t.Fatal(err)
	}
	var fl []string
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "nw_dst="+ip.String()+",") || strings.Contains(l, "nw_dst="+ip.String()+" ") {
			fl = append(fl, strings.TrimSpace(l))
			if m := nPackets.FindStringSubmatch(l); m != nil {
				var k int
				fmt.Sscan(m[1], &k)
				n += k
			}
		}
	}
	return fl, n
}

// arpFlowsNaming returns node's br-ex ARP flows that name ip.
func arpFlowsNaming(t *testing.T, node string, ip netip.Addr) []string {
	t.Helper()
	out, err := theCluster.Lab.DumpFlows(node, "br-ex", "arp")
	if err != nil {
		t.Fatal(err)
	}
	var fl []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "="+ip.String()) {
			fl = append(fl, strings.TrimSpace(l))
		}
	}
	return fl
}

// speakerCounter returns the value of MetalLB's layer2 counter name (requests_received,
// responses_sent) for ip on node's speaker (its metrics port, 7472 on the node IP), 0 when absent.
func speakerCounter(t *testing.T, node, name string, ip netip.Addr) int {
	t.Helper()
	out, err := theCluster.Lab.Exec(node, "curl", "-sS", "--max-time", "5", "http://"+theCluster.Lab.Node(node).IP.String()+":7472/metrics")
	if err != nil {
		t.Fatalf("%s: speaker metrics: %v", node, err)
	}
	prefix := "metallb_layer2_" + name + `{ip="` + ip.String() + `"} `
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			var f float64
			fmt.Sscan(v, &f)
			return int(f)
		}
	}
	return 0
}

// localOn reports whether ip is an address of node's netns (the kernel would answer ARP for it).
func localOn(t *testing.T, node string, ip netip.Addr) bool {
	t.Helper()
	out, err := theCluster.Lab.Exec(node, "ip", "-o", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(out, " "+ip.String()+"/")
}

// reresolve deletes the router's neighbour entry for ip, sends one request from the client (the
// router ARPs again) and returns the new entry's MAC.
func reresolve(t *testing.T, ip netip.Addr) string {
	t.Helper()
	if _, err := theCluster.Lab.Exec("router", "ip", "neigh", "flush", "to", ip.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := theCluster.Lab.RequestWith("client", "tcp", ip.String()+":80", lab.RequestOpts{Timeout: "5s"}); err != nil {
		t.Fatalf("request after the router's neighbour flush: %v", err)
	}
	mac, _, err := routerNeigh(ip)
	if err != nil {
		t.Fatal(err)
	}
	return mac
}

func otherNode(not ...string) string {
	for _, n := range []string{"node1", "node2", "node3"} {
		skip := false
		for _, x := range not {
			skip = skip || x == n
		}
		if !skip {
			return n
		}
	}
	return ""
}

// TestL2AnnouncesThroughBrEx: MetalLB in L2 mode assigns an annotated LoadBalancer Service
// (externalTrafficPolicy Cluster) an address of the pool l2; the announcing node's speaker answers
// the router's ARP request with br-ex's MAC (no ovs-srcip flow answers or names it); the client
// reaches the backend, on another node than the announcing one, through that node's br-ex entry
// point, and the backend sees the client's IP.
func TestL2AnnouncesThroughBrEx(t *testing.T) {
	applyL2(t)
	t0 := time.Now()
	backend := deployOn(t, "echo-l2", "node2")
	createService(t, lbService("echo-l2", "echo-l2", true))
	ip := assignedIP(t, "echo-l2")
	tAssigned := time.Since(t0)
	leader := announcer(t, "echo-l2")
	tLeader := time.Since(t0)
	t.Logf("MetalLB assigned %s (pool %s) %v after the Service's create; ServiceL2Status names %s (%v)", ip, l2Pool,
		tAssigned.Round(time.Millisecond), leader, tLeader.Round(time.Millisecond))
	if backend.Spec.NodeName == leader {
		// Under externalTrafficPolicy Cluster the election ignores where the endpoints are: move the
		// backend off the announcing node, so the entry point forwards it over Geneve.
		backend = repin(t, "echo-l2", otherNode(leader))
		if l := announcer(t, "echo-l2"); l != leader {
			t.Fatalf("announcing node moved from %s to %s with the backend", leader, l)
		}
	}
	t.Logf("backend %s on %s, announcing node %s", backend.Name, backend.Spec.NodeName, leader)
	addr := ip.String() + ":80"
	var r lab.Reply
	var last error
	if err := lab.WaitFor(func() error {
		r, last = theCluster.Lab.RequestWith("client", "tcp", addr, lab.RequestOpts{Timeout: "2s"})
		return last
	}, time.Minute); err != nil {
		mac, st, nerr := routerNeigh(ip)
		t.Fatalf("client -> %s: %v (router neigh %s %s %v)", addr, err, mac, st, nerr)
	}
	tFirst := time.Since(t0)
	for i := 0; i < 20; i++ {
		if i > 0 {
			var err error
			if r, err = theCluster.Lab.Request("client", "tcp", addr); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		if r.ClientIP() != clientIP || r.Pod != backend.Name {
			t.Fatalf("request %d to %s: backend %s on %s saw %s, want %s seeing the client %s", i, addr, r.Pod, r.Node, r.Client,
				backend.Name, clientIP)
		}
	}
	t.Logf("client %s -> %s: 20 requests answered by %s on %s, each saw %s (first success %v after the Service's create)",
		clientIP, addr, r.Pod, r.Node, clientIP, tFirst.Round(time.Millisecond))

	mac, state, err := routerNeigh(ip)
	if err != nil {
		t.Fatal(err)
	}
	want := brExMAC(t, leader)
	if !strings.EqualFold(mac, want) {
		t.Errorf("router resolves %s to %s, want %s's br-ex MAC %s", ip, mac, leader, want)
	}
	t.Logf("router: %s lladdr %s (%s) = %s's br-ex MAC", ip, mac, state, leader)

	// Who answered: the announcing node's speaker (its layer2 responses_sent counter for the IP
	// grows across a fresh ARP exchange), no other speaker, and no kernel (the IP is no node
	// address).
	before := map[string]int{}
	for _, n := range []string{"node1", "node2", "node3"} {
		if localOn(t, n, ip) {
			t.Errorf("%s: %s is an address of the node's netns", n, ip)
		}
		before[n] = speakerCounter(t, n, "responses_sent", ip)
	}
	if mac := reresolve(t, ip); !strings.EqualFold(mac, want) {
		t.Errorf("after a neighbour flush the router resolves %s to %s, want %s's br-ex MAC %s", ip, mac, leader, want)
	}
	for _, n := range []string{"node1", "node2", "node3"} {
		after := speakerCounter(t, n, "responses_sent", ip)
		req := speakerCounter(t, n, "requests_received", ip)
		if n == leader && after <= before[n] {
			t.Errorf("%s (announcing): speaker responses_sent for %s %d -> %d across a fresh ARP exchange", n, ip, before[n], after)
		}
		if n != leader && after != 0 {
			t.Errorf("%s (not announcing): speaker sent %d responses for %s", n, after, ip)
		}
		t.Logf("%s: speaker metallb_layer2_requests_received{ip=%s} %d, responses_sent %d -> %d across the router's re-ARP; not a local address",
			n, ip, req, before[n], after)
	}

	for _, n := range []string{"node1", "node2", "node3"} {
		fl, pk := lbFlows(t, n, ip)
		if len(fl) == 0 {
			t.Errorf("%s: no br-ex flow for the entry point %s", n, ip)
		}
		if n == leader && pk == 0 {
			t.Errorf("%s (announcing): br-ex flows for %s matched no packet:\n%s", n, ip, strings.Join(fl, "\n"))
		}
		if n != leader && pk != 0 {
			t.Errorf("%s (not announcing): br-ex flows for %s matched %d packets:\n%s", n, ip, pk, strings.Join(fl, "\n"))
		}
		if a := arpFlowsNaming(t, n, ip); len(a) != 0 {
			t.Errorf("%s: br-ex ARP flows naming %s (the speaker answers, no agent flow):\n%s", n, ip, strings.Join(a, "\n"))
		}
		t.Logf("%s: %d br-ex flows name %s, n_packets %d; no ARP flow names it", n, len(fl), ip, pk)
	}
}

// TestL2NotOptedIn: MetalLB announces an unannotated LoadBalancer Service the same way, and
// ovs-srcip leaves it alone: no br-ex flow names its IP on any node, kube-proxy serves it (the
// backend sees a node-side address, not the client's).
//
// The Service asks MetalLB for 10.89.0.201 (metallb.io/loadBalancerIPs): left to itself MetalLB
// hands out the address TestL2AnnouncesThroughBrEx's Service just gave back, whose entry point the
// agent still drains (a service-drain flow naming it until a full sync finds no live connection,
// docs/pipeline.md "Drains"), which is not this Service's.
func TestL2NotOptedIn(t *testing.T) {
	applyL2(t)
	backend := deployOn(t, "echo-plain", "node3")
	svc := lbService("echo-plain", "echo-plain", false)
	svc.Annotations = map[string]string{"metallb.io/loadBalancerIPs": "10.89.0.201"}
	createService(t, svc)
	ip := assignedIP(t, "echo-plain")
	if ip.String() != "10.89.0.201" {
		t.Fatalf("MetalLB assigned %s, want the requested 10.89.0.201", ip)
	}
	leader := announcer(t, "echo-plain")
	addr := ip.String() + ":80"
	var r lab.Reply
	if err := lab.WaitFor(func() (err error) {
		r, err = theCluster.Lab.RequestWith("client", "tcp", addr, lab.RequestOpts{Timeout: "2s"})
		return err
	}, time.Minute); err != nil {
		t.Fatalf("client -> %s: %v", addr, err)
	}
	if r.Pod != backend.Name {
		t.Fatalf("client -> %s: answered by %s, want %s", addr, r.Pod, backend.Name)
	}
	if r.ClientIP() == clientIP {
		t.Errorf("client -> %s (not opted in): backend saw the client's IP %s, want kube-proxy's masquerade", addr, r.Client)
	}
	mac, _, err := routerNeigh(ip)
	if err != nil {
		t.Fatal(err)
	}
	if want := brExMAC(t, leader); !strings.EqualFold(mac, want) {
		t.Errorf("router resolves %s to %s, want %s's br-ex MAC %s", ip, mac, leader, want)
	}
	for _, n := range []string{"node1", "node2", "node3"} {
		if fl, _ := lbFlows(t, n, ip); len(fl) != 0 {
			t.Errorf("%s: br-ex flows name %s, a Service that did not opt in:\n%s", n, ip, strings.Join(fl, "\n"))
		}
		if a := arpFlowsNaming(t, n, ip); len(a) != 0 {
			t.Errorf("%s: br-ex ARP flows naming %s:\n%s", n, ip, strings.Join(a, "\n"))
		}
	}
	t.Logf("unannotated %s (MetalLB %s, announced by %s, router lladdr %s): backend %s on %s saw %s (kube-proxy), no br-ex flow names it on any node",
		addr, ip, leader, mac, r.Pod, r.Node, r.Client)
}
