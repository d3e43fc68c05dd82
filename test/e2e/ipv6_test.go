package e2e

// The client IP kept per family (issue 22): dual-stack Services of the dual-stack lab (test/README.md,
// the lab's addresses). The underlay stays IPv4: inner IPv6 over IPv4 Geneve.

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// dsSvc is a test Service of either family or both (namespace e2e, annotated, ETP Cluster): TCP
// port 80 and UDP port 53 to 8080 (UDP nodePort = nodePort+1000), a ClusterIP per family
// (10.96.6.<n>, 2001:db8:96::6:<n>), the LoadBalancer ingress IPs and externalIPs given for each
// of its families, and one EndpointSlice per family (the IPv6 one with the pods' IPv6 addresses,
// as the EndpointSlice controller writes them).
type dsSvc struct {
	name     string
	n        int      // ClusterIP index
	policy   string   // ipFamilyPolicy: SingleStack, PreferDualStack or RequireDualStack
	families []string // ipFamilies in order: {"IPv4"}, {"IPv6", "IPv4"}, ...
	nodePort int
	lb4, lb6 string // LoadBalancer ingress IPs ("" none)
	e4, e6   string // externalIPs ("" none)
	eps      []ep
	affinity int // sessionAffinity ClientIP timeoutSeconds (0: none)
}

func (s dsSvc) has(fam string) bool {
	for _, f := range s.families {
		if f == fam {
			return true
		}
	}
	return false
}

// byFamily returns the values of v4 and v6 in the order of s.families, leaving out empty ones and
// those of a family the Service does not have.
func (s dsSvc) byFamily(v4, v6 string) []string {
	var out []string
	for _, f := range s.families {
		if f == "IPv4" && v4 != "" {
			out = append(out, v4)
		}
		if f == "IPv6" && v6 != "" {
			out = append(out, v6)
		}
	}
	return out
}

func (s dsSvc) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: e2e\n", s.name)
	b.WriteString("  annotations:\n    ovs-srcip.io/preserve-source-ip: \"true\"\n")
	lbs := s.byFamily(s.lb4, s.lb6)
	typ := "NodePort"
	if len(lbs) > 0 {
		typ = "LoadBalancer"
	}
	cips := s.byFamily(fmt.Sprintf("10.96.6.%d", s.n), fmt.Sprintf("2001:db8:96::6:%d", s.n))
	fmt.Fprintf(&b, "spec:\n  type: %s\n  externalTrafficPolicy: Cluster\n", typ)
	fmt.Fprintf(&b, "  ipFamilyPolicy: %s\n  ipFamilies: [%s]\n", s.policy, strings.Join(s.families, ", "))
	if s.affinity > 0 {
		fmt.Fprintf(&b, "  sessionAffinity: ClientIP\n  sessionAffinityConfig:\n    clientIP:\n      timeoutSeconds: %d\n", s.affinity)
	}
	fmt.Fprintf(&b, "  clusterIP: %s\n  clusterIPs: [%s]\n", cips[0], strings.Join(cips, ", "))
	if eips := s.byFamily(s.e4, s.e6); len(eips) > 0 {
		fmt.Fprintf(&b, "  externalIPs: [%s]\n", strings.Join(eips, ", "))
	}
	fmt.Fprintf(&b, "  ports:\n  - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: %d}\n", s.nodePort)
	fmt.Fprintf(&b, "  - {name: dns, protocol: UDP, port: 53, targetPort: 8080, nodePort: %d}\n", s.nodePort+1000)
	if len(lbs) > 0 {
		b.WriteString("status:\n  loadBalancer:\n    ingress:\n")
		for _, ip := range lbs {
			fmt.Fprintf(&b, "    - ip: %s\n", ip)
		}
	}
	for _, fam := range s.families {
		fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-%s\n  namespace: e2e\n", s.name, strings.ToLower(fam))
		fmt.Fprintf(&b, "  labels: {kubernetes.io/service-name: %s}\naddressType: %s\n", s.name, fam)
		b.WriteString("ports:\n- {name: http, protocol: TCP, port: 8080}\n- {name: dns, protocol: UDP, port: 8080}\nendpoints:\n")
		for _, e := range s.eps {
			ip := e.ip
			if fam == "IPv6" {
				ip = podIP6(e)
			}
			fmt.Fprintf(&b, "- addresses: [\"%s\"]\n  nodeName: %s\n  conditions: {ready: true, serving: true, terminating: false}\n", ip, e.node)
		}
	}
	b.WriteString("---\n")
	return b.String()
}

// podIP6 is the IPv6 address the lab gave the endpoint's pod (test/manifests/demo).
func podIP6(e ep) string {
	p := theLab.Pod(e.pod)
	if p == nil || !p.IP6.IsValid() {
		panic("pod " + e.pod + " has no IPv6 address in the lab")
	}
	return p.IP6.String()
}

// nodeIP returns node's InternalIP of family fam ("IPv4" or "IPv6").
func nodeIP(t *testing.T, node, fam string) string {
	t.Helper()
	n := theLab.Node(node)
	require.NotNil(t, n, node)
	if fam == "IPv6" {
		require.True(t, n.IP6.IsValid(), "node %s has no IPv6 InternalIP", node)
		return n.IP6.String()
	}
	return n.IP.String()
}

// clientOf is the default client's address of family fam.
func clientOf(fam string) string {
	if fam == "IPv6" {
		return client6IP
	}
	return clientIP
}

// entry is one way into a test Service from the client.
type entry struct {
	kind, proto, addr string
}

// entries lists the Service's entry points of family fam: the NodePort on node1 (the ingress
// node) and on node2, the LoadBalancer IP and the externalIP (both routed to node1), TCP and UDP.
func (s dsSvc) entries(t *testing.T, fam string) []entry {
	var out []entry
	add := func(kind, ip string, tcp, udp int) {
		if ip == "" {
			return
		}
		out = append(out,
			entry{kind, "tcp", net.JoinHostPort(ip, fmt.Sprint(tcp))},
			entry{kind, "udp", net.JoinHostPort(ip, fmt.Sprint(udp))})
	}
	add("NodePort@node1", nodeIP(t, "node1", fam), s.nodePort, s.nodePort+1000)
	add("NodePort@node2", nodeIP(t, "node2", fam), s.nodePort, s.nodePort+1000)
	lb, e := s.lb4, s.e4
	if fam == "IPv6" {
		lb, e = s.lb6, s.e6
	}
	add("LoadBalancer", lb, 80, 53)
	add("externalIP", e, 80, 53)
	return out
}

// waitFrom retries a request from the default client until it is answered within d.
func waitFrom(proto, addr string, d time.Duration) (lab.Reply, error) {
	var r lab.Reply
	err := lab.WaitFor(func() error {
		var err error
		r, err = theLab.RequestWith("", proto, addr, lab.RequestOpts{Timeout: "2s"})
		return err
	}, d)
	return r, err
}

// checkFamily asserts that the backend saw the client's own address of family fam, that the
// answer came from exactly the address dialled, and that the backend's own log holds the client.
func checkFamily(t *testing.T, r lab.Reply, fam, addr string, wantPods ...string) {
	t.Helper()
	assert.Equal(t, clientOf(fam), r.ClientIP(), "backend %s/%s saw %s, want the client's %s address", r.Node, r.Pod, r.Client, fam)
	assert.Equal(t, addr, r.From, "answer to %s came from %s", addr, r.From)
	if len(wantPods) > 0 {
		assert.Contains(t, wantPods, r.Pod, "unexpected backend")
	}
	backendLogged(t, r)
}

// serveFamily checks every entry point of s of family fam: the first may take the agents' time to
// program (20 s), each further one 5 s; the first failure ends the family's subtest (the family's
// path is not served: the rest would only wait for the same reason).
func serveFamily(t *testing.T, s dsSvc, fam string, wantPods ...string) {
	t.Helper()
	wait := 20 * time.Second
	for _, e := range s.entries(t, fam) {
		r, err := waitFrom(e.proto, e.addr, wait)
		if err != nil {
			logHitFlows(t, fam)
		}
		require.NoError(t, err, "%s %s %s %s of %s never answered", fam, e.kind, e.proto, e.addr, s.name)
		checkFamily(t, r, fam, e.addr, wantPods...)
		t.Logf("%s %-14s %s %-28s -> %s/%s saw %s", fam, e.kind, e.proto, e.addr, r.Node, r.Pod, r.Client)
		wait = 5 * time.Second
	}
}

// ipv6Match matches an IPv6 flow of ovs-ofctl's output.
var ipv6Match = regexp.MustCompile(`[ ,](ipv6|tcp6|udp6|icmp6)[ ,]`)

// logHitFlows logs, for a failed request of family fam, every flow of that family with packets on
// each node's br-ex and br-int: where the packets went and where they stopped.
func logHitFlows(t *testing.T, fam string) {
	t.Helper()
	for _, n := range theLab.Nodes {
		for _, br := range []string{"br-ex", "br-int"} {
			out, err := theLab.DumpFlows(n.Name, br)
			if err != nil {
				t.Logf("%s %s: %v", n.Name, br, err)
				continue
			}
			var hit []string
			for _, l := range strings.Split(out, "\n") {
				if ipv6Match.MatchString(l) == (fam == "IPv6") && !strings.Contains(l, "n_packets=0,") && strings.Contains(l, "n_packets=") {
					hit = append(hit, strings.TrimSpace(l))
				}
			}
			t.Logf("%s %s %s flows with packets (%d):\n%s", n.Name, br, fam, len(hit), strings.Join(hit, "\n"))
		}
	}
}

var (
	// dsPrefer: PreferDualStack, IPv4 first; the endpoint echo-a is on node2, so node1's entry
	// points are remote (Geneve to node2 and back) and node2's NodePort is local.
	dsPrefer = dsSvc{name: "ds-prefer", n: 1, policy: "PreferDualStack", families: []string{"IPv4", "IPv6"}, nodePort: 30600,
		lb4: "203.0.113.60", lb6: "2001:db8:0:113::60", e4: "203.0.113.61", e6: "2001:db8:0:113::61", eps: []ep{echoA}}
	// dsRequire: RequireDualStack, IPv6 first (families are told apart by family, never by index).
	dsRequire = dsSvc{name: "ds-require", n: 2, policy: "RequireDualStack", families: []string{"IPv6", "IPv4"}, nodePort: 30601,
		lb4: "203.0.113.62", lb6: "2001:db8:0:113::62", e4: "203.0.113.63", e6: "2001:db8:0:113::63", eps: []ep{echoA}}
	// dsLocal: the endpoint echo-c is on node1, the ingress node of the LB IP and the externalIP.
	dsLocal = dsSvc{name: "ds-local", n: 3, policy: "PreferDualStack", families: []string{"IPv4", "IPv6"}, nodePort: 30602,
		lb4: "203.0.113.64", lb6: "2001:db8:0:113::64", e4: "203.0.113.65", e6: "2001:db8:0:113::65", eps: []ep{echoC}}
)

// Issue 22, "the client IP kept over IPv6": a dual-stack Service's IPv6 NodePort (on node1 and on
// node2), its IPv6 LoadBalancer IP and its IPv6 externalIP each bring the client's IPv6 address
// to the endpoint, on another node (echo-a on node2 behind node1) and on the same node (node2's
// NodePort; ds-local's echo-c on node1), TCP and UDP, and every answer comes from the address
// dialled; the same Services' IPv4 entry points keep the client's IPv4 address.
func TestDualStackClientIPKept(t *testing.T) {
	for _, s := range []struct {
		svc  dsSvc
		pods []string
	}{{dsPrefer, []string{"echo-a"}}, {dsRequire, []string{"echo-a"}}, {dsLocal, []string{"echo-c"}}} {
		file := s.svc.name + ".yaml"
		writeManifest(t, file, s.svc.yaml())
		defer removeAndWait(t, file, fmt.Sprintf("tp_dst=%d", s.svc.nodePort))
		for _, fam := range []string{"IPv4", "IPv6"} {
			t.Run(s.svc.name+"/"+fam, func(t *testing.T) { serveFamily(t, s.svc, fam, s.pods...) })
		}
	}
}

// Issue 22, "a single-stack -> dual-stack patch of a Service programs its v6 path without touching
// the v4 one": a connection held open through the IPv4 NodePort of a SingleStack Service keeps
// answering, with the client's IPv4 address, while the Service is patched to PreferDualStack (an
// IPv6 ClusterIP, LoadBalancer IP and externalIP and an IPv6 EndpointSlice appear) and through the
// full syncs after it; the Service's
// IPv4 flows on node1 are byte for byte the same afterwards; its IPv6 entry points then keep the
// client's IPv6 address.
func TestSingleStackToDualStackPatchKeepsIPv4Connection(t *testing.T) {
	const file = "ds-patch.yaml"
	s := dsSvc{name: "ds-patch", n: 4, policy: "SingleStack", families: []string{"IPv4"}, nodePort: 30603,
		lb4: "203.0.113.66", lb6: "2001:db8:0:113::66", e4: "203.0.113.67", e6: "2001:db8:0:113::67", eps: []ep{echoA}}
	defer removeAndWait(t, file, "tp_dst=30603")
	writeManifest(t, file, s.yaml())
	addr := "192.0.2.11:30603"
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-a")
	v4Before := v4ServiceFlows(t, "node1", 30603, 31603)
	require.NotEmpty(t, v4Before, "node1 has no IPv4 flows of ds-patch")

	held := holdConn(t, addr)
	stop := held.keepTalking()
	time.Sleep(2 * streamEvery)
	s.policy, s.families = "PreferDualStack", []string{"IPv4", "IPv6"}
	writeManifest(t, file, s.yaml())
	t.Run("IPv6", func(t *testing.T) { serveFamily(t, s, "IPv6", "echo-a") })
	time.Sleep(2500 * time.Millisecond) // and through a full sync or two (--full-sync-period=2s)
	requireSurvived(t, "ds-patch patched from SingleStack to PreferDualStack", stop)
	assert.Equal(t, v4Before, v4ServiceFlows(t, "node1", 30603, 31603), "the patch changed node1's IPv4 flows of ds-patch")
	t.Run("IPv4", func(t *testing.T) { serveFamily(t, s, "IPv4", "echo-a") })
}

// v4Proto matches an IPv4 TCP/UDP match of ovs-ofctl's output ("tcp," but not "tcp6,").
var v4Proto = regexp.MustCompile(`[ ,](tcp|udp),`)

// v4ServiceFlows returns node's br-ex Service flows (kind service-port) of IPv4 TCP/UDP matching
// one of the ports, without statistics, sorted.
func v4ServiceFlows(t *testing.T, node string, ports ...int) []string {
	t.Helper()
	out, err := theLab.Ofctl(node, "-O", "OpenFlow15", "--no-stats", "dump-flows", "br-ex", "cookie=0x5c10000000000000/0xffff000000000000")
	require.NoError(t, err)
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if !v4Proto.MatchString(l) {
			continue
		}
		for _, p := range ports {
			if strings.Contains(l, fmt.Sprintf("tp_dst=%d", p)) {
				got = append(got, strings.TrimSpace(l))
				break
			}
		}
	}
	sort.Strings(got)
	return got
}

// Issue 22, the tunnel guard per family ("only node addresses may tunnel"; the IPv4 case is
// TestOnlyNodesMayTunnel). Who else could bring an IPv6 packet to a pod past the entry points:
//
//   - an outside host sending Geneve over the IPv4 underlay with an inner IPv6 SYN to node1's pod
//     echo-c: node1's drop flow counts it, nothing reaches the pod, nothing comes back; the same
//     packet with node2's IPv4 address as the source does reach the pod (the positive control:
//     the injector's inner IPv6 frame is valid and it is the source that is refused);
//   - an outside host sending Geneve over IPv6 to node1's IPv6 address, inner IPv4 or IPv6, from
//     its own address or from node2's IPv6 address: no node tunnels over IPv6 here (the underlay is
//     IPv4), so none may reach the pod; node1's uplink shows they arrived, nothing comes back.
func TestIPv6OnlyNodesMayTunnel(t *testing.T) {
	addr := "192.0.2.11:30101" // svcLocal: node1 has its flows once it answers
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-c")
	echoC6 := podIP6(echoC)
	const spoofed6 = "2001:db8:0:100::66" // an outside inner source: the client's segment
	pod := capture(t, "echo-c", "eth0", "tcp port 8080 and (host "+spoofed6+" or host 198.51.100.66)")
	back := capture(t, "client", "eth0", "udp port 6081 and (dst host "+clientIP+" or dst host "+client6IP+")")
	before := dropCount(t, "node1")
	inner6 := []string{"--inner-src", "[" + spoofed6 + "]:41000", "--inner-dst", "[" + echoC6 + "]:8080"}
	for _, vni := range []string{"1", "2", "3"} {
		inject(t, "client", append([]string{"--dst", "192.0.2.11", "--vni", vni}, inner6...)...)
	}
	assert.Eventually(t, func() bool { return before >= 0 && dropCount(t, "node1")-before >= 3 }, 5*time.Second, 100*time.Millisecond,
		"node1's Geneve drop flow must count the 3 injected packets with an inner IPv6 SYN")

	// Geneve over IPv6 to node1's IPv6 address.
	uplink := capture(t, "node1", "eth0", "ip6 and udp dst port 6081")
	inner4 := []string{"--inner-src", "198.51.100.66:41001", "--inner-dst", echoC.ip + ":8080"}
	for _, src := range []string{"", "2001:db8:0:2::12"} {
		for _, inner := range [][]string{inner4, inner6} {
			args := append([]string{"--dst", "2001:db8:0:2::11", "--vni", "2"}, inner...)
			if src != "" {
				args = append(args, "--src", src)
			}
			inject(t, "client", args...)
		}
	}
	assert.GreaterOrEqual(t, len(uplink()), 4, "the 4 Geneve-over-IPv6 packets must reach node1's uplink (else this case proves nothing)")
	assert.Empty(t, pod(), "a Geneve packet from outside the cluster reached the pod")
	assert.Empty(t, back(), "something was sent back to the outside host")

	// Positive control: inner IPv6 over the IPv4 underlay from a node's address reaches the pod.
	pod = capture(t, "echo-c", "eth0", "tcp port 8080 and host "+spoofed6)
	inject(t, "client", append([]string{"--dst", "192.0.2.11", "--vni", "2", "--src", "192.0.2.12"}, inner6...)...)
	assert.NotEmpty(t, pod(), "positive control: the injected inner IPv6 SYN with a node's source must reach the pod")
}

// Issue 22, sessionAffinity per family: a dual-stack Service with sessionAffinity ClientIP and two
// endpoints (echo-a on node2, echo-b on node3) sends every connection of one client to one
// backend, per family, through node1's NodePort and through node2's (the group hashes the client
// address alone over the same bucket ids on every node), and the backend sees the client's own
// address of that family.
func TestDualStackSessionAffinity(t *testing.T) {
	const file = "ds-affinity.yaml"
	s := dsSvc{name: "ds-affinity", n: 5, policy: "PreferDualStack", families: []string{"IPv4", "IPv6"}, nodePort: 30604,
		eps: []ep{echoA, echoB}, affinity: 300}
	defer removeAndWait(t, file, "tp_dst=30604")
	writeManifest(t, file, s.yaml())
	for _, fam := range []string{"IPv4", "IPv6"} {
		t.Run(fam, func(t *testing.T) {
			first := ""
			for _, node := range []string{"node1", "node2"} {
				addr := net.JoinHostPort(nodeIP(t, node, fam), "30604")
				r, err := waitFrom("tcp", addr, 20*time.Second)
				if err != nil {
					logHitFlows(t, fam)
				}
				require.NoError(t, err, "%s NodePort %s never answered", fam, addr)
				checkFamily(t, r, fam, addr, "echo-a", "echo-b")
				seen := map[string]int{r.Pod: 1}
				for i := 0; i < 7; i++ {
					r, err := theLab.Request("", "tcp", addr)
					require.NoError(t, err, "%s request %d to %s", fam, i, addr)
					assert.Equal(t, clientOf(fam), r.ClientIP(), "backend %s saw %s", r.Pod, r.Client)
					seen[r.Pod]++
				}
				pod := only(t, seen, fam+" via "+node)
				if first == "" {
					first = pod
				}
				assert.Equal(t, first, pod, "%s: node1 and node2 chose different backends for one client", fam)
				t.Logf("%s via %s (%s): 8 connections, all to %s", fam, node, addr, pod)
			}
		})
	}
}

// The node network over IPv6 (the twin of TestHostToPods and TestPodToHostsAndOutside, TCP; UDP
// to the outside): a pod reaches a pod on another node over Geneve (the IPv4 underlay) and is
// seen with its own IPv6 address; the host reaches its local pod from its IPv6 gateway address
// and a remote pod from its IPv6 pod gateway address (the route of the IPv6 cluster CIDR has it
// as source, as node-setup writes it), not masqueraded; a pod reaches its own host unmasqueraded, another node's host and
// the outside world (the client's IPv6 address behind the router) masqueraded to its node's IPv6
// InternalIP (the lab's `ip6 ovs-srcip` table, as node-setup writes it).
func TestHostAndPodsIPv6(t *testing.T) {
	j := func(ip string) string { return net.JoinHostPort(ip, hostPort) }
	n1, n2 := nodeIP(t, "node1", "IPv6"), nodeIP(t, "node2", "IPv6")
	c6, a6 := podIP6(echoC), podIP6(echoA)
	gw1 := theLab.Node("node1").Gateway6.String()
	request(t, "echo-c", "tcp", net.JoinHostPort(a6, "8080"), "echo-a", c6)
	request(t, "node1", "tcp", net.JoinHostPort(c6, "8080"), "echo-c", gw1)

	hostEcho(t, "node1")
	hostEcho(t, "node2")
	hostEcho(t, "client", "")
	request(t, "echo-c", "tcp", j(n1), "node1", c6)
	request(t, "echo-c", "tcp", j(n2), "node2", n1)
	request(t, "echo-a", "tcp", j(n1), "node1", n2)
	for _, proto := range []string{"tcp", "udp"} {
		request(t, "echo-c", proto, j(client6IP), "client", n1)
		request(t, "echo-a", proto, j(client6IP), "client", n2)
	}
	ping(t, "echo-c", a6)
	ping(t, "echo-c", gw1)
	ping(t, "echo-c", client6IP)
	// A host's connection to a pod on another node (VNI 1): over IPv6 it comes from the host's
	// pod gateway address (node-setup's route source), so the answers are routed back to that
	// node's pod CIDR, over the tunnel.
	request(t, "node1", "tcp", net.JoinHostPort(a6, "8080"), "echo-a", gw1)
	request(t, "node3", "tcp", net.JoinHostPort(c6, "8080"), "echo-c", theLab.Node("node3").Gateway6.String())
	// The IPv6 twin of OriginNode: a host socket bound to the node's IPv6 InternalIP (a node
	// address, not the pod gateway address) reaches a pod on another node over VNI 1; the pod's
	// node commits it with OriginNode (8) and tunnels the answers back, not masqueraded.
	n3 := nodeIP(t, "node3", "IPv6")
	for _, proto := range []string{"tcp", "udp"} {
		requestBound(t, "node1", n1, proto, net.JoinHostPort(a6, "8080"), "echo-a", n1)
		requestBound(t, "node3", n3, proto, net.JoinHostPort(c6, "8080"), "echo-c", n3)
	}
	ct, err := theLab.Appctl("node1", "dpctl/dump-conntrack", "zone="+zonePod)
	require.NoError(t, err)
	assert.Regexp(t, `src=`+regexp.QuoteMeta(n3)+`,dst=`+regexp.QuoteMeta(c6)+`,sport=\d+,dport=8080.*mark=8`, ct)
}

// requestBound is request from a socket bound to local (a host address of from's netns).
func requestBound(t *testing.T, from, local, proto, addr, wantServer, wantClientIP string) {
	t.Helper()
	var r lab.Reply
	require.NoError(t, lab.WaitFor(func() error {
		var err error
		r, err = theLab.RequestWith(from, proto, addr, lab.RequestOpts{LocalAddr: local})
		return err
	}, 20*time.Second), "%s %s from %s bound to %s", proto, addr, from, local)
	assert.Equal(t, wantServer, r.Pod, "%s %s from %s bound to %s: answered by", proto, addr, from, local)
	assert.Equal(t, wantClientIP, r.ClientIP(), "%s %s from %s bound to %s: the server saw", proto, addr, from, local)
	assert.Equal(t, addr, r.From, "%s %s from %s bound to %s: the answer came from", proto, addr, from, local)
	t.Logf("%s %s from %s bound to %s: server %s saw %s, answer from %s", proto, addr, from, local, r.Pod, r.Client, r.From)
}

// PMTUD across the hairpin over IPv6 (the twin of TestPMTUDAcrossHairpin): the router's
// client-side link gets an MTU of 1300. The backend pod (echo-a on node2, MTU 1400) sends
// full-size segments through node1's IPv6 NodePort to the client's IPv6 address; the router
// answers each with an ICMPv6 Packet Too Big (mtu 1300) to the NodePort address. node1 must
// un-DNAT it to the pod and tunnel it to node2, so the pod lowers its path MTU and the 1 MB
// download completes.
func TestPMTUDAcrossHairpinIPv6(t *testing.T) {
	const file, size = "ds-pmtud.yaml", 1 << 20
	s := dsSvc{name: "ds-pmtud", n: 6, policy: "PreferDualStack", families: []string{"IPv4", "IPv6"}, nodePort: 30605, eps: []ep{echoA}}
	defer removeAndWait(t, file, "tp_dst=30605")
	writeManifest(t, file, strings.ReplaceAll(strings.ReplaceAll(s.yaml(), "targetPort: 8080", "targetPort: 8081"), "port: 8080}", "port: 8081}"))
	addr := net.JoinHostPort(nodeIP(t, "node1", "IPv6"), "30605")
	var ln net.Listener
	require.NoError(t, inNetns(t, "echo-a", func() error {
		var err error
		ln, err = net.Listen("tcp6", ":8081")
		return err
	}))
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				c.Write(bytes.Repeat([]byte("x"), size))
			}()
		}
	}()
	download := func(timeout time.Duration) (int64, error) {
		var c net.Conn
		if err := inNetns(t, "client", func() error {
			var err error
			c, err = net.DialTimeout("tcp6", addr, 3*time.Second)
			return err
		}); err != nil {
			return 0, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		return io.Copy(io.Discard, c)
	}
	// Flows in place, path MTU still 1500 everywhere.
	if err := lab.WaitFor(func() error {
		n, err := download(10 * time.Second)
		if err == nil && n != size {
			err = fmt.Errorf("got %d bytes", n)
		}
		return err
	}, 20*time.Second); err != nil {
		logHitFlows(t, "IPv6")
		t.Fatalf("the IPv6 download through %s never completed: %v", addr, err)
	}
	_, _ = theLab.Exec("echo-a", "ip", "-6", "route", "flush", "cache")
	rp := theLab.Prefix + "c1"
	for _, l := range []string{rp, "brc"} {
		_, err := theLab.Exec("router", "ip", "link", "set", l, "mtu", "1300")
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, l := range []string{rp, "brc"} {
			_, _ = theLab.Exec("router", "ip", "link", "set", l, "mtu", "1500")
		}
		_, _ = theLab.Exec("echo-a", "ip", "-6", "route", "flush", "cache")
	})
	toRouter := capture(t, "router", "br0", "icmp6 and ip6[40] == 2") // Packet Too Big
	start := time.Now()
	n, err := download(15 * time.Second)
	t.Logf("downloaded %d bytes in %v (err %v)", n, time.Since(start), err)
	ptbs := toRouter()
	t.Logf("Packet Too Big sent by the router: %d, e.g. %v", len(ptbs), first(ptbs))
	assert.NotEmpty(t, ptbs, "the router must have sent Packet Too Big (else the test proves nothing)")
	require.NoError(t, err)
	require.EqualValues(t, size, n)
	pmtu, _ := theLab.Exec("echo-a", "ip", "-6", "route", "get", client6IP)
	t.Log(strings.TrimSpace(pmtu))
	assert.Contains(t, pmtu, "mtu 1300", "the pod learnt the path MTU from the router's ICMPv6")
}

// srcipctl trace over IPv6 (issue 22): a new connection from the client's IPv6 address to
// ds-prefer's IPv6 NodePort on node1 is traced through node1's agent and, for its endpoint
// echo-a, through node2's (the lab's sibling run directories), reply and un-DNAT included; the
// verdict is "delivered" over node1 -> node2 -> node1 (the IPv4 underlay between them).
func TestTraceIPv6AcrossNodes(t *testing.T) {
	const file = "ds-prefer.yaml"
	writeManifest(t, file, dsPrefer.yaml())
	defer removeAndWait(t, file, fmt.Sprintf("tp_dst=%d", dsPrefer.nodePort))
	from := net.JoinHostPort(client6IP, "40000")
	to := net.JoinHostPort(nodeIP(t, "node1", "IPv6"), fmt.Sprint(dsPrefer.nodePort))
	out := traceDelivered(t, "node1", from, to)
	assert.Contains(t, out, "entry point of e2e/ds-prefer http/TCP/IPv6")
	assert.Contains(t, out, "tcp6,")
	assert.Contains(t, out, "ipv6_src="+client6IP)
	assert.Contains(t, out, "=> Geneve (VNI 0x2) to node2")
	assert.Contains(t, out, "ct(zone=ZoneService6,nat) un-DNATs the reply")
	assert.Contains(t, out, "(path node1 -> node2 -> node1)")
	assert.NotContains(t, out, "drop:", "no step of a delivered connection is named a drop")
}

// traceDelivered runs `srcipctl trace --from from --to to` against node's agent until its
// verdict is "delivered" (30 s; the flows may still be on their way), logs and returns its output.
func traceDelivered(t *testing.T, node, from, to string) string {
	t.Helper()
	bin := srcipctlBin(t)
	var out string
	require.NoError(t, lab.WaitFor(func() error {
		cmd := exec.Command(bin, "trace", "--from", from, "--to", to)
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+theLab.Node(node).Dir)
		b, err := cmd.CombinedOutput()
		out = string(b)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if !strings.Contains(out, "verdict: delivered") {
			return fmt.Errorf("not delivered yet: %s", lastLine(out))
		}
		return nil
	}, 30*time.Second), "srcipctl trace --from %s --to %s: %s", from, to, out)
	t.Logf("$ srcipctl trace --from %s --to %s\n%s", from, to, out)
	return out
}
