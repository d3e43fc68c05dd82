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

// IPv6 on br-ex (issue 22): node1 of topology T3 dual-stack, with the addresses of
// flows.GoldenDualStackServices (pod CIDRs 2001:db8:244:N::/64, node1's NodePort address
// 2001:db8::11). These cases trace br-ex only: what br-int does with an IPv6 packet is the
// br-int pipeline's.

// newNode6 is newNode for a dual-stack node1 with the given (IPv6) Service ports.
func newNode6(t *testing.T, svcs ...flows.ServicePort) *world {
	sb := ovstest.StartDummy(t)
	sb.AddNodeBridges(t, "pod")
	var nodes []flows.Node
	for i, n := range []string{"node1", "node2", "node3"} {
		d := byte('1' + i)
		nodes = append(nodes, flows.Node{Name: n, InternalIP: netip.MustParseAddr("192.0.2.1" + string(d)),
			PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244." + string(d) + ".0/24"), netip.MustParsePrefix("2001:db8:244:" + string(d) + "::/64")}})
	}
	gids := flows.NewGroupIDs()
	for i := range svcs {
		svcs[i].GroupID = gids.ID(svcs[i].Key())
	}
	st := flows.NewState("node1",
		flows.Ports{ExUplink: exUplink, ExPatch: exPatch, IntPatch: intPatch, IntTunnel: intTunnel, ExMAC: mac(brExMAC)},
		[]netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::11")}, nodes,
		[]flows.Pod{{Namespace: "demo", Name: "echo", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")},
			MAC: flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")), OFPort: podPort}},
		svcs)
	d, err := flows.Build(st)
	require.NoError(t, err)
	w := &world{sb: sb, st: st, ctx: context.Background(),
		ex: ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex")),
		in: ofctl.NewOpenFlow("br-int", sb.MgmtTarget("br-int"))}
	sb.LoadDesired(t, d)
	return w
}

func web6(eps ...string) flows.ServicePort {
	sp := flows.ServicePort{Namespace: "demo", Name: "web", PortName: "http", Protocol: flows.TCP, Family: flows.IPv6, Port: 80, NodePort: 30080,
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("2001:db8:113::100")}}
	for _, e := range eps {
		sp.Endpoints = append(sp.Endpoints, flows.Endpoint{IP: netip.MustParseAddr(e), Port: 8080})
	}
	return sp
}

const syn6ToNodePort = "in_port=1,tcp6,dl_src=" + clientMAC + ",dl_dst=" + brExMAC +
	",ipv6_src=2001:db8:51:100::10,ipv6_dst=2001:db8::11,tp_src=40000,tp_dst=30080,tcp_flags=syn,nw_ttl=64"

// P1 over IPv6, ingress node: a SYN to the NodePort on node1's IPv6 address goes through
// ct(zone=ZoneService6,nat), and the group's bucket commits the DNAT to the IPv6 endpoint with
// the client's MAC in ct_label and sends it to br-int; the client's address stays the source.
// The same through the IPv6 LoadBalancer IP; an IPv4 SYN to the same port is the IPv4 pipeline's.
func TestIPv6IngressNode(t *testing.T) {
	w := newNode6(t, web6("2001:db8:244:2::5"))
	out := w.trace(t, w.ex, syn6ToNodePort, "trk,new", "trk,new,dnat")
	acts := datapathActions(out)
	require.GreaterOrEqual(t, len(acts), 2, out)
	require.True(t, strings.HasPrefix(acts[0], "ct(zone=64272,nat),recirc("), out)
	require.Contains(t, acts[1], "ct(commit,zone=64272,label="+clientMACLabel+"/0xffffffffffff,nat(dst=[2001:db8:244:2::5]:8080)),recirc(", out)
	require.Contains(t, out, "42. ipv6, priority 10", out)
	require.Contains(t, out, "output:2", out)

	lb := strings.Replace(strings.Replace(syn6ToNodePort, "ipv6_dst=2001:db8::11", "ipv6_dst=2001:db8:113::100", 1), "tp_dst=30080", "tp_dst=80", 1)
	acts = datapathActions(w.trace(t, w.ex, lb, "trk,new", "trk,new,dnat"))
	require.GreaterOrEqual(t, len(acts), 2)
	require.Contains(t, acts[1], "nat(dst=[2001:db8:244:2::5]:8080)")

	// Not an entry point (another port): the host, untouched.
	out = w.trace(t, w.ex, strings.Replace(syn6ToNodePort, "tp_dst=30080", "tp_dst=22", 1))
	require.Len(t, datapathActions(out), 1, out)
	require.NotContains(t, out, "ct(", out)
	require.Contains(t, out, "LOCAL", out)
}

// P1 over IPv6, the reply from br-int: un-DNATed in ZoneService6 and sent out of the uplink to
// the client's MAC (ct_label) from br-ex's MAC; a reply ZoneService6 does not hold is dropped.
func TestIPv6IngressNodeReply(t *testing.T) {
	w := newNode6(t, web6("2001:db8:244:2::5"))
	reply := "in_port=2,tcp6,ipv6_src=2001:db8:244:2::5,ipv6_dst=2001:db8:51:100::10,tp_src=8080,tp_dst=40000,tcp_flags=syn|ack,ct_label=" + clientMACLabel
	out := w.trace(t, w.ex, reply, "trk,est,rpl")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.True(t, strings.HasPrefix(acts[0], "ct(zone=64272,nat),recirc("), out)
	require.Contains(t, out, "46. ct_state=+est+rpl+trk,ipv6", out)
	require.Contains(t, acts[1], "set(eth(src="+brExMAC, out)
	require.Contains(t, out, "output:1", out)
	out = w.trace(t, w.ex, reply, "trk,new")
	require.Equal(t, "drop", datapathActions(out)[1], out)
}

// ICMPv6 errors about a connection follow it (PMTUD over IPv6): Packet Too Big and Destination
// Unreachable from the outside go through ct(zone=ZoneService6,nat) and, +rel, to br-int; the
// endpoint's errors from br-int go to the client; an error about no connection and a ping go to
// the host.
func TestIPv6ICMPErrorsFollowTheirConnection(t *testing.T) {
	w := newNode6(t, web6("2001:db8:244:2::5"))
	for _, typ := range []string{"icmpv6_type=2,icmpv6_code=0", "icmpv6_type=1,icmpv6_code=4"} {
		icmp := "in_port=1,dl_src=" + clientMAC + ",dl_dst=" + brExMAC + ",icmp6," + typ + ",ipv6_src=2001:db8:51::1,ipv6_dst=2001:db8::11,nw_ttl=64"
		out := w.trace(t, w.ex, icmp, "trk,rel")
		acts := datapathActions(out)
		require.Len(t, acts, 2, out)
		require.True(t, strings.HasPrefix(acts[0], "ct(zone=64272,nat),recirc("), out)
		require.Contains(t, out, "41. ct_state=+rel+trk,ipv6", out)
		require.NotContains(t, acts[1], "LOCAL", out)
		out = w.trace(t, w.ex, icmp, "trk,new")
		require.Contains(t, out, "LOCAL", out)

		fromInt := "in_port=2,icmp6," + typ + ",ipv6_src=2001:db8:244:2::5,ipv6_dst=2001:db8:51:100::10,ct_label=" + clientMACLabel
		out = w.trace(t, w.ex, fromInt, "trk,rel")
		acts = datapathActions(out)
		require.Len(t, acts, 2, out)
		require.Contains(t, out, "46. ct_state=+rel+trk,ipv6", out)
		require.Contains(t, acts[1], "set(eth(src="+brExMAC, out)
	}
	ping := "in_port=1,dl_src=" + clientMAC + ",dl_dst=" + brExMAC + ",icmp6,icmpv6_type=128,icmpv6_code=0,ipv6_src=2001:db8:51::1,ipv6_dst=2001:db8::11,nw_ttl=64"
	out := w.trace(t, w.ex, ping)
	require.Len(t, datapathActions(out), 1, out)
	require.NotContains(t, out, "ct(", out)
	require.Contains(t, out, "LOCAL", out)
}

// C32 over IPv6: with an IPv6 source range, a SYN to the IPv6 LoadBalancer IP from inside it is
// DNATed, from outside it dropped; the NodePort is not filtered. Later UDP fragments to an IPv6
// UDP entry point go through ct(zone=ZoneService6,nat) and, established, to br-int.
func TestIPv6SourceRangesAndFragments(t *testing.T) {
	sp := web6("2001:db8:244:2::5")
	sp.FilterSources = true
	sp.SourceRanges = []netip.Prefix{netip.MustParsePrefix("2001:db8:51:100::/64")}
	dns6 := flows.ServicePort{Namespace: "demo", Name: "dns", PortName: "dns", Protocol: flows.UDP, Family: flows.IPv6, Port: 53, NodePort: 31053,
		Endpoints: []flows.Endpoint{{IP: netip.MustParseAddr("2001:db8:244:2::5"), Port: 8053}}}
	w := newNode6(t, sp, dns6)
	toLB := strings.Replace(strings.Replace(syn6ToNodePort, "ipv6_dst=2001:db8::11", "ipv6_dst=2001:db8:113::100", 1), "tp_dst=30080", "tp_dst=80", 1)
	acts := datapathActions(w.trace(t, w.ex, toLB, "trk,new", "trk,new,dnat"))
	require.GreaterOrEqual(t, len(acts), 2)
	require.Contains(t, acts[1], "nat(dst=[2001:db8:244:2::5]:8080)")
	outside := func(f string) string {
		return strings.Replace(f, "ipv6_src=2001:db8:51:100::10", "ipv6_src=2001:db8:52::10", 1)
	}
	out := w.trace(t, w.ex, outside(toLB), "trk,new")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Equal(t, "drop", acts[1], out)
	require.Contains(t, out, "priority 95", out)
	acts = datapathActions(w.trace(t, w.ex, outside(syn6ToNodePort), "trk,new", "trk,new,dnat"))
	require.GreaterOrEqual(t, len(acts), 2, "NodePorts are not filtered")
	require.Contains(t, acts[1], "nat(dst=[2001:db8:244:2::5]:8080)")

	frag := "in_port=1,dl_src=" + clientMAC + ",dl_dst=" + brExMAC + ",udp6,ipv6_src=2001:db8:51:100::10,ipv6_dst=2001:db8::11,nw_frag=later,nw_ttl=64"
	out = w.trace(t, w.ex, frag, "trk,est")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.True(t, strings.HasPrefix(acts[0], "ct(zone=64272,nat),recirc("), out)
	require.Contains(t, out, "41. ct_state=+est+trk,ipv6", out)
}
