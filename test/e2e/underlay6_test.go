package e2e

// Geneve over an IPv6 underlay (issue 22): the lab's nodes keep their addresses (both families on
// br-ex), but the Node objects the agents read lose their IPv4 InternalIPs (they become
// ExternalIPs, still NodePort addresses): each node's underlay address is then its IPv6
// InternalIP in 2001:db8:0:2::/64, and the agents tunnel over IPv6 (tun_ipv6_src/tun_ipv6_dst).

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// v4InternalIP matches an IPv4 InternalIP entry of the demo nodes.yaml.
var v4InternalIP = regexp.MustCompile(`- type: InternalIP\n(\s+)address: (192\.0\.2\.\d+)`)

// ipv6Underlay rewrites the watched nodes.yaml so that every Node's IPv4 InternalIP is an
// ExternalIP, waits until node1 routes to node2 with tun_ipv6_dst, and restores the file (and
// waits for the IPv4 underlay again) at cleanup.
func ipv6Underlay(t *testing.T) {
	t.Helper()
	p := filepath.Join(dir, "nodes.yaml")
	orig, err := os.ReadFile(p)
	require.NoError(t, err)
	v6 := v4InternalIP.ReplaceAllString(string(orig), "- type: ExternalIP\n${1}address: $2")
	require.NotEqual(t, string(orig), v6, "no IPv4 InternalIP in nodes.yaml")
	t.Cleanup(func() {
		writeManifest(t, "nodes.yaml", string(orig))
		if err := waitBrInt("node1", "set_field:192.0.2.12->tun_dst", "tun_ipv6"); err != nil {
			t.Errorf("back to the IPv4 underlay: %v", err)
		}
	})
	start := time.Now()
	writeManifest(t, "nodes.yaml", v6)
	require.NoError(t, waitBrInt("node1", "set_field:2001:db8:0:2::12->tun_ipv6_dst", "->tun_dst"), "the IPv6 underlay")
	require.NoError(t, waitBrInt("node2", "set_field:2001:db8:0:2::11->tun_ipv6_dst", "->tun_dst"), "the IPv6 underlay")
	t.Logf("IPv6 underlay programmed on node1 and node2 in %s", time.Since(start).Round(time.Millisecond))
}

// waitBrInt waits until node's br-int has a flow with want and none with not.
func waitBrInt(node, want, not string) error {
	return lab.WaitFor(func() error {
		out, err := theLab.DumpFlows(node, "br-int")
		if err != nil {
			return err
		}
		if !strings.Contains(out, want) {
			return fmt.Errorf("%s br-int: no %s yet", node, want)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, not) {
				return fmt.Errorf("%s br-int still has %s: %s", node, not, strings.TrimSpace(l))
			}
		}
		return nil
	}, 30*time.Second)
}

// dropCountUDP returns n_packets of node's br-ex Geneve drop flow (ExClassifier, priority 600) of
// protocol proto ("udp6": to the node's IPv6 underlay address; "udp": Geneve over IPv4).
func dropCountUDP(t *testing.T, node, proto string) int {
	t.Helper()
	out, err := theLab.DumpFlows(node, "br-ex", "table=0,"+proto+",tp_dst=6081")
	require.NoError(t, err)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "priority=600") && strings.Contains(l, "actions=drop") && strings.Contains(l, ","+proto+",") {
			m := regexp.MustCompile(`n_packets=(\d+)`).FindStringSubmatch(l)
			require.NotNil(t, m, l)
			n, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			return n
		}
	}
	t.Errorf("no %s Geneve drop flow on %s br-ex:\n%s", proto, node, out)
	return -1
}

// Issue 22, "Geneve over an IPv4 or an IPv6 underlay": with IPv6 InternalIPs only, a dual-stack
// Service's IPv4 and IPv6 entry points (the NodePort on node1 and node2, the LoadBalancer IP and
// the externalIP routed to node1; TCP and UDP) bring the client's own address of each family to
// the backend echo-a on node2 and every answer comes from the address dialled; the Geneve packets
// between node1 and node2 are IPv6 (none is IPv4), and node2's ZonePod entry records node1's IPv6
// address as the ingress node (ct_label = 2001:db8:0:2::11).
func TestIPv6UnderlayClientIPKept(t *testing.T) {
	ipv6Underlay(t)
	const file = "u6.yaml"
	s := dsSvc{name: "u6", n: 7, policy: "PreferDualStack", families: []string{"IPv4", "IPv6"}, nodePort: 30606,
		lb4: "203.0.113.68", lb6: "2001:db8:0:113::68", e4: "203.0.113.69", e6: "2001:db8:0:113::69", eps: []ep{echoA}}
	writeManifest(t, file, s.yaml())
	defer removeAndWait(t, file, "tp_dst=30606")
	gnv6 := capture(t, "node1", "eth0", "ip6 and udp port 6081")
	gnv4 := capture(t, "node1", "eth0", "ip and udp port 6081")
	for _, fam := range []string{"IPv4", "IPv6"} {
		t.Run(fam, func(t *testing.T) { serveFamily(t, s, fam, "echo-a") })
	}
	six, four := gnv6(), gnv4()
	assert.NotEmpty(t, six, "no Geneve over IPv6 on node1's uplink")
	assert.Empty(t, four, "Geneve over IPv4 on node1's uplink")
	t.Logf("node1 uplink: %d Geneve-over-IPv6 packets, %d Geneve-over-IPv4", len(six), len(four))

	r, err := waitFrom("tcp", "203.0.113.68:80", 5*time.Second)
	require.NoError(t, err)
	checkFamily(t, r, "IPv4", "203.0.113.68:80", "echo-a")
	_, cport, _ := strings.Cut(r.Local, ":")
	ct2, err := theLab.Appctl("node2", "dpctl/dump-conntrack", "zone="+zonePod)
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`src=198\.51\.100\.10,dst=10\.244\.2\.5,sport=`+cport+`,dport=8080.*mark=2,labels=0x20010db8000000020000000000000011`), ct2)
}

// Issue 22, the tunnel guard over an IPv6 underlay ("only node addresses may tunnel"): an outside
// host sends Geneve to node1's IPv6 address from its own IPv6 address (no node's), inner IPv4 and
// IPv6 SYNs to node1's pod echo-c, for VNIs 1-3, and Geneve over IPv4 from node2's IPv4 address
// (no underlay address any more): node1's drop flows count them, nothing reaches the pod, nothing
// comes back. Positive control: the same inner SYN over IPv6 from node2's IPv6 address reaches
// the pod.
func TestIPv6UnderlayOnlyNodesMayTunnel(t *testing.T) {
	ipv6Underlay(t)
	addr := "192.0.2.11:30101" // svcLocal: echo-c on node1
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-c")
	// Inner sources and ports of their own: the pod's SYN-ACK retransmissions to the positive
	// controls of TestOnlyNodesMayTunnel and TestIPv6OnlyNodesMayTunnel (198.51.100.66:41000,
	// [2001:db8:0:100::66]:41000) may still be on the way; only what reaches the pod counts.
	const spoofed4, spoofed6 = "198.51.100.67", "2001:db8:0:100::67"
	echoC6 := podIP6(echoC)
	pod := capture(t, "echo-c", "eth0", "tcp dst port 8080 and (src host "+spoofed6+" or src host "+spoofed4+")")
	back := capture(t, "client", "eth0", "udp port 6081 and (dst host "+clientIP+" or dst host "+client6IP+")")
	before6, before4 := dropCountUDP(t, "node1", "udp6"), dropCountUDP(t, "node1", "udp")
	inner4 := []string{"--inner-src", spoofed4 + ":41060", "--inner-dst", echoC.ip + ":8080"}
	inner6 := []string{"--inner-src", "[" + spoofed6 + "]:41061", "--inner-dst", "[" + echoC6 + "]:8080"}
	for _, vni := range []string{"1", "2", "3"} {
		for _, inner := range [][]string{inner4, inner6} {
			inject(t, "client", append([]string{"--dst", "2001:db8:0:2::11", "--vni", vni}, inner...)...)
		}
	}
	inject(t, "client", append([]string{"--dst", "192.0.2.11", "--vni", "2", "--src", "192.0.2.12"}, inner4...)...)
	var got6, got4 int
	assert.Eventually(t, func() bool {
		got6, got4 = dropCountUDP(t, "node1", "udp6")-before6, dropCountUDP(t, "node1", "udp")-before4
		return before6 >= 0 && before4 >= 0 && got6 >= 6 && got4 >= 1
	}, 5*time.Second, 100*time.Millisecond, "node1's Geneve drop flows must count the 6 packets over IPv6 and the one over IPv4")
	t.Logf("node1 dropped %d Geneve-over-IPv6 packets from a non-node address and %d Geneve-over-IPv4", got6, got4)
	assert.Empty(t, pod(), "a Geneve packet from outside the cluster reached the pod")
	assert.Empty(t, back(), "something was sent back to the outside host")

	pod = capture(t, "echo-c", "eth0", "tcp dst port 8080 and src host "+spoofed6)
	inject(t, "client", append([]string{"--dst", "2001:db8:0:2::11", "--vni", "2", "--src", "2001:db8:0:2::12"}, inner6...)...)
	assert.NotEmpty(t, pod(), "positive control: the injected SYN over IPv6 with a node's IPv6 source must reach the pod")
}

// Issue 22, egress over an IPv6 underlay: echo-a (node2) selected by a policy with the IPv4 egress
// IP 192.0.2.50 and the IPv6 one 2001:db8:0:2::50, gateway node3. With IPv6 InternalIPs only,
// node2 tunnels echo-a's packets of both families to node3 over IPv6 (VNI 4, tun_ipv6_dst), node3
// SNATs them and the server in the client netns sees only the egress IPs (TCP and UDP, each
// family); node3's ZoneEgress and ZoneEgress6 entries record node2's IPv6 address
// (CTLabelEgressNode6) and the replies go back over IPv6 (VNI 5): no Geneve over IPv4 on node3's
// uplink.
func TestIPv6UnderlayEgress(t *testing.T) {
	ipv6Underlay(t)
	hostEcho(t, "client", "")
	target4 := clientIP + ":" + hostPort
	target6 := net.JoinHostPort(client6IP, hostPort)
	node2v4, node2v6 := "192.0.2.12", nodeIP(t, "node2", "IPv6")
	t.Cleanup(func() {
		writeManifest(t, "egress.yaml", "")
		waitSeenAs(t, "echo-a", "tcp", target4, node2v4)
		waitSeenAs(t, "echo-a", "tcp", target6, node2v6)
		for _, n := range []string{"node1", "node2", "node3"} {
			_, err := theLab.Appctl(n, "revalidator/purge")
			assert.NoError(t, err, n)
		}
	})
	writeManifest(t, "egress.yaml", egressPolicyGW("job", []string{egressIP, egressIP6}, []string{"node3"}, "node3"))
	if err := waitBrInt("node2", "set_field:"+nodeIP(t, "node3", "IPv6")+"->tun_ipv6_dst,set_field:0x4->tun_id", "->tun_dst"); err != nil {
		out, _ := theLab.DumpFlows("node2", "br-int", "table=75")
		t.Fatalf("node2 tunnels to the gateway over IPv6: %v\nnode2 br-int table 75:\n%s", err, out)
	}
	gnv4 := capture(t, "node3", "eth0", "ip and udp port 6081")
	gnv6 := capture(t, "node3", "eth0", "ip6 and udp port 6081")
	for _, proto := range []string{"tcp", "udp"} {
		r4 := waitSeenAs(t, "echo-a", proto, target4, egressIP)
		r6 := waitSeenAs(t, "echo-a", proto, target6, egressIP6)
		t.Logf("IPv6 underlay, %s from echo-a: IPv4 seen as %s, IPv6 as %s", proto, r4.Client, r6.Client)
	}
	six, four := gnv6(), gnv4()
	assert.NotEmpty(t, six, "no Geneve over IPv6 on node3's uplink")
	assert.Empty(t, four, "Geneve over IPv4 on node3's uplink")
	var toNode2 int
	for _, l := range six {
		if strings.Contains(l, "> "+node2v6+".") {
			toNode2++
		}
	}
	assert.NotZero(t, toNode2, "no reply tunnelled back to node2 over IPv6: %q", six)
	t.Logf("node3 uplink: %d Geneve-over-IPv6 packets (%d to node2), %d over IPv4", len(six), toNode2, len(four))
	// node3 recorded node2's IPv6 underlay address in all of ct_label (CTLabelEgressNode6).
	label := "labels=0x20010db8000000020000000000000012"
	ct4, err := theLab.Appctl("node3", "dpctl/dump-conntrack", "zone=64258")
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`src=10\.244\.2\.5,.*dst=`+regexp.QuoteMeta(egressIP)+`,.*`+label), ct4)
	ct6, err := theLab.Appctl("node3", "dpctl/dump-conntrack", "zone=64274")
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`src=`+regexp.QuoteMeta(podIP6(echoA))+`,.*dst=`+regexp.QuoteMeta(egressIP6)+`,.*`+label), ct6)
	// A pod that is not selected keeps its node's addresses.
	request(t, "echo-c", "tcp", target4, "client", "192.0.2.11")
}

// Issue 22, the egress tunnel guard over an IPv6 underlay: an outside host (the client, no node)
// sends Geneve over IPv6 with VNI 4 to the gateway node3, inner eth_dst the egress IPs' MACs
// (0a:5e:c0:00:02:32, 0a:5f:00:00:00:50) and inner SYNs of both families to itself, and VNI 5
// (an un-SNATed reply) to node2: node3's and node2's udp6 drop flows count them and nothing
// leaves with an egress IP. Positive control: the same VNI 4 packets with node2's IPv6 address as
// outer source are SNATed by node3 and reach the client from the egress IPs - only the source
// check stops the rest.
func TestIPv6UnderlayEgressOnlyNodes(t *testing.T) {
	ipv6Underlay(t)
	writeManifest(t, "egress.yaml", egressPolicyGW("job", []string{egressIP, egressIP6}, []string{"node3"}, "node3"))
	t.Cleanup(func() { writeManifest(t, "egress.yaml", "") })
	node3v6, node2v6 := nodeIP(t, "node3", "IPv6"), nodeIP(t, "node2", "IPv6")
	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node3", "br-int")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "nat(src="+egressIP6+")") || !strings.Contains(out, "nat(src="+egressIP+")") {
			return fmt.Errorf("node3 does not SNAT for both egress IPs yet")
		}
		return nil
	}, 20*time.Second))
	const port = "41990"
	seen := func() func() []string {
		return capture(t, "client", "eth0", "tcp dst port "+port+" and (src host "+egressIP+" or src host "+egressIP6+")")
	}
	vni4 := [][]string{
		{"--inner-eth-dst", "0a:5e:c0:00:02:32", "--inner-src", "10.244.2.77:41070", "--inner-dst", clientIP + ":" + port},
		{"--inner-eth-dst", "0a:5f:00:00:00:50", "--inner-src", "[2001:db8:244:2::77]:41071", "--inner-dst", "[" + client6IP + "]:" + port},
	}
	stop := seen()
	before3, before2 := dropCountUDP(t, "node3", "udp6"), dropCountUDP(t, "node2", "udp6")
	for _, inner := range vni4 {
		inject(t, "client", append([]string{"--dst", node3v6, "--vni", "4"}, inner...)...)
	}
	inject(t, "client", "--dst", node2v6, "--vni", "5", "--inner-src", clientIP+":"+port, "--inner-dst", "10.244.2.5:41070")
	inject(t, "client", "--dst", node2v6, "--vni", "5", "--inner-src", "["+client6IP+"]:"+port, "--inner-dst", "["+podIP6(echoA)+"]:41071")
	var got3, got2 int
	assert.Eventually(t, func() bool {
		got3, got2 = dropCountUDP(t, "node3", "udp6")-before3, dropCountUDP(t, "node2", "udp6")-before2
		return before3 >= 0 && before2 >= 0 && got3 >= 2 && got2 >= 2
	}, 5*time.Second, 100*time.Millisecond, "the gateway's and the pod node's Geneve drop flows must count the VNI 4 and VNI 5 packets")
	t.Logf("dropped: node3 %d VNI 4 packets, node2 %d VNI 5 packets from a non-node address", got3, got2)
	assert.Empty(t, stop(), "a Geneve packet from outside the cluster left with an egress IP")

	stop = seen()
	for _, inner := range vni4 {
		inject(t, "client", append([]string{"--dst", node3v6, "--vni", "4", "--src", node2v6}, inner...)...)
	}
	time.Sleep(2 * time.Second)
	got := stop()
	for _, ip := range []string{egressIP, egressIP6} {
		assert.True(t, slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, ip+".") }),
			"positive control: VNI 4 from node2's IPv6 address must leave with %s: %q", ip, got)
	}
	t.Logf("positive control: %q", got)
}
