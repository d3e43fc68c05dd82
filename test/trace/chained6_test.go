package trace

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// A chained pod's IPv6 (docs/egress.md "Chained mode"): node1 dual-stack with srcip-gw0; the
// pod's egress interface (podPort) holds its main CNI's addresses 10.88.1.7 and
// 2001:db8:88:1::7, and its IPv6 traffic to 2001:db8:100::/48 follows the IPv6 egress IP
// 2001:db8::50 (gateway node2). Who else could send what br-int accepts from that port?
const chained6 = "2001:db8:88:1::7"

func newChained6(t *testing.T) (*world, string) {
	w := newDualStack(t, "node1", true)
	for k := range w.st.Pods {
		delete(w.st.Pods, k)
	}
	podMAC := "0a:58:0a:58:01:07"
	p := flows.Pod{Namespace: "demo", Name: "job", IPs: []netip.Addr{netip.MustParseAddr("10.88.1.7"), netip.MustParseAddr(chained6)},
		MAC: mac(podMAC), OFPort: podPort, Chained: true,
		Egress6: &flows.PodEgress{IP: netip.MustParseAddr("2001:db8::50"), Policy: "job",
			Destinations: []netip.Prefix{netip.MustParsePrefix("2001:db8:100::/48")}}}
	w.st.Pods[p.Key()] = p
	w.st.Egress = map[netip.Addr]flows.EgressIP{
		netip.MustParseAddr("2001:db8::50"): {IP: netip.MustParseAddr("2001:db8::50"), Policy: "job", Gateway: "node2"}}
	d, err := flows.Build(w.st)
	require.NoError(t, err)
	w.sb.LoadDesired(t, d)
	return w, podMAC
}

// A listed destination: pinned to the egress path and tunnelled to the gateway node2. An
// unlisted one (what the pod sends on srcip0 anyway): never the egress path, the host path
// through srcip-gw0 (as IPv4's). A spoofed source, and any Neighbor Solicitation (the pod has a
// permanent neighbour entry for fe80::a9fe:101 and needs none), are dropped; so is what another
// node's pod sends to the chained address over Geneve (only the gateway's replies are delivered).
func TestChainedIPv6Egress(t *testing.T) {
	w, podMAC := newChained6(t)
	gwDst := flows.ChainedGatewayMAC.String()
	syn := func(src, dst string) string {
		return "in_port=3,dl_src=" + podMAC + ",dl_dst=" + gwDst + ",tcp6,ipv6_src=" + src + ",ipv6_dst=" + dst +
			",tp_src=40000,tp_dst=9090,tcp_flags=syn"
	}
	out := w.trace(t, w.in, syn(chained6, "2001:db8:100::10"), "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, acts[1], "ct(commit,zone=64257", out)
	require.Contains(t, out, "set_field:192.0.2.12->tun_dst", "tunnelled to the gateway: %s", out)

	out = w.trace(t, w.in, syn(chained6, "2001:db8:51::10"), "trk,new")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.NotContains(t, out, "tun_dst", "an unlisted destination never takes the egress path: %s", out)
	require.NotContains(t, out, "goto_table:75", out)
	require.Contains(t, out, "output:4", "the host path: %s", out)

	out = w.trace(t, w.in, syn("2001:db8:88:1::8", "2001:db8:100::10"))
	require.Equal(t, []string{"drop"}, datapathActions(out), "a spoofed source: %s", out)

	for _, src := range []string{chained6, "fe80::858:aff:fe58:107"} {
		ns := "in_port=3,dl_src=" + podMAC + ",dl_dst=33:33:ff:fe:01:01,icmp6,ipv6_src=" + src +
			",ipv6_dst=ff02::1:fffe:101,nw_ttl=255,icmpv6_type=135,icmpv6_code=0,nd_target=" + flows.ChainedGatewayIP6.String() + ",nd_sll=" + podMAC
		out = w.trace(t, w.in, ns)
		require.Equal(t, []string{"drop"}, datapathActions(out), "a solicitation from %s is not answered: %s", src, out)
	}

	in := "in_port=2,tun_id=1,tun_src=192.0.2.12,tun_dst=192.0.2.11,tcp6,ipv6_src=" + pod2v6 + ",ipv6_dst=" + chained6 +
		",tp_src=40000,tp_dst=8080,tcp_flags=syn"
	out = w.trace(t, w.in, in, "trk,new")
	acts = datapathActions(out)
	require.Equal(t, "drop", acts[len(acts)-1], "only egress replies reach the chained port: %s", out)
	require.NotContains(t, out, "output port is 3", out)
}
