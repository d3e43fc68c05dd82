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
	// The nodes' IPv6 InternalIPs (host addresses; the underlay stays IPv4).
	node1v6 = "2001:db8::11"
	node2v6 = "2001:db8::12"
)

func newDualStackNode(t *testing.T, node string) *world { return newDualStack(t, node, false) }

// newDualStack is newDualStackNode, with the gateway port srcip-gw0 (ofport gwPort) when gw.
func newDualStack(t *testing.T, node string, gw bool) *world {
	sb := ovstest.StartDummy(t)
	ports := flows.Ports{ExUplink: exUplink, ExPatch: exPatch, IntPatch: intPatch, IntTunnel: intTunnel, ExMAC: mac(brExMAC)}
	if gw {
		sb.AddNodeBridges(t, "pod", "srcip-gw0")
		ports.IntGateway, ports.GatewayMAC = gwPort, mac(gwMAC)
	} else {
		sb.AddNodeBridges(t, "pod")
	}
	p := netip.MustParsePrefix
	nodes := []flows.Node{
		{Name: "node1", InternalIP: netip.MustParseAddr("192.0.2.11"), InternalIPv6: netip.MustParseAddr(node1v6),
			PodCIDRs: []netip.Prefix{p("10.244.1.0/24"), p("2001:db8:244:1::/64")}},
		{Name: "node2", InternalIP: netip.MustParseAddr("192.0.2.12"), InternalIPv6: netip.MustParseAddr(node2v6),
			PodCIDRs: []netip.Prefix{p("10.244.2.0/24"), p("2001:db8:244:2::/64")}},
	}
	self := map[string]string{"node1": "192.0.2.11", "node2": "192.0.2.12"}[node]
	v4 := map[string]string{"node1": "10.244.1.5", "node2": "10.244.2.5"}[node]
	v6 := map[string]string{"node1": pod1v6, "node2": pod2v6}[node]
	st := flows.NewState(node, ports, []netip.Addr{netip.MustParseAddr(self)}, nodes,
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
	// The pod's own lookup in ZonePod carries nat: it applies a selected pod's port-block
	// translation to the later packets of its egress connections, a no-op for the others.
	require.Contains(t, acts[0], "ct(zone=64257,nat),recirc(", out)
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

// P1 over IPv6, backend node: the DNATed SYN arrives by Geneve VNI 2 from the ingress node with
// the client's IPv6 source; it is committed in ZonePod with origin tunnel and the ingress node's
// IPv4 InternalIP in ct_label, and delivered to the pod. The pod's reply goes back over Geneve
// VNI 3 to that node.
func TestIPv6P1BackendNode(t *testing.T) {
	w := newDualStackNode(t, "node2")
	in := "in_port=2,tun_id=2,tun_src=192.0.2.11,tun_dst=192.0.2.12,tcp6,ipv6_src=2001:db8:51::10,ipv6_dst=" + pod2v6 +
		",tp_src=40000,tp_dst=8080,tcp_flags=syn"
	out := w.trace(t, w.in, in, "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, acts[0], "set(eth(src=0a:58:00:00:00:01,dst=0a:58:0a:f4:02:05))", out)
	require.Contains(t, acts[1], "ct(commit,zone=64257,mark=0x2/0xf,label="+ingressNodeLabel+"/0xffffffff)", out)

	podMAC := flows.GatewayMAC(netip.MustParseAddr("10.244.2.5")).String()
	reply := "in_port=3,dl_src=" + podMAC + ",tcp6,ipv6_src=" + pod2v6 + ",ipv6_dst=2001:db8:51::10,tp_src=8080,tp_dst=40000,tcp_flags=syn|ack,ct_mark=0x2,ct_label=" + ingressNodeOnNode2Lbl
	out = w.trace(t, w.in, reply, "trk,est,rpl")
	require.Len(t, datapathActions(out), 2, out)
	require.Contains(t, out, "move:NXM_NX_CT_LABEL[0..31]->NXM_NX_TUN_IPV4_DST[]", out)
	require.Contains(t, out, "set_field:0x3->tun_id", out)
	require.Contains(t, out, "tun_dst=192.0.2.11", out)
}

// P2 over IPv6: br-ex hands a DNATed packet for the local IPv6 endpoint to br-int through the
// patch port: committed with origin br-ex, delivered; the reply goes back to br-ex.
func TestIPv6P2LocalEndpoint(t *testing.T) {
	w := newDualStackNode(t, "node1")
	in := "in_port=1,dl_dst=" + brExMAC + ",tcp6,ipv6_src=2001:db8:51::10,ipv6_dst=" + pod1v6 + ",tp_src=40000,tp_dst=8080,tcp_flags=syn"
	out := w.trace(t, w.in, in, "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, acts[1], "ct(commit,zone=64257,mark=0x1/0xf)", out)
	require.Contains(t, out, "output port is 3", out)

	podMAC := flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String()
	reply := "in_port=3,dl_src=" + podMAC + ",tcp6,ipv6_src=" + pod1v6 + ",ipv6_dst=2001:db8:51::10,tp_src=8080,tp_dst=40000,tcp_flags=syn|ack,ct_mark=0x1"
	out = w.trace(t, w.in, reply, "trk,est,rpl", "trk,est,rpl")
	require.Contains(t, out, "50. ct_state=+est+rpl+trk,ct_mark=0x1/0xf,ipv6, priority 200", out)
	require.Contains(t, out, "    output:1\n\nbridge(\"br-ex\")", "to br-ex through the patch port: %s", out)
	// br-ex un-DNATs it in ZoneService6 (64272) and sends it to the client.
	acts = datapathActions(out)
	require.Len(t, acts, 3, out)
	require.True(t, strings.HasPrefix(acts[1], "ct(zone=64272,nat),recirc("), out)
	require.Contains(t, acts[2], "set(eth(src="+brExMAC, out)
}

// The host path over IPv6 (srcip-gw0): a pod's connection to the outside world is committed
// and handed to the host; the host's solicitation for a pod of another node is answered with
// this node's IPv6 gateway MAC; the host's connection to that pod leaves over Geneve VNI 1.
func TestIPv6GatewayHostPath(t *testing.T) {
	w := newDualStack(t, "node1", true)
	podMAC := flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String()
	syn := "in_port=3,dl_src=" + podMAC + ",tcp6,ipv6_src=" + pod1v6 + ",ipv6_dst=2001:db8:51::10,tp_src=40000,tp_dst=80,tcp_flags=syn"
	out := w.trace(t, w.in, syn, "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, acts[1], "ct(commit,zone=64257)", out)
	require.Contains(t, acts[1], "dst="+gwMAC, out)
	require.Contains(t, out, "output:4", out)

	ns := "in_port=4,dl_src=" + gwMAC + ",dl_dst=33:33:ff:00:00:05,icmp6,ipv6_src=" + gw1v6 +
		",ipv6_dst=ff02::1:ff00:5,nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=" + pod2v6 + ",nd_sll=" + gwMAC
	out = w.trace(t, w.in, ns)
	acts = datapathActions(out)
	require.Len(t, acts, 1, out)
	require.Contains(t, acts[0], "set(eth(src=0a:58:00:00:00:01,dst="+gwMAC+"))", out)
	require.Contains(t, acts[0], "set(ipv6(src="+pod2v6+",dst="+gw1v6+"))", out)
	require.Contains(t, acts[0], "set(nd(tll=0a:58:00:00:00:01))", out)

	host := "in_port=4,dl_dst=0a:58:00:00:00:01,tcp6,ipv6_src=" + gw1v6 + ",ipv6_dst=" + pod2v6 + ",tp_src=40000,tp_dst=8080,tcp_flags=syn"
	out = w.trace(t, w.in, host, "trk,new")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, acts[1], "ct(commit,zone=64257,mark=0x4/0xf)", out)
	require.Contains(t, out, "set_field:0x1->tun_id", out)
	require.Contains(t, out, "set_field:192.0.2.12->tun_dst", out)
}
