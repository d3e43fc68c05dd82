package cluster

import (
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Routed pods on the real-kubelet lab (docs/routed-pods.md): the real node-setup writes the
// masquerade with --non-masquerade-cidrs, the agents get the same flag. The client network
// (198.51.100.0/24 and its IPv6 twin) is listed: the client reaches every echo pod by its IP,
// also through a node that does not own it, and the pods reach the client with their own IP.
// Before that, with routed pods off, the client's connection to a pod through another node is
// dropped by the pod's node (the tunnel guard).
func TestRoutedPods(t *testing.T) {
	c := theCluster
	all := pods(t)
	var far *corev1.Pod // a pod not on the first node, reached through the first node
	first := c.Lab.Nodes[0]
	for i := range all {
		if all[i].Spec.NodeName != first.Name {
			far = &all[i]
			break
		}
	}
	if far == nil {
		t.Fatal("no echo pod off " + first.Name)
	}
	farNode := c.KNodes[far.Spec.NodeName]
	v4 := func(p *corev1.Pod) string {
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() {
				return a.String()
			}
		}
		t.Fatalf("pod %s has no IPv4 address: %v", p.Name, p.Status.PodIPs)
		return ""
	}
	router := func(args ...string) {
		t.Helper()
		if _, err := c.run(append([]string{"ip", "-n", c.Lab.RouterNetns}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	// The router sends the far pod's node's pod CIDR to the first node (a stale or summary route).
	router("route", "replace", farNode.PodCIDR.String(), "via", first.IP.String())
	t.Cleanup(func() { _ = farNode.routePodCIDR() })
	farAddr := net.JoinHostPort(v4(far), "8080")
	if r, err := c.Lab.RequestWith("client", "tcp", farAddr, lab.RequestOpts{Timeout: "2s"}); err == nil {
		t.Fatalf("routed pods off: the client reached %s (%s on %s) through %s: %+v", farAddr, far.Name, far.Spec.NodeName, first.Name, r)
	}
	t.Logf("routed pods off: client -> %s (%s on %s) through %s: no answer (the tunnel guard)", farAddr, far.Name, far.Spec.NodeName, first.Name)

	// Routed pods on for the client network: the real node-setup rewrites the masquerade.
	listed := "198.51.100.0/24"
	if c.cfg.DualStack {
		listed += "," + IPv6Of(netip.MustParseAddr(clientIP), ClientSubnet6).String() + "/128"
	}
	flag := "--non-masquerade-cidrs=" + listed
	prev := c.AgentArgsExtra()
	for _, n := range c.Lab.Nodes {
		if err := c.KNodes[n.Name].nodeSetup(flag); err != nil {
			t.Fatalf("node-setup %s on %s: %v", flag, n.Name, err)
		}
	}
	c.SetAgentArgs(append(append([]string(nil), prev...), flag)...)
	t.Cleanup(func() {
		c.SetAgentArgs(prev...)
		for _, n := range c.Lab.Nodes {
			kn := c.KNodes[n.Name]
			if err := kn.nodeSetup(); err != nil {
				t.Errorf("node-setup without routed pods on %s: %v", n.Name, err)
			}
			if err := kn.RestartAgent(); err != nil {
				t.Errorf("restart agent %s: %v", n.Name, err)
			}
		}
	})
	for _, n := range c.Lab.Nodes {
		kn := c.KNodes[n.Name]
		if err := kn.RestartAgent(); err != nil {
			t.Fatal(err)
		}
		out, err := c.Lab.Exec(n.Name, "nft", "list", "table", "ip", "ovs-srcip")
		if err != nil || !strings.Contains(out, "198.51.100.0/24") {
			t.Fatalf("%s: table ip ovs-srcip has no non-masquerade set (%v):\n%s", n.Name, err, out)
		}
	}

	// The client reaches the far pod through the first node, and the pod sees the client's own
	// address; the reply came back through the first node (its host's conntrack saw both ways).
	var r lab.Reply
	retry(t, "client -> "+farAddr+" through "+first.Name, func() (err error) { r, err = c.Lab.Request("client", "tcp", farAddr); return err })
	if r.Pod != far.Name || r.ClientIP() != clientIP || r.From != farAddr {
		t.Errorf("client -> %s through %s: reply %+v, want %s seeing %s, answered from %s", farAddr, first.Name, r, far.Name, clientIP, farAddr)
	}
	ct, _ := c.Lab.Exec(first.Name, "conntrack", "-L", "-p", "tcp", "-s", clientIP, "-d", v4(far))
	if !strings.Contains(ct, "ASSURED") {
		t.Errorf("%s's host has no assured entry of the client's connection to %s:\n%s", first.Name, farAddr, ct)
	}
	t.Logf("routed pods on: client -> %s (%s on %s) through %s: %s saw %s; %s conntrack: %s", farAddr, far.Name, far.Spec.NodeName,
		first.Name, r.Pod, r.Client, first.Name, strings.TrimSpace(ct))
	_ = farNode.routePodCIDR()

	// Every pod by its IP through its own node, over each family it has, and every pod to the
	// client with its own address.
	cns, err := c.Lab.Netns("client")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.start("routed outside server", filepath.Join(c.dir, "routed-outside.log"),
		"ip", "netns", "exec", cns, c.cfg.EchoBin, "serve", "--tcp", ":9091", "--name", "outside", "--node", "client")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.stop(c.logf, 5*time.Second) })
	for i := range all {
		p := &all[i]
		for _, ip := range p.Status.PodIPs {
			addr := net.JoinHostPort(ip.IP, "8080")
			want := clientIP
			if strings.Contains(ip.IP, ":") {
				want = IPv6Of(netip.MustParseAddr(clientIP), ClientSubnet6).String()
			}
			retry(t, "client -> "+addr, func() (err error) { r, err = c.Lab.Request("client", "tcp", addr); return err })
			if r.Pod != p.Name || r.ClientIP() != want {
				t.Errorf("client -> %s: reply %+v, want %s seeing %s", addr, r, p.Name, want)
			}
			t.Logf("client -> %s (%s on %s): the pod saw %s", addr, p.Name, p.Spec.NodeName, r.Client)
		}
		retry(t, p.Name+" -> client", func() (err error) { r, err = c.PodRequest(p, "tcp", clientIP+":9091"); return err })
		if r.ClientIP() != v4(p) {
			t.Errorf("%s -> %s:9091: the outside server saw %s, want the pod's own %s", p.Name, clientIP, r.Client, v4(p))
		}
		t.Logf("%s (%s on %s) -> %s:9091: the outside server saw %s", p.Name, v4(p), p.Spec.NodeName, clientIP, r.Client)
	}
}
