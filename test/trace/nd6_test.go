package trace

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// pod1LL is a link-local address of node1's pod (any fe80::/64 address: Linux may derive it
// from the MAC or not, addr_gen_mode).
const pod1LL = "fe80::858:aff:fef4:105"

// A pod's unicast reachability probe of its gateway comes from its link-local address (Linux's
// NUD probe, RFC 4861 7.3.3): it is answered, back to that link-local source, with R|S|O and
// the TLL option. The same probe from another MAC on the pod's port is dropped.
func TestIPv6LinkLocalSolicitationAnswered(t *testing.T) {
	w := newDualStackNode(t, "node1")
	podMAC := flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String()
	ns := "in_port=3,dl_src=" + podMAC + ",dl_dst=0a:58:00:00:00:01,icmp6,ipv6_src=" + pod1LL + ",ipv6_dst=" + gw1v6 +
		",nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=" + gw1v6 + ",nd_sll=" + podMAC
	out := w.trace(t, w.in, ns)
	acts := datapathActions(out)
	require.Len(t, acts, 1, out)
	a := acts[0]
	require.Contains(t, out, "0. icmp6,in_port=3,dl_src="+podMAC+",ipv6_src=fe80::/64,icmp_type=135,icmp_code=0, priority 360", out)
	require.Contains(t, a, "set(eth(src=0a:58:00:00:00:01,dst="+podMAC+"))", out)
	require.Contains(t, a, "src="+gw1v6+",dst="+pod1LL, "the NA goes to the link-local source: %s", out)
	require.Contains(t, a, "type=136", out)
	require.Contains(t, a, "nd_reserved=0xe0000000", out)
	require.Contains(t, a, "tll=0a:58:00:00:00:01", out)
	require.Contains(t, out, "    IN_PORT\n", out)
	t.Logf("link-local probe answered: %s", a)

	spoof := strings.Replace(ns, "dl_src="+podMAC, "dl_src=0a:58:0a:f4:01:06", 1)
	out = w.trace(t, w.in, spoof)
	require.Equal(t, []string{"drop"}, datapathActions(out), out)
	require.Contains(t, out, "priority 350", "nd-not-answered: %s", out)
}

// A Neighbor Solicitation without a Source Link-Layer Address option: the multicast one is
// dropped (nd-multicast-without-source-lladdr: its NA must carry a TLL option, RFC 4861 7.2.4,
// which the in-place rewrite cannot add); the unicast one is answered as an NA without the
// option (7.2.4 allows it), without writing an option type into a packet that has no option.
func TestIPv6SolicitationWithoutSLL(t *testing.T) {
	w := newDualStackNode(t, "node1")
	podMAC := flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String()
	mc := "in_port=3,dl_src=" + podMAC + ",dl_dst=33:33:ff:00:00:01,icmp6,ipv6_src=" + pod1v6 +
		",ipv6_dst=ff02::1:ff00:1,nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=" + gw1v6
	out := w.trace(t, w.in, mc)
	require.Equal(t, []string{"drop"}, datapathActions(out), out)
	require.Contains(t, out, "56. icmp6,ipv6_dst=ff00::/8,icmp_type=135,icmp_code=0,nd_sll=00:00:00:00:00:00, priority 290", out)
	info, ok := flows.DropAt(flows.BrInt, flows.IntNDResponder, 290, flows.KindIntBase)
	require.True(t, ok)
	require.Equal(t, flows.DropNDNoSLL, info.Reason)

	uc := "in_port=3,dl_src=" + podMAC + ",dl_dst=0a:58:00:00:00:01,icmp6,ipv6_src=" + pod1v6 +
		",ipv6_dst=" + gw1v6 + ",nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=" + gw1v6
	out = w.trace(t, w.in, uc)
	acts := datapathActions(out)
	require.Len(t, acts, 1, out)
	a := acts[0]
	require.Contains(t, out, "priority 280", out)
	require.Contains(t, a, "set(eth(src=0a:58:00:00:00:01,dst="+podMAC+"))", out)
	require.Contains(t, a, "src="+gw1v6+",dst="+pod1v6, out)
	require.Contains(t, a, "type=136", out)
	require.Contains(t, a, "nd_reserved=0xe0000000", "R|S|O: %s", out)
	require.NotContains(t, a, "options_type", "no option to rewrite: %s", out)
	require.NotContains(t, a, "tll=", out)
	require.Contains(t, out, "    IN_PORT\n", out)
	t.Logf("unicast NS without SLL answered: %s", a)
}

// IPv6 OriginNode (the twin of TestNodeHostToPodCommitsOnlyLocalPods): node2's host reaches
// node1's pod from its IPv6 InternalIP (a socket bound to it) over VNI 1; node1 commits it with
// OriginNode (mark 8) and node2's underlay address in ct_label, and the pod's reply goes back
// over Geneve VNI 1 to node2. To an address that is no pod of node1: no commit.
func TestIPv6NodeHostToPodOriginNode(t *testing.T) {
	w := newDualStack(t, "node1", true)
	syn := "in_port=2,tun_id=1,tun_src=192.0.2.12,tun_dst=192.0.2.11,tcp6,ipv6_src=" + node2v6 + ",ipv6_dst=" + pod1v6 +
		",tp_src=40000,tp_dst=8080,tcp_flags=syn"
	out := w.trace(t, w.in, syn, "trk,new")
	require.Contains(t, out, "ct(commit,zone=64257,mark=0x8/0xf,label=0xc000020c/0xffffffff)", out)
	acts := datapathActions(out)
	require.Contains(t, acts[len(acts)-1], "dst=0a:58:0a:f4:01:05", "delivered to the pod: %s", out)
	t.Logf("commit: %s", acts[len(acts)-1])

	stray := strings.Replace(syn, "ipv6_dst="+pod1v6, "ipv6_dst=2001:db8:51::10", 1)
	require.NotContains(t, w.trace(t, w.in, stray, "trk,new"), "commit")

	podMAC := flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String()
	reply := "in_port=3,dl_src=" + podMAC + ",tcp6,ipv6_src=" + pod1v6 + ",ipv6_dst=" + node2v6 +
		",tp_src=8080,tp_dst=40000,tcp_flags=syn|ack,ct_mark=0x8,ct_label=0xc000020c"
	out = w.trace(t, w.in, reply, "trk,est,rpl")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, out, "50. ct_state=+est+rpl+trk,ct_mark=0x8/0xf,ipv6, priority 200", out)
	require.Contains(t, out, "set_field:0x1->tun_id", out)
	require.Contains(t, out, "tun_dst=192.0.2.12", out)
	t.Logf("reply: %s", acts[1])
	require.Contains(t, out, "output:2", "out the tunnel port, not srcip-gw0: %s", out)
	require.NotContains(t, out, "output:4", out)
}

// br-ex's neighbour discovery for an IPv6 egress IP (node1 its active gateway): the router's
// solicitation with a Source Link-Layer Address option is answered with S|O and the TLL option
// (47 ExNDAdvert); its unicast reachability probe without the option is answered without one
// (no option type written into a packet that has none); a multicast one without it is dropped
// (nd-multicast-without-source-lladdr), duplicate address detection too (nd-not-answered).
func TestIPv6EgressIPSolicitations(t *testing.T) {
	w := newDualStackNode(t, "node1")
	const egressIP, router, routerMAC = "2001:db8:0:2::50", "2001:db8:0:2::1", "02:00:c0:00:02:01"
	w.st.Egress = map[netip.Addr]flows.EgressIP{
		netip.MustParseAddr(egressIP): {IP: netip.MustParseAddr(egressIP), Policy: "job", Gateway: "node1"}}
	d, err := flows.Build(w.st)
	require.NoError(t, err)
	w.sb.LoadDesired(t, d)
	ns := func(dst, dlDst, sll string) string {
		s := "in_port=1,dl_src=" + routerMAC + ",dl_dst=" + dlDst + ",icmp6,ipv6_src=" + router + ",ipv6_dst=" + dst +
			",nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=" + egressIP
		if sll != "" {
			s += ",nd_sll=" + sll
		}
		return s
	}
	out := w.trace(t, w.ex, ns("ff02::1:ff00:50", "33:33:ff:00:00:50", routerMAC))
	acts := datapathActions(out)
	require.Len(t, acts, 1, out)
	require.Contains(t, acts[0], "src="+egressIP+",dst="+router, out)
	require.Contains(t, acts[0], "nd_reserved=0x60000000", "S|O: %s", out)
	require.Contains(t, acts[0], "tll="+brExMAC, out)
	t.Logf("multicast NS with SLL answered: %s", acts[0])

	out = w.trace(t, w.ex, ns(egressIP, brExMAC, ""))
	acts = datapathActions(out)
	require.Len(t, acts, 1, out)
	require.Contains(t, out, "priority 511", out)
	require.Contains(t, acts[0], "src="+egressIP+",dst="+router, out)
	require.Contains(t, acts[0], "nd_reserved=0x60000000", out)
	require.NotContains(t, acts[0], "options_type", "no option to rewrite: %s", out)
	require.NotContains(t, acts[0], "tll=", out)
	t.Logf("unicast NS without SLL answered: %s", acts[0])

	out = w.trace(t, w.ex, ns("ff02::1:ff00:50", "33:33:ff:00:00:50", ""))
	require.Equal(t, []string{"drop"}, datapathActions(out), out)
	require.Contains(t, out, "priority 512", out)
	info, ok := flows.DropAt(flows.BrEx, flows.ExClassifier, 512, flows.KindEgressAnnounce)
	require.True(t, ok)
	require.Equal(t, flows.DropNDNoSLL, info.Reason)

	dad := strings.Replace(ns("ff02::1:ff00:50", "33:33:ff:00:00:50", ""), "ipv6_src="+router, "ipv6_src=::", 1)
	out = w.trace(t, w.ex, dad)
	require.Equal(t, []string{"drop"}, datapathActions(out), out)
	require.Contains(t, out, "priority 513", out)
}
