//go:build metallb

package metallb

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ovs-srcip/ovs-srcip/test/cluster/frr"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	// bgpPool is outside every lab segment: only a route the router learns over BGP brings its
	// addresses to a node (the lab has no static route to 203.0.113.0/24 here). autoAssign false:
	// a Service asks for it (metallb.io/address-pool), so the L2 tests' Services never get one.
	bgpPool = "203.0.113.96/28"
	// routerASN is the lab router's AS (FRR), nodeASN the nodes' (MetalLB's speakers).
	routerASN = 64500
	nodeASN   = 64512
)

var (
	bgpPeerGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta2", Resource: "bgppeers"}
	bgpAdvGVR  = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "bgpadvertisements"}
)

// startRouter starts FRR in the lab's router netns (AS routerASN, one passive eBGP neighbour per
// node in AS nodeASN, timers 1 s / 3 s, ECMP) for the test, with an L4 multipath hash (so the
// client's connections, all from one address, spread over the next hops) and strict rp_filter on
// both router bridges; both sysctls are restored at the end.
func startRouter(t *testing.T) *frr.Router {
	t.Helper()
	l := theCluster.Lab
	var nbrs []frr.Neighbor
	for _, n := range l.Nodes {
		nbrs = append(nbrs, frr.Neighbor{Addr: n.IP, ASN: nodeASN})
	}
	r, err := frr.StartInLab(l, frr.Config{ASN: routerASN, RouterID: l.RouterPrefix().Addr(), Neighbors: nbrs}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("frr close: %v", err)
		}
	})
	for _, s := range []string{"net.ipv4.fib_multipath_hash_policy", "net.ipv4.conf.br0.rp_filter", "net.ipv4.conf.brc.rp_filter"} {
		old, err := l.Exec("router", "sysctl", "-n", s)
		if err != nil {
			t.Fatal(err)
		}
		want := "1"
		if _, err := l.Exec("router", "sysctl", "-q", "-w", s+"="+want); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = l.Exec("router", "sysctl", "-q", "-w", s+"="+strings.TrimSpace(old)) })
	}
	return r
}

// applyBGP creates the IPAddressPool bgp, one BGPPeer for every node (the router's underlay
// address, hold time 3 s: native mode's smallest; its keepalive is a third of it) and the
// BGPAdvertisement of the pool; all deleted at the end.
func applyBGP(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	objs := []struct {
		gvr schema.GroupVersionResource
		u   *unstructured.Unstructured
	}{
		{poolGVR, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
			"metadata": map[string]any{"name": "bgp", "namespace": metalLBNS},
			"spec":     map[string]any{"addresses": []any{bgpPool}, "autoAssign": false},
		}}},
		{bgpPeerGVR, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "metallb.io/v1beta2", "kind": "BGPPeer",
			"metadata": map[string]any{"name": "router", "namespace": metalLBNS},
			"spec": map[string]any{"myASN": int64(nodeASN), "peerASN": int64(routerASN),
				"peerAddress": theCluster.Lab.RouterPrefix().Addr().String(), "holdTime": "3s"},
		}}},
		{bgpAdvGVR, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "metallb.io/v1beta1", "kind": "BGPAdvertisement",
			"metadata": map[string]any{"name": "bgp", "namespace": metalLBNS},
			"spec":     map[string]any{"ipAddressPools": []any{"bgp"}},
		}}},
	}
	for _, o := range objs {
		ri := dynamicCache.Resource(o.gvr).Namespace(metalLBNS)
		if _, err := ri.Apply(ctx, o.u.GetName(), o.u, metav1.ApplyOptions{FieldManager: "metallb-test", Force: true}); err != nil {
			t.Fatalf("%s %s: %v", o.u.GetKind(), o.u.GetName(), err)
		}
		t.Cleanup(func() { _ = ri.Delete(ctx, o.u.GetName(), metav1.DeleteOptions{}) })
	}
}

// waitEstablished waits for the router's sessions with every node to be Established.
func waitEstablished(t *testing.T, r *frr.Router, timeout time.Duration) map[netip.Addr]frr.Peer {
	t.Helper()
	var sum map[netip.Addr]frr.Peer
	if err := lab.WaitFor(func() (err error) {
		if sum, err = r.Summary(); err != nil {
			return err
		}
		for _, n := range theCluster.Lab.Nodes {
			if p := sum[n.IP]; p.State != "Established" {
				return fmt.Errorf("%s (%s): %+v, want Established", n.Name, n.IP, p)
			}
		}
		return nil
	}, timeout); err != nil {
		t.Fatalf("BGP sessions: %v", err)
	}
	return sum
}

// waitNextHops waits for zebra's selected route for p to be a bgp route, installed, with exactly
// want as next hops, and for the router's kernel route to have the same ones.
func waitNextHops(t *testing.T, r *frr.Router, p netip.Prefix, want []netip.Addr, timeout time.Duration) frr.Route {
	t.Helper()
	var rt frr.Route
	if err := lab.WaitFor(func() error {
		var ok bool
		var err error
		if rt, ok, err = r.Route(p); err != nil || !ok {
			return fmt.Errorf("zebra: no route for %s (%v)", p, err)
		}
		if rt.Protocol != "bgp" || !rt.Installed || !equalAddrs(rt.NextHops, want) {
			return fmt.Errorf("zebra: %s: %+v, want bgp, installed, next hops %v", p, rt, want)
		}
		kernel, proto, err := r.KernelNextHops(p)
		if err != nil || proto != "bgp" || !equalAddrs(kernel, want) {
			return fmt.Errorf("kernel: %s: next hops %v (proto %s, %v), want %v", p, kernel, proto, err, want)
		}
		return nil
	}, timeout); err != nil {
		t.Fatal(err)
	}
	return rt
}

func equalAddrs(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// routerCounter returns the router netns' kernel counter name (nstat's names, e.g.
// TcpExtIPReversePathFilter), absolute.
func routerCounter(t *testing.T, name string) int {
	t.Helper()
	out, err := theCluster.Lab.Exec("router", "nstat", "-asz", name)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == name {
			v, _ := strconv.Atoi(f[1])
			return v
		}
	}
	t.Fatalf("router: nstat has no %s:\n%s", name, out)
	return 0
}

// capture is a tcpdump on the router's br0 (the nodes' segment, where the router's frames to and
// from the nodes carry their br-ex MACs) until frames is called.
type capture struct {
	cmd        *exec.Cmd
	file, errf string
}

func startCapture(t *testing.T, filter string) *capture {
	t.Helper()
	dir := t.TempDir()
	c := &capture{file: filepath.Join(dir, "br0.pcap"), errf: filepath.Join(dir, "tcpdump.err")}
	ef, err := os.Create(c.errf)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	// --immediate-mode: packets reach the file as they come, none is lost in a buffer at SIGINT.
	c.cmd = exec.Command("ip", "netns", "exec", theCluster.Lab.RouterNetns, "tcpdump", "-nn", "-U", "--immediate-mode", "-s", "128",
		"-i", "br0", "-w", c.file, filter)
	c.cmd.Stderr = ef
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	if err := lab.WaitFor(func() error {
		b, _ := os.ReadFile(c.errf)
		if !strings.Contains(string(b), "listening on") {
			return fmt.Errorf("tcpdump on the router's br0: %q", b)
		}
		return nil
	}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *capture) stop() {
	if c.cmd.Process != nil && c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		_ = c.cmd.Wait()
	}
}

// synFrame matches a SYN or SYN-ACK as `tcpdump -nn -e -r` prints it.
var synFrame = regexp.MustCompile(`([0-9a-f:]{17}) > ([0-9a-f:]{17}), ethertype IPv4 \(0x0800\), length \d+: ` +
	`(\d+\.\d+\.\d+\.\d+)\.(\d+) > (\d+\.\d+\.\d+\.\d+)\.(\d+): Flags \[(S|S\.)\]`)

// paths stops the capture and returns, per client port, the MACs the router sent the client's
// SYNs to and the MACs the SYN-ACKs came from.
func (c *capture) paths(t *testing.T, client string) (in, out map[int]map[string]bool) {
	t.Helper()
	c.stop()
	b, err := exec.Command("tcpdump", "-nn", "-e", "-r", c.file).Output()
	if err != nil {
		t.Fatalf("tcpdump -r %s: %v", c.file, err)
	}
	in, out = map[int]map[string]bool{}, map[int]map[string]bool{}
	add := func(m map[int]map[string]bool, port, mac string) {
		p, _ := strconv.Atoi(port)
		if m[p] == nil {
			m[p] = map[string]bool{}
		}
		m[p][strings.ToLower(mac)] = true
	}
	for _, l := range strings.Split(string(b), "\n") {
		m := synFrame.FindStringSubmatch(l)
		switch {
		case m == nil:
		case m[7] == "S" && m[3] == client:
			add(in, m[4], m[2])
		case m[7] == "S." && m[5] == client:
			add(out, m[6], m[1])
		}
	}
	return in, out
}

// TestBGPECMPKeepsClientIP: MetalLB in BGP mode (every node's speaker peers with FRR on the lab
// router) gives an annotated LoadBalancer Service (externalTrafficPolicy Cluster, its one
// endpoint on node2) an address of the pool bgp; the router learns the /32 from all three nodes
// and installs it as one route with three next hops; the client's connections, spread over the
// three nodes by the router's L4 multipath hash, all reach the backend, which sees the client's
// IP; and each connection's replies leave through the node its requests came in on (the router
// sees the SYN-ACK come from the MAC it sent the SYN to; strict rp_filter on the router drops
// nothing).
func TestBGPECMPKeepsClientIP(t *testing.T) {
	l := theCluster.Lab
	r := startRouter(t)
	t0 := time.Now()
	applyBGP(t)
	sum := waitEstablished(t, r, time.Minute)
	tEst := time.Since(t0)
	var sessions []string
	for _, n := range l.Nodes {
		sessions = append(sessions, fmt.Sprintf("%s AS%d %s", n.IP, sum[n.IP].RemoteAS, sum[n.IP].State))
	}
	t.Logf("router (FRR, AS%d): sessions %s, %v after the BGPPeer's apply", routerASN, strings.Join(sessions, ", "),
		tEst.Round(time.Millisecond))

	backend := deployOn(t, "echo-bgp", "node2")
	svc := lbService("echo-bgp", "echo-bgp", true)
	svc.Annotations["metallb.io/address-pool"] = "bgp"
	t1 := time.Now()
	createService(t, svc)
	var ip netip.Addr
	if err := lab.WaitFor(func() error {
		s, err := theCluster.Client.CoreV1().Services(ns).Get(context.Background(), svc.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Errorf("Service %s: no status.loadBalancer.ingress yet", svc.Name)
		}
		ip, err = netip.ParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
		return err
	}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if !netip.MustParsePrefix(bgpPool).Contains(ip) {
		t.Fatalf("Service %s: MetalLB assigned %s, not in the pool %s", svc.Name, ip, bgpPool)
	}
	tAssigned := time.Since(t1)
	var want []netip.Addr
	for _, n := range l.Nodes {
		want = append(want, n.IP)
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Less(want[j]) })
	p := netip.PrefixFrom(ip, 32)
	rt := waitNextHops(t, r, p, want, time.Minute)
	tRoute := time.Since(t1)
	t.Logf("MetalLB assigned %s (pool %s) %v after the Service's create; the router's route %s (zebra %s, installed) via %v %v after it",
		ip, bgpPool, tAssigned.Round(time.Millisecond), p, rt.Protocol, rt.NextHops, tRoute.Round(time.Millisecond))

	macNode := map[string]string{}
	for _, n := range l.Nodes {
		macNode[strings.ToLower(brExMAC(t, n.Name))] = n.Name
	}
	rpBefore := routerCounter(t, "TcpExtIPReversePathFilter")
	c := startCapture(t, "tcp and host "+ip.String()+" and tcp[tcpflags] & tcp-syn != 0")
	addr := ip.String() + ":80"
	const requests = 60
	ports := map[int]bool{}
	sources := map[string]int{}
	for i := 0; i < requests; i++ {
		rep, err := l.RequestWith("client", "tcp", addr, lab.RequestOpts{Timeout: "5s"})
		if err != nil {
			t.Fatalf("request %d to %s: %v", i, addr, err)
		}
		sources[rep.ClientIP()]++
		if rep.ClientIP() != clientIP || rep.Pod != backend.Name {
			t.Errorf("request %d to %s: backend %s on %s saw %s, want %s seeing the client %s", i, addr, rep.Pod, rep.Node, rep.Client,
				backend.Name, clientIP)
		}
		_, port, err := net.SplitHostPort(rep.Local)
		if err != nil {
			t.Fatalf("request %d: client's local address %q: %v", i, rep.Local, err)
		}
		pn, _ := strconv.Atoi(port)
		ports[pn] = true
	}
	in, out := c.paths(t, clientIP)
	perNode := map[string]int{}
	for port := range ports {
		if len(in[port]) != 1 || len(out[port]) != 1 {
			t.Errorf("client port %d: the router sent its SYN to %v and got the SYN-ACK from %v, want one MAC each", port, keys(in[port]), keys(out[port]))
			continue
		}
		nIn, nOut := macNode[keys(in[port])[0]], macNode[keys(out[port])[0]]
		if nIn == "" || nIn != nOut {
			t.Errorf("client port %d: SYN to %s (%s), SYN-ACK from %s (%s): not one node both ways", port, keys(in[port])[0], nIn,
				keys(out[port])[0], nOut)
			continue
		}
		perNode[nIn]++
	}
	rpDrops := routerCounter(t, "TcpExtIPReversePathFilter") - rpBefore
	if rpDrops != 0 {
		t.Errorf("router: strict rp_filter dropped %d packets during the requests", rpDrops)
	}
	var spread []string
	for _, n := range l.Nodes {
		fl, pk := lbFlows(t, n.Name, ip)
		if perNode[n.Name] == 0 {
			t.Errorf("%s: no connection came in through it (per node %v): the router's ECMP did not use it", n.Name, perNode)
		}
		if len(fl) == 0 || pk == 0 && perNode[n.Name] > 0 {
			t.Errorf("%s: br-ex entry point flows for %s matched %d packets (%d flows) for %d connections", n.Name, ip, pk, len(fl), perNode[n.Name])
		}
		spread = append(spread, fmt.Sprintf("%s %d (br-ex n_packets %d)", n.Name, perNode[n.Name], pk))
	}
	t.Logf("client %s -> %s: %d requests answered by %s on %s; sources seen by the backend %v; connections in per node (SYN and SYN-ACK through the same node each): %s; router rp_filter (strict) drops %d",
		clientIP, addr, requests, backend.Name, backend.Spec.NodeName, sources, strings.Join(spread, ", "), rpDrops)
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
