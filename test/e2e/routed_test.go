package e2e

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Routed pods (issue 24; docs/routed-pods.md): with --non-masquerade-cidrs (node-setup's
// masquerade and the agents' flows), hosts there reach pods by their IP through any node, the
// replies go back the way the request came, and pods reach them with their own IP; hosts
// elsewhere reach no pod address, through any node. Without the flag, nobody outside reaches a
// pod through a node that does not own it. Listed here: client2 only (198.51.100.11 and
// 2001:db8:0:100::11); client (.10) is the host outside the list.
func TestRoutedPods(t *testing.T) {
	labOnce.Lock()
	defer labOnce.Unlock()
	node1, node2 := theLab.Node("node1"), theLab.Node("node2")
	echoA4, echoA6 := "10.244.2.5:8080", "[2001:db8:244:2::5]:8080"
	echoC4 := "10.244.1.5:8080"
	// The router sends node1's and node2's pod CIDRs to node1, as a router with one route for
	// the whole cluster CIDR (or a stale route) would.
	route := func(dst string, via netip.Addr) {
		t.Helper()
		argv := []string{"ip", "route", "replace", dst, "via", via.String()}
		if via.Is6() {
			argv = []string{"ip", "-6", "route", "replace", dst, "via", via.String()}
		}
		_, err := theLab.Exec("router", argv...)
		require.NoError(t, err)
	}
	for _, c := range []string{"10.244.1.0/24", "10.244.2.0/24"} {
		route(c, node1.IP)
		t.Cleanup(func() { _, _ = theLab.Exec("router", "ip", "route", "del", c) })
	}
	route("2001:db8:244:2::/64", node1.IP6)
	t.Cleanup(func() { _, _ = theLab.Exec("router", "ip", "-6", "route", "del", "2001:db8:244:2::/64") })

	// Routed pods off: client2's connection to echo-a through node1 reaches node2 over Geneve
	// and is dropped there (tunnel-source-not-cluster), not answered from node2's uplink.
	guard := `priority=260,ct_state=+new+trk,ip,tun_src=` + node1.IP.String()
	waitFlow(t, "node2", "br-int", "table=51", guard)
	before := flowPackets(t, "node2", 51, guard)
	_, err := theLab.Request("client2", "tcp", echoA4)
	require.Error(t, err, "routed pods off: client2 reached echo-a through node1")
	after := flowPackets(t, "node2", 51, guard)
	assert.Greater(t, after, before, "node2's tunnel guard counted the SYNs from client2 through node1")
	t.Logf("routed pods off: client2 -> %s through node1: no answer; node2's guard flow n_packets %d -> %d", echoA4, before, after)

	// Routed pods on for client2.
	listed := []netip.Prefix{netip.MustParsePrefix("198.51.100.11/32"), netip.MustParsePrefix("2001:db8:0:100::11/128")}
	require.NoError(t, theLab.SetNonMasquerade(listed))
	flag := "--non-masquerade-cidrs=198.51.100.11/32,2001:db8:0:100::11/128"
	for _, n := range theLab.Nodes {
		require.NoError(t, theLab.SetAgentExtraArgs(n.Name, flag))
		require.NoError(t, theLab.RestartAgent(n.Name))
	}
	t.Cleanup(func() {
		_ = theLab.SetNonMasquerade(nil)
		for _, n := range theLab.Nodes {
			_ = theLab.SetAgentExtraArgs(n.Name)
			_ = theLab.RestartAgent(n.Name)
		}
	})
	waitFlow(t, "node1", "br-ex", "table=0", "nw_src=198.51.100.11,nw_dst=10.244.2.0/24 actions=goto_table:")
	waitFlow(t, "node2", "br-int", "table=51", "priority=290,ct_state=+new+trk,ip,tun_src="+node1.IP.String()+",nw_src=198.51.100.11")

	// client2 reaches echo-a (node2) through node1, over both families: echo-a sees client2's own
	// address, and the answer comes from echo-a's. node1's host conntrack holds the connection
	// assured: the reply came back through node1 (over Geneve from node2), not out of node2.
	r := request(t, "client2", "tcp", echoA4, "echo-a", "198.51.100.11")
	ct, err := theLab.Exec("node1", "conntrack", "-L", "-p", "tcp", "-s", "198.51.100.11", "-d", "10.244.2.5", "--sport", strconv.Itoa(portOf(t, r.Local)))
	require.NoError(t, err)
	assert.Contains(t, ct, "ASSURED", "node1's host saw both directions of client2's connection")
	t.Logf("node1 conntrack: %s", strings.TrimSpace(ct))
	request(t, "client2", "tcp", echoA6, "echo-a", "2001:db8:0:100::11")
	// ... and echo-c on node1 itself.
	request(t, "client2", "tcp", echoC4, "echo-c", "198.51.100.11")

	// client (not listed) reaches no pod address: node1's br-ex drops it (routed-source-not-listed).
	drop := ",nw_dst=10.244.1.0/24 actions=drop"
	before = exPackets(t, "node1", drop)
	_, err = theLab.Request("client", "tcp", echoC4)
	require.Error(t, err, "client (not listed) reached echo-c by its address")
	_, err = theLab.Request("client", "tcp", echoA4)
	require.Error(t, err, "client (not listed) reached echo-a by its address")
	after = exPackets(t, "node1", drop)
	assert.Greater(t, after, before, "node1's br-ex guard counted client's SYNs to echo-c")
	t.Logf("client (not listed) -> %s and %s: no answer; node1's br-ex guard n_packets %d -> %d", echoC4, echoA4, before, after)

	// Egress: echo-a reaches client2 with its own address and client masqueraded to node2's
	// address. The router now sends node2's pod CIDR to node2 (each node's own, as BGP would).
	route("10.244.2.0/24", node2.IP)
	hostEcho(t, "client2")
	hostEcho(t, "client")
	request(t, "echo-a", "tcp", "198.51.100.11:"+hostPort, "client2", "10.244.2.5")
	request(t, "echo-a", "tcp", "198.51.100.10:"+hostPort, "client", node2.IP.String())

	// Precedence: a pod selected by an EgressGateway uses its gateway even to a listed network
	// (echo-a leaves with the egress IP through node3); an unselected pod (echo-c) keeps its own
	// IP to client2 and is masqueraded to client.
	writeManifest(t, "egress-routed.yaml", egressPolicy("routed", egressIP, "node3", ""))
	t.Cleanup(func() { writeManifest(t, "egress-routed.yaml", "") })
	r = waitSeenAs(t, "echo-a", "tcp", "198.51.100.11:"+hostPort, egressIP)
	t.Logf("EgressGateway routed selects echo-a: to client2 (listed) the server saw %s", r.Client)
	request(t, "echo-c", "tcp", "198.51.100.11:"+hostPort, "client2", "10.244.1.5")
	request(t, "echo-c", "tcp", "198.51.100.10:"+hostPort, "client", node1.IP.String())
}

// waitFlow waits until node's bridge has a flow (dump-flows with filter) whose text contains want.
func waitFlow(t *testing.T, node, bridge, filter, want string) {
	t.Helper()
	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows(node, bridge, filter)
		if err != nil {
			return err
		}
		if !strings.Contains(out, want) {
			return fmt.Errorf("%s's %s has no flow %q yet", node, bridge, want)
		}
		return nil
	}, 20*time.Second))
}

// exPackets returns n_packets of node's br-ex routed-pods guard flows (priority 505) whose text
// contains match.
func exPackets(t *testing.T, node, match string) int {
	t.Helper()
	out, err := theLab.DumpFlows(node, "br-ex", "table=0")
	require.NoError(t, err)
	n, found := 0, false
	re := regexp.MustCompile(`n_packets=(\d+)`)
	for _, l := range strings.Split(out, "\n") {
		if m := re.FindStringSubmatch(l); m != nil && strings.Contains(l, "priority=505,") && strings.Contains(l, match) {
			v, _ := strconv.Atoi(m[1])
			n += v
			found = true
		}
	}
	require.True(t, found, "no flow %q in %s's br-ex table 0:\n%s", match, node, out)
	return n
}

// portOf returns the port of an ip:port.
func portOf(t *testing.T, addrPort string) int {
	t.Helper()
	ap, err := netip.ParseAddrPort(addrPort)
	require.NoError(t, err)
	return int(ap.Port())
}
