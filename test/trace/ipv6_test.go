package trace

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
)

// IPv6 on br-int (docs/pipeline.md "IPv6 on br-int"): node1 and node2 dual-stack, each with one
// pod holding an IPv4 and an IPv6 address; the underlay stays IPv4.
const (
	pod1v6 = "2001:db8:244:1::5"
	pod2v6 = "2001:db8:244:2::5"
	gw1v6  = "2001:db8:244:1::1"
)

func newDualStackNode(t *testing.T, node string) *world {
	sb := ovstest.StartDummy(t)
	sb.AddNodeBridges(t, "pod")
	p := netip.MustParsePrefix
	nodes := []flows.Node{
		{Name: "node1", InternalIP: netip.MustParseAddr("192.0.2.11"), PodCIDRs: []netip.Prefix{p("10.244.1.0/24"), p("2001:db8:244:1::/64")}},
		{Name: "node2", InternalIP: netip.MustParseAddr("192.0.2.12"), PodCIDRs: []netip.Prefix{p("10.244.2.0/24"), p("2001:db8:244:2::/64")}},
	}
	self := map[string]string{"node1": "192.0.2.11", "node2": "192.0.2.12"}[node]
	v4 := map[string]string{"node1": "10.244.1.5", "node2": "10.244.2.5"}[node]
	v6 := map[string]string{"node1": pod1v6, "node2": pod2v6}[node]
	st := flows.NewState(node,
		flows.Ports{ExUplink: exUplink, ExPatch: exPatch, IntPatch: intPatch, IntTunnel: intTunnel, ExMAC: mac(brExMAC)},
		[]netip.Addr{netip.MustParseAddr(self)}, nodes,
		[]flows.Pod{{Namespace: "demo", Name: "echo", IPs: []netip.Addr{netip.MustParseAddr(v4), netip.MustParseAddr(v6)},
			MAC: flows.GatewayMAC(netip.MustParseAddr(v4)), OFPort: podPort}},
		nil)
	d, err := flows.Build(st)
	require.NoError(t, err)
	w := &world{sb: sb, st: st, ctx: context.Background(),
		ex: ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex")),
		in: ofctl.NewOpenFlow("br-int", sb.MgmtTarget("br-int"))}
	sb.LoadDesired(t, d)
	return w
}

// P3 over IPv6: node1's pod opens a TCP connection to node2's pod: tracked in ZonePod, routed by
// node2's IPv6 pod CIDR over Geneve VNI 1 to node2's IPv4 InternalIP; on node2 it is delivered
// to the pod from the IPv6 gateway MAC.
func TestIPv6PodToPodTwoNodes(t *testing.T) {
	w1 := newDualStackNode(t, "node1")
	pod1MAC := flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String()
	syn := "in_port=3,dl_src=" + pod1MAC + ",dl_dst=0a:58:00:00:00:01,tcp6,ipv6_src=" + pod1v6 + ",ipv6_dst=" + pod2v6 +
		",tp_src=40000,tp_dst=8080,tcp_flags=syn"
	out := w1.trace(t, w1.in, syn, "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, acts[0], "ct(zone=64257),recirc(", out)
	require.Contains(t, out, "60. ipv6,reg0=0x1/0xf,ipv6_dst=2001:db8:244:2::/64", out)
	require.Contains(t, out, "set_field:0x1->tun_id", out)
	require.Contains(t, out, "set_field:192.0.2.12->tun_dst", out)
	require.Contains(t, out, "ipv6_src="+pod1v6+",ipv6_dst="+pod2v6, "the inner IPv6 packet is unchanged: %s", out)
	require.NotContains(t, acts[1], "commit", "pod to pod is not committed: %s", out)

	w2 := newDualStackNode(t, "node2")
	in := "in_port=2,tun_id=1,tun_src=192.0.2.11,tun_dst=192.0.2.12,tcp6,ipv6_src=" + pod1v6 + ",ipv6_dst=" + pod2v6 +
		",tp_src=40000,tp_dst=8080,tcp_flags=syn"
	out = w2.trace(t, w2.in, in)
	acts = datapathActions(out)
	require.Len(t, acts, 1, out)
	require.Contains(t, acts[0], "set(eth(src=0a:58:00:00:00:01,dst=0a:58:0a:f4:02:05))", out)
	require.Contains(t, out, "output port is 3", "delivered to the pod's port: %s", out)
}

// A pod's Neighbor Solicitation for its IPv6 gateway (to the solicited-node multicast address) is
// answered by br-int: a Neighbor Advertisement from the gateway address to the pod, with the
// gateway MAC as Ethernet source and as Target Link-Layer Address, R|S|O set, back out the pod's
// port.
func TestIPv6NeighborSolicitationForGatewayAnswered(t *testing.T) {
	w := newDualStackNode(t, "node1")
	podMAC := flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String()
	ns := "in_port=3,dl_src=" + podMAC + ",dl_dst=33:33:ff:00:00:01,icmp6,ipv6_src=" + pod1v6 +
		",ipv6_dst=ff02::1:ff00:1,nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=" + gw1v6 + ",nd_sll=" + podMAC
	out := w.trace(t, w.in, ns)
	acts := datapathActions(out)
	require.Len(t, acts, 1, out)
	a := acts[0]
	require.Contains(t, a, "set(eth(src=0a:58:00:00:00:01,dst="+podMAC+"))", out)
	require.Contains(t, a, "src="+gw1v6, out)
	require.Contains(t, a, "dst="+pod1v6, out)
	require.Contains(t, a, "type=136", out)
	require.Contains(t, a, "tll=0a:58:00:00:00:01", out)
	require.Contains(t, a, "options_type=2", out)
	require.Contains(t, a, "nd_reserved=0xe0000000", "R|S|O: %s", out)
	// Open vSwitch turns the SLL option into the TLL option before it writes the address.
	require.Less(t, strings.Index(a, "set(nd_ext("), strings.Index(a, "set(nd(tll="), out)
	require.Contains(t, out, "57. icmp6,icmp_type=136,icmp_code=0", out)
	require.Contains(t, out, "    IN_PORT\n", "sent back out the pod's port: %s", out)

	// The pod's duplicate address detection (source ::) is never answered.
	dad := strings.Replace(strings.Replace(ns, "ipv6_src="+pod1v6, "ipv6_src=::", 1), "nd_target="+gw1v6, "nd_target="+pod1v6, 1)
	require.Equal(t, []string{"drop"}, datapathActions(w.trace(t, w.in, dad)))
}

// The spoof guard holds the pod to its own IPv6 address: another source (here another address of
// the node's IPv6 pod CIDR) is dropped, and so is a solicitation from it.
func TestIPv6SpoofedSourceDropped(t *testing.T) {
	w := newDualStackNode(t, "node1")
	podMAC := flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String()
	ok := "in_port=3,dl_src=" + podMAC + ",tcp6,ipv6_src=" + pod1v6 + ",ipv6_dst=" + pod2v6 + ",tp_src=40000,tp_dst=8080,tcp_flags=syn"
	require.NotEqual(t, []string{"drop"}, datapathActions(w.trace(t, w.in, ok, "trk,new")))
	for _, src := range []string{"2001:db8:244:1::6", gw1v6, "2001:db8:244:2::5"} {
		spoof := strings.Replace(ok, "ipv6_src="+pod1v6, "ipv6_src="+src, 1)
		out := w.trace(t, w.in, spoof)
		require.Equal(t, []string{"drop"}, datapathActions(out), out)
		require.Contains(t, out, "0. in_port=3, priority 200", "the spoof guard: %s", out)
	}
	ns := "in_port=3,dl_src=" + podMAC + ",icmp6,ipv6_src=2001:db8:244:1::6,ipv6_dst=ff02::1:ff00:1,nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=" + gw1v6
	require.Equal(t, []string{"drop"}, datapathActions(w.trace(t, w.in, ns)))
}
