//go:build metallb

package metallb

// The node-failure tests run last (the file name sorts after the others): each cuts one node off
// the underlay (its link on the router's bridge down: its speaker, kubelet and agent all lose the
// segment, as a node that dies does) and puts it back at the end.

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// cutNode sets node's link on the router's underlay bridge down and registers putting it back up.
func cutNode(t *testing.T, node string) time.Time {
	t.Helper()
	port := theCluster.Lab.Node(node).RouterPort
	if _, err := theCluster.Lab.Exec("router", "ip", "link", "set", port, "down"); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	t.Cleanup(func() {
		if _, err := theCluster.Lab.Exec("router", "ip", "link", "set", port, "up"); err != nil {
			t.Errorf("%s's link back up: %v", node, err)
		}
		// Back in the cluster: Ready again before the next test.
		if _, err := theCluster.WaitNodeReady(context.Background(), node, 2*time.Minute); err != nil {
			t.Errorf("after %s's link came back: %v", node, err)
		}
	})
	return at
}

// lbIP waits for Service name's status.loadBalancer.ingress and checks it is in pool.
func lbIP(t *testing.T, name, pool string) netip.Addr {
	t.Helper()
	var ip netip.Addr
	if err := lab.WaitFor(func() error {
		s, err := theCluster.Client.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return fmt.Errorf("Service %s: no status.loadBalancer.ingress yet", name)
		}
		ip, err = netip.ParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
		return err
	}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if !netip.MustParsePrefix(pool).Contains(ip) {
		t.Fatalf("Service %s: MetalLB assigned %s, not in the pool %s", name, ip, pool)
	}
	return ip
}

// clientStreams opens n long TCP sessions (echo stream) from the client to addr, each answered
// once, and returns them; they are closed at the end of the test.
func clientStreams(t *testing.T, addr string, n int) []*lab.Stream {
	t.Helper()
	cns, err := theCluster.Lab.Netns("client")
	if err != nil {
		t.Fatal(err)
	}
	var out []*lab.Stream
	for i := 0; i < n; i++ {
		cmd := exec.Command("ip", "netns", "exec", cns, theCluster.Lab.EchoBin(), "stream", "--addr", addr, "--timeout", "5s")
		st, err := lab.StartStream(cmd, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.CloseStdin(); _ = cmd.Wait() })
		if _, err := st.Next(); err != nil {
			t.Fatalf("stream %d to %s: %v", i, addr, err)
		}
		out = append(out, st)
	}
	return out
}

// kept returns how many of streams still answer an exchange.
func kept(streams []*lab.Stream) int {
	n := 0
	for _, st := range streams {
		if _, err := st.Exchange(); err == nil {
			n++
		}
	}
	return n
}

// newConnsBack returns when new connections to addr are answered again - n in a row, each by
// backend and seeing the client's IP - measured from since, with the first failure seen.
func newConnsBack(t *testing.T, addr, backend string, since time.Time, n int, timeout time.Duration) (back time.Duration, failed int) {
	t.Helper()
	run := 0
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		r, err := theCluster.Lab.RequestWith("client", "tcp", addr, lab.RequestOpts{Timeout: "1s"})
		switch {
		case err != nil:
			failed++
			run = 0
		case r.ClientIP() != clientIP || r.Pod != backend:
			t.Errorf("%s: answered by %s seeing %s, want %s seeing %s", addr, r.Pod, r.Client, backend, clientIP)
			run = 0
		default:
			if run == 0 {
				back = time.Since(since)
			}
			run++
			if run == n {
				return back, failed
			}
		}
	}
	t.Fatalf("%s: not %d new connections in a row within %v of the failure (%d failed)", addr, n, timeout, failed)
	return 0, failed
}

// TestBGPNodeFailure: an annotated ETP=Cluster LoadBalancer Service announced by every speaker
// (the router has three ECMP next hops); one node (not the backend's) is cut off. The router's
// session to it ends with the hold time (3 s), its next hop is withdrawn, and new connections are
// answered again through the other two, each seeing the client's IP. Established connections:
// those that entered through the cut node are lost (its conntrack holds their un-DNAT); those
// the router's rehash of the shrunken ECMP set moves to another node are lost too (that node has
// no entry for them); the count is printed.
func TestBGPNodeFailure(t *testing.T) {
	l := theCluster.Lab
	r := startRouter(t)
	applyBGP(t)
	waitEstablished(t, r, time.Minute)
	backend := deployOn(t, "echo-bgpf", "node2")
	svc := lbService("echo-bgpf", "echo-bgpf", true)
	svc.Annotations["metallb.io/address-pool"] = "bgp"
	createService(t, svc)
	ip := lbIP(t, svc.Name, bgpPool)
	var all, rest []netip.Addr
	const cut = "node3"
	for _, n := range l.Nodes {
		all = append(all, n.IP)
		if n.Name != cut {
			rest = append(rest, n.IP)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Less(all[j]) })
	sort.Slice(rest, func(i, j int) bool { return rest[i].Less(rest[j]) })
	p := netip.PrefixFrom(ip, 32)
	waitNextHops(t, r, p, all, time.Minute)
	addr := ip.String() + ":80"
	if _, _ = newConnsBack(t, addr, backend.Name, time.Now(), 5, 30*time.Second); t.Failed() {
		return
	}
	streams := clientStreams(t, addr, 12)

	at := cutNode(t, cut)
	// When zebra's route loses node3's next hop (polled every 100 ms, beside the requests).
	withdrawn := make(chan time.Duration, 1)
	go func() {
		for time.Since(at) < 30*time.Second {
			if rt, ok, err := r.Route(p); err == nil && ok && equalAddrs(rt.NextHops, rest) {
				withdrawn <- time.Since(at)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		withdrawn <- -1
	}()
	// New connections from the cut on (1 s time-out each): until the router withdraws node3 its
	// ECMP hash sends about a third of them there, and they fail.
	back, failed := newConnsBack(t, addr, backend.Name, at, 20, time.Minute)
	w := <-withdrawn
	rt := waitNextHops(t, r, p, rest, 30*time.Second)
	k := kept(streams)
	t.Logf("%s cut off: the router withdrew its next hop %v after it (%s via %v); new connections answered again %v after it "+
		"(the first of 20 in a row, each by %s seeing %s; %d failed before); established connections kept %d/%d",
		cut, w.Round(time.Millisecond), p, rt.NextHops, back.Round(time.Millisecond), backend.Name, clientIP, failed, k, len(streams))
	if w < 0 {
		t.Errorf("zebra's route %s kept %s's next hop for 30 s", p, cut)
	}
	if back > 10*time.Second {
		t.Errorf("new connections back %v after the failure, want within the 3 s hold time and a few requests", back)
	}
}

// TestL2NodeFailure: an annotated ETP=Cluster LoadBalancer Service in L2 mode; its announcing
// node (not the backend's) is cut off. Another speaker takes the address over (memberlist sees
// the node gone) and answers ARP for it with its own br-ex MAC (a gratuitous ARP moves the
// router's entry); new connections are answered again through the new node, each seeing the
// client's IP. Established connections, which all entered through the cut node, are lost.
func TestL2NodeFailure(t *testing.T) {
	applyL2(t)
	backend := deployOn(t, "echo-l2f", "node2")
	createService(t, lbService("echo-l2f", "echo-l2f", true))
	ip := lbIP(t, "echo-l2f", l2Pool)
	leader := announcer(t, "echo-l2f")
	if backend.Spec.NodeName == leader {
		backend = repin(t, "echo-l2f", otherNode(leader))
	}
	addr := ip.String() + ":80"
	if _, _ = newConnsBack(t, addr, backend.Name, time.Now(), 5, time.Minute); t.Failed() {
		return
	}
	// The router must resolve the address to the announcing node before the cut (an entry left
	// by an earlier test may name another node): re-resolve it and check.
	macBefore := reresolve(t, ip)
	if want := brExMAC(t, leader); !strings.EqualFold(macBefore, want) {
		t.Fatalf("before the cut the router resolves %s to %s, want the announcing %s's br-ex MAC %s", ip, macBefore, leader, want)
	}
	streams := clientStreams(t, addr, 6)

	at := cutNode(t, leader)
	back, failed := newConnsBack(t, addr, backend.Name, at, 20, 2*time.Minute)
	mac, state, _ := routerNeigh(ip)
	var now string
	for _, n := range theCluster.Lab.Nodes {
		if n.Name != leader && strings.EqualFold(mac, brExMAC(t, n.Name)) {
			now = n.Name
		}
	}
	if now == "" {
		t.Errorf("router resolves %s to %s (%s), no surviving node's br-ex MAC", ip, mac, state)
	}
	k := kept(streams)
	t.Logf("%s (announcing %s, router lladdr %s) cut off: new connections answered again %v after it through %s (router lladdr %s %s; "+
		"20 in a row, each by %s seeing %s; %d failed before); established connections kept %d/%d",
		leader, ip, macBefore, back.Round(time.Millisecond), now, mac, state, backend.Name, clientIP, failed, k, len(streams))
}
