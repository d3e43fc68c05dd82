package e2e

// Geneve over an IPv6 underlay (issue 22): the lab's nodes keep their addresses (both families on
// br-ex), but the Node objects the agents read lose their IPv4 InternalIPs (they become
// ExternalIPs, still NodePort addresses): each node's underlay address is then its IPv6
// InternalIP in 2001:db8:0:2::/64, and the agents tunnel over IPv6 (tun_ipv6_src/tun_ipv6_dst).

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// waitBrInt waits until node's br-int has a flow with want and none with not (outside the
// egress reply table 78, IPv4-underlay only).
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
			if strings.Contains(l, not) && !strings.Contains(l, "table=78") {
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
