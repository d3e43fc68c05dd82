// Package trace checks the pipeline of package flows with ofproto/trace on a dummy-datapath
// ovs-vswitchd: the real OVS classifier, no packets and no network namespaces. Each case names the
// path of docs/pipeline.md it covers and asserts on the "Datapath actions" OVS computes.
package trace

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
)

// Port numbers of the sandbox (ovstest.AddNodeBridges).
const (
	exUplink, exPatch     = ovstest.NodeExUplink, ovstest.NodeExPatch
	intPatch, intTunnel   = ovstest.NodeIntPatch, ovstest.NodeIntTunnel
	podPort               = ovstest.NodeIntPod
	clientMAC             = "02:00:00:00:00:01"
	brExMAC               = "02:00:c0:00:02:0b"
	clientMACLabel        = "0x20000000001"
	ingressNodeLabel      = "0xc000020b" // 192.0.2.11
	ingressNodeOnNode2Lbl = "0xc000020b"
)

// world is node1 and node2 of topology T3 (docs/field-cases.md#t3), each with its own sandbox bridges.
type world struct {
	sb  *ovstest.Sandbox
	ex  *ofctl.OpenFlow
	in  *ofctl.OpenFlow
	st  *flows.State
	ctx context.Context
}

func mac(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }

func newNode(t *testing.T, node string, podIP string, svcs ...flows.ServicePort) *world {
	sb := ovstest.StartDummy(t)
	sb.AddNodeBridges(t, "pod")
	nodes := []flows.Node{
		{Name: "node1", InternalIP: netip.MustParseAddr("192.0.2.11"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}},
		{Name: "node2", InternalIP: netip.MustParseAddr("192.0.2.12"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
	}
	self := map[string]string{"node1": "192.0.2.11", "node2": "192.0.2.12"}[node]
	gids := flows.NewGroupIDs()
	for i := range svcs {
		svcs[i].GroupID = gids.ID(svcs[i].Key())
	}
	st := flows.NewState(node,
		flows.Ports{ExUplink: exUplink, ExPatch: exPatch, IntPatch: intPatch, IntTunnel: intTunnel, ExMAC: mac(brExMAC)},
		[]netip.Addr{netip.MustParseAddr(self)}, nodes,
		[]flows.Pod{{Namespace: "demo", Name: "echo", IPs: []netip.Addr{netip.MustParseAddr(podIP)},
			MAC: flows.GatewayMAC(netip.MustParseAddr(podIP)), OFPort: podPort}},
		svcs)
	d, err := flows.Build(st)
	require.NoError(t, err)
	w := &world{sb: sb, st: st, ctx: context.Background(),
		ex: ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex")),
		in: ofctl.NewOpenFlow("br-int", sb.MgmtTarget("br-int"))}
	sb.LoadDesired(t, d)
	return w
}

func (w *world) trace(t *testing.T, br *ofctl.OpenFlow, flow string, ctNext ...string) string {
	t.Helper()
	out, err := br.Trace(w.ctx, flow, ctNext)
	require.NoError(t, err)
	return out
}

// datapathActions returns every "Datapath actions:" line of a trace, one per recirculation.
func datapathActions(out string) []string {
	var acts []string
	for _, l := range strings.Split(out, "\n") {
		if a, ok := strings.CutPrefix(l, "Datapath actions: "); ok {
			acts = append(acts, a)
		}
	}
	return acts
}

func web(eps ...string) flows.ServicePort {
	sp := flows.ServicePort{Namespace: "demo", Name: "web", PortName: "http", Protocol: flows.TCP, Port: 80, NodePort: 30080,
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("203.0.113.100")}}
	for _, e := range eps {
		sp.Endpoints = append(sp.Endpoints, flows.Endpoint{IP: netip.MustParseAddr(e), Port: 8080})
	}
	return sp
}

const synToNodePort = "in_port=1,tcp,dl_src=" + clientMAC + ",dl_dst=" + brExMAC +
	",nw_src=198.51.100.10,nw_dst=192.0.2.11,tp_src=40000,tp_dst=30080,tcp_flags=syn,nw_ttl=64"

// P1, ingress node: a SYN to the NodePort is DNATed to the endpoint on node2 with the client's MAC in
// ct_label, and leaves br-int over Geneve VNI 2 towards 192.0.2.12 with the client IP as source.
func TestP1IngressNode(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.2.5"))
	out := w.trace(t, w.ex, synToNodePort, "trk,new", "trk,new,dnat")
	acts := datapathActions(out)
	require.Len(t, acts, 3, out)
	require.True(t, strings.HasPrefix(acts[0], "ct(zone=64256,nat),recirc("), out)
	require.Contains(t, acts[1], "ct(commit,zone=64256,label="+clientMACLabel+"/0xffffffffffff,nat(dst=10.244.2.5:8080)),recirc(")
	// br-int routes it to node2's pod CIDR over Geneve with VNI 2; the client IP stays the source.
	require.Contains(t, out, "60. ip,reg0=0x2/0xf,nw_dst=10.244.2.0/24", out)
	require.Contains(t, out, "set_field:192.0.2.12->tun_dst", out)
	require.Contains(t, out, "set_field:0x2->tun_id", out)
	require.Contains(t, out, "nw_src=198.51.100.10,nw_dst=10.244.2.5", "the client IP stays the source")
}

// P1, ingress node, the same through the LoadBalancer IP.
func TestP1IngressNodeLoadBalancerIP(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.2.5"))
	flow := strings.Replace(strings.Replace(synToNodePort, "nw_dst=192.0.2.11", "nw_dst=203.0.113.100", 1), "tp_dst=30080", "tp_dst=80", 1)
	acts := datapathActions(w.trace(t, w.ex, flow, "trk,new", "trk,new,dnat"))
	require.Len(t, acts, 3)
	require.Contains(t, acts[1], "nat(dst=10.244.2.5:8080)")
}

// P1, backend node: the tunnelled SYN is committed in the pod zone with origin "tunnel" and the
// ingress node in ct_label, then delivered to the pod; the pod's reply goes back over Geneve VNI 3
// to the ingress node.
func TestP1BackendNode(t *testing.T) {
	w := newNode(t, "node2", "10.244.2.5")
	in := "in_port=2,tun_id=2,tun_src=192.0.2.11,tun_dst=192.0.2.12,tcp,nw_src=198.51.100.10,nw_dst=10.244.2.5,tp_src=40000,tp_dst=8080,tcp_flags=syn"
	acts := datapathActions(w.trace(t, w.in, in, "trk,new"))
	require.Len(t, acts, 2)
	require.Contains(t, acts[0], "set(eth(src=0a:58:0a:f4:02:01,dst=0a:58:0a:f4:02:05))")
	require.Contains(t, acts[0], "ct(zone=64257),recirc(")
	require.Contains(t, acts[1], "ct(commit,zone=64257,mark=0x2/0xf,label="+ingressNodeLabel+"/0xffffffff)")

	reply := "in_port=3,dl_src=" + flows.GatewayMAC(netip.MustParseAddr("10.244.2.5")).String() +
		",tcp,nw_src=10.244.2.5,nw_dst=198.51.100.10,tp_src=8080,tp_dst=40000,tcp_flags=syn|ack,ct_mark=0x2,ct_label=" + ingressNodeOnNode2Lbl
	out := w.trace(t, w.in, reply, "trk,est,rpl")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, out, "move:NXM_NX_CT_LABEL[0..31]->NXM_NX_TUN_IPV4_DST[]", out)
	require.Contains(t, out, "set_field:0x3->tun_id", out)
	require.Contains(t, out, "tun_dst=192.0.2.11", out)
}

// P1, ingress node, reply: from Geneve VNI 3 to br-ex, un-DNAT, to the client's MAC from br-ex's MAC.
func TestP1IngressNodeReply(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.2.5"))
	in := "in_port=2,tun_id=3,tun_src=192.0.2.12,tun_dst=192.0.2.11,tcp,nw_src=10.244.2.5,nw_dst=198.51.100.10,tp_src=8080,tp_dst=40000,tcp_flags=syn|ack,ct_label=" + clientMACLabel
	out := w.trace(t, w.in, in, "trk,est,rpl")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.True(t, strings.HasPrefix(acts[0], "ct(zone=64256,nat),recirc("), out)
	require.Contains(t, out, "46. ct_state=+est+rpl+trk,ip", out)
	require.Contains(t, out, "move:NXM_NX_CT_LABEL[0..47]->NXM_OF_ETH_DST[]", out)
	require.Contains(t, acts[1], "set(eth(src="+brExMAC, out)
}

// P2: the endpoint is local: committed in the pod zone with origin "br-ex", delivered to the pod;
// its reply goes back to br-ex.
func TestP2LocalEndpoint(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.1.5"))
	out := w.trace(t, w.ex, synToNodePort, "trk,new", "trk,new,dnat", "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 4, out)
	require.Contains(t, acts[1], "nat(dst=10.244.1.5:8080)")
	require.Contains(t, acts[2], "ct(zone=64257),recirc(", out)
	require.Contains(t, acts[3], "ct(commit,zone=64257,mark=0x1/0xf)", out)

	reply := "in_port=3,dl_src=" + flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String() +
		",tcp,nw_src=10.244.1.5,nw_dst=198.51.100.10,tp_src=8080,tp_dst=40000,tcp_flags=syn|ack,ct_mark=0x1,ct_label=" + clientMACLabel
	out = w.trace(t, w.in, reply, "trk,est,rpl", "trk,est,rpl")
	acts = datapathActions(out)
	require.Len(t, acts, 3, out)
	require.True(t, strings.HasPrefix(acts[1], "ct(zone=64256,nat),recirc("), out)
	require.Contains(t, out, "46. ct_state=+est+rpl+trk,ip", out)
	require.Contains(t, acts[2], "set(eth(src="+brExMAC, out)
}

// C16 (docs/field-cases.md#c16) / P5: the SYN-ACK of the host's own connection from local port
// 30080 is not a new Service connection: it goes to the host (LOCAL), never to the group.
func TestHostConnectionOnNodePortGoesToHost(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.2.5"))
	flow := strings.Replace(synToNodePort, "tcp_flags=syn", "tcp_flags=syn|ack", 1)
	for _, ct := range []string{"trk,inv", "trk,new"} {
		out := w.trace(t, w.ex, flow, ct)
		acts := datapathActions(out)
		require.Len(t, acts, 2, out)
		require.NotContains(t, out, "group:", ct)
		require.Contains(t, out, "LOCAL", ct)
	}
}

// A packet to an address or port that is not an entry point is the host's (P5).
func TestNonEntryPointGoesToHost(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.2.5"))
	flow := strings.Replace(synToNodePort, "tp_dst=30080", "tp_dst=22", 1)
	out := w.trace(t, w.ex, flow)
	acts := datapathActions(out)
	require.Len(t, acts, 1, out)
	require.NotContains(t, out, "ct(")
	require.Contains(t, out, "LOCAL")
}

// No endpoints: the select group has no bucket; the SYN is dropped and nothing is committed.
func TestNoEndpointsDrops(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web())
	out := w.trace(t, w.ex, synToNodePort, "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Equal(t, "drop", acts[1], out)
}

// Only nodes may tunnel (br-int): Geneve from a source that is not a known node's InternalIP is
// dropped for every VNI; from a known node each VNI goes where it belongs.
func TestTunnelOnlyFromNodes(t *testing.T) {
	w := newNode(t, "node2", "10.244.2.5")
	for _, vni := range []string{"1", "2", "3", "7"} {
		in := "in_port=2,tun_id=" + vni + ",tun_src=198.51.100.66,tun_dst=192.0.2.12,tcp,nw_src=198.51.100.66,nw_dst=10.244.2.5,tp_src=40000,tp_dst=8080,tcp_flags=syn"
		out := w.trace(t, w.in, in)
		acts := datapathActions(out)
		require.Equal(t, []string{"drop"}, acts, "VNI %s from an outside host: %s", vni, out)
		require.Contains(t, out, "0. in_port=2, priority 10", "the counted tunnel drop flow")
	}
	// From node1: VNI 1 (pod to pod) is delivered to the pod without a ZonePod commit, VNI 2
	// (service) through IntPodIngressCT, VNI 3 (service reply) to br-ex, an unknown VNI dropped.
	base := "in_port=2,tun_src=192.0.2.11,tun_dst=192.0.2.12,tcp,nw_src=10.244.1.7,nw_dst=10.244.2.5,tp_src=40000,tp_dst=8080,tcp_flags=syn,tun_id="
	acts := datapathActions(w.trace(t, w.in, base+"1"))
	require.Len(t, acts, 1)
	require.NotContains(t, acts[0], "ct(")
	require.NotEqual(t, "drop", acts[0])
	acts = datapathActions(w.trace(t, w.in, base+"2", "trk,new"))
	require.Len(t, acts, 2)
	require.Contains(t, acts[1], "ct(commit,zone=64257,mark=0x2/0xf")
	out := w.trace(t, w.in, base+"3")
	require.Contains(t, out, "output:1", out)
	require.Equal(t, []string{"drop"}, datapathActions(w.trace(t, w.in, base+"9")))
}

// A tunnel packet never changes the state of an existing connection: an established one of the
// same origin is delivered without a commit (ct_label keeps the ingress node recorded by the
// first packet), one whose connection came from br-ex, or that conntrack finds invalid, is dropped.
func TestTunnelPacketDoesNotRewriteConnection(t *testing.T) {
	w := newNode(t, "node2", "10.244.2.5")
	// A packet of an existing connection arrives by the tunnel.
	in := "in_port=2,tun_id=2,tun_src=192.0.2.11,tun_dst=192.0.2.12,tcp,nw_src=198.51.100.10,nw_dst=10.244.2.5,tp_src=40000,tp_dst=8080,tcp_flags=ack"
	out := w.trace(t, w.in, in, "trk,est")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.NotContains(t, out, "ct(commit", "an established connection is not committed again")
	require.Equal(t, "drop", acts[1], "ct_mark 0 (not a tunnel connection): dropped: %s", out)
	out = w.trace(t, w.in, in+",ct_mark=0x2", "trk,est")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.NotContains(t, out, "ct(commit", out)
	require.NotEqual(t, "drop", acts[1], out)
	require.Contains(t, out, "output:NXM_NX_REG1[]", out)
	out = w.trace(t, w.in, in, "trk,inv")
	require.Equal(t, "drop", datapathActions(out)[1], out)
}

// Only nodes may tunnel (br-ex): Geneve to this node from a known node goes to the host (where the
// datapath decapsulates it), from anywhere else it is dropped before the host sees it.
func TestTunnelUnderlayOnlyFromNodes(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5")
	geneve := "in_port=1,udp,dl_src=" + clientMAC + ",dl_dst=" + brExMAC + ",nw_dst=192.0.2.11,udp_src=50000,udp_dst=6081,nw_ttl=64,nw_src="
	out := w.trace(t, w.ex, geneve+"198.51.100.66")
	require.Equal(t, []string{"drop"}, datapathActions(out), out)
	require.Contains(t, out, "priority 600", out)
	out = w.trace(t, w.ex, geneve+"192.0.2.12")
	require.Contains(t, out, "priority 610", out)
	require.Contains(t, out, "LOCAL", out)
}

// C32 (docs/field-cases.md#c32): with loadBalancerSourceRanges 198.51.100.10/32, a SYN to the
// LoadBalancer IP from 198.51.100.10 is DNATed; from 198.51.100.11 it is dropped before any
// commit; an established connection of 198.51.100.11 continues; the NodePort is not filtered.
func TestSourceRangesOnLoadBalancerIP(t *testing.T) {
	sp := web("10.244.2.5")
	sp.FilterSources = true
	sp.SourceRanges = []netip.Prefix{netip.MustParsePrefix("198.51.100.10/32")}
	w := newNode(t, "node1", "10.244.1.5", sp)
	toLB := strings.Replace(strings.Replace(synToNodePort, "nw_dst=192.0.2.11", "nw_dst=203.0.113.100", 1), "tp_dst=30080", "tp_dst=80", 1)
	from11 := func(f string) string { return strings.Replace(f, "nw_src=198.51.100.10", "nw_src=198.51.100.11", 1) }

	acts := datapathActions(w.trace(t, w.ex, toLB, "trk,new", "trk,new,dnat"))
	require.Len(t, acts, 3)
	require.Contains(t, acts[1], "nat(dst=10.244.2.5:8080)")

	out := w.trace(t, w.ex, from11(toLB), "trk,new")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Equal(t, "drop", acts[1], out)
	require.NotContains(t, out, "commit", "nothing is committed for a refused client")
	require.Contains(t, out, "priority 95", "dropped by the source-range deny flow")

	est := strings.Replace(from11(toLB), "tcp_flags=syn", "tcp_flags=ack", 1)
	out = w.trace(t, w.ex, est, "trk,est")
	require.Contains(t, out, "41. ct_state=+est+trk,ip, priority 200", "established connections are not filtered")
	require.NotContains(t, out, "priority 95", out)

	acts = datapathActions(w.trace(t, w.ex, from11(synToNodePort), "trk,new", "trk,new,dnat"))
	require.Len(t, acts, 3, "NodePorts are not filtered")
	require.Contains(t, acts[1], "nat(dst=10.244.2.5:8080)")
}

// ICMP and fragments (docs/security.md "ICMP and fragments").

func dns(eps ...string) flows.ServicePort {
	sp := flows.ServicePort{Namespace: "demo", Name: "dns", PortName: "dns", Protocol: flows.UDP, Port: 53, NodePort: 31053}
	for _, e := range eps {
		sp.Endpoints = append(sp.Endpoints, flows.Endpoint{IP: netip.MustParseAddr(e), Port: 8080})
	}
	return sp
}

// P1 backend node: the pod's ICMP port unreachable about a connection that came by tunnel is
// +rel in ZonePod with the connection's mark and label: it goes back over Geneve VNI 3 to the
// ingress node, like a reply.
func TestICMPErrorFromRemoteEndpointTunnelledBack(t *testing.T) {
	w := newNode(t, "node2", "10.244.2.5")
	icmp := "in_port=3,dl_src=" + flows.GatewayMAC(netip.MustParseAddr("10.244.2.5")).String() +
		",icmp,icmp_type=3,icmp_code=3,nw_src=10.244.2.5,nw_dst=198.51.100.10,ct_mark=0x2,ct_label=" + ingressNodeOnNode2Lbl
	out := w.trace(t, w.in, icmp, "trk,rel")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, out, "50. ct_state=+rel+trk,ct_mark=0x2/0xf,ip", out)
	require.Contains(t, out, "set_field:0x3->tun_id", out)
	require.Contains(t, out, "tun_dst=192.0.2.11", out)
	// Without the connection's mark (not one of ours) it is routed like any pod packet: the
	// client address is no pod CIDR, dropped.
	out = w.trace(t, w.in, strings.Replace(icmp, "ct_mark=0x2", "ct_mark=0", 1), "trk,rel")
	require.Equal(t, "drop", datapathActions(out)[1], out)
}

// P1 ingress node: the endpoint's ICMP error arrives by VNI 3, ct(nat) finds it +rel and
// un-NATs it; it leaves the uplink to the client's MAC (ct_label) from br-ex's MAC.
func TestICMPErrorFromRemoteEndpointToClient(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", dns("10.244.2.5"))
	in := "in_port=2,tun_id=3,tun_src=192.0.2.12,tun_dst=192.0.2.11,icmp,icmp_type=3,icmp_code=3,nw_src=10.244.2.5,nw_dst=198.51.100.10,ct_label=" + clientMACLabel
	out := w.trace(t, w.in, in, "trk,rel")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.True(t, strings.HasPrefix(acts[0], "ct(zone=64256,nat),recirc("), out)
	require.Contains(t, out, "46. ct_state=+rel+trk,ip", out)
	require.Contains(t, out, "move:NXM_NX_CT_LABEL[0..47]->NXM_OF_ETH_DST[]", out)
	require.Contains(t, acts[len(acts)-1], "set(eth(src="+brExMAC, out)
	// Not related to a ZoneService connection: dropped, never sent out of the uplink.
	out = w.trace(t, w.in, in, "trk,new")
	require.Equal(t, "drop", datapathActions(out)[1], out)
}

// P2: the local endpoint's ICMP error (+rel, origin br-ex) goes to br-ex and out to the client.
func TestICMPErrorFromLocalEndpointToClient(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", dns("10.244.1.5"))
	icmp := "in_port=3,dl_src=" + flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String() +
		",icmp,icmp_type=3,icmp_code=3,nw_src=10.244.1.5,nw_dst=198.51.100.10,ct_mark=0x1,ct_label=" + clientMACLabel
	out := w.trace(t, w.in, icmp, "trk,rel", "trk,rel")
	acts := datapathActions(out)
	require.Len(t, acts, 3, out)
	require.True(t, strings.HasPrefix(acts[1], "ct(zone=64256,nat),recirc("), out)
	require.Contains(t, out, "46. ct_state=+rel+trk,ip", out)
	require.Contains(t, out, "move:NXM_NX_CT_LABEL[0..47]->NXM_OF_ETH_DST[]", out)
	require.Contains(t, acts[2], "set(eth(src="+brExMAC, out)
}

// Inbound: a router's "fragmentation needed" to the NodePort address goes through
// ct(zone=ZoneService,nat); +rel (about a DNATed connection) continues to br-int; any other ICMP
// error (+inv: about no connection of ours) and a ping go to the host.
func TestICMPFragNeededToEndpoint(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.2.5"))
	icmp := "in_port=1,dl_src=" + clientMAC + ",dl_dst=" + brExMAC + ",icmp,icmp_type=3,icmp_code=4,nw_src=192.0.2.1,nw_dst=192.0.2.11,nw_ttl=64"
	out := w.trace(t, w.ex, icmp, "trk,rel")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.True(t, strings.HasPrefix(acts[0], "ct(zone=64256,nat),recirc("), out)
	require.Contains(t, out, "41. ct_state=+rel+trk,ip", out)
	require.Contains(t, out, "output:2", out)
	require.NotContains(t, acts[1], "LOCAL", out)
	for _, ct := range []string{"trk,inv", "trk,new"} {
		out = w.trace(t, w.ex, icmp, ct)
		require.Contains(t, out, "41. priority 0", ct)
		require.Contains(t, out, "LOCAL", ct)
	}
	ping := strings.Replace(icmp, "icmp_type=3,icmp_code=4", "icmp_type=8,icmp_code=0", 1)
	out = w.trace(t, w.ex, ping)
	require.Len(t, datapathActions(out), 1, out)
	require.NotContains(t, out, "ct(", out)
	require.Contains(t, out, "LOCAL", out)
	// br-int: the un-DNATed error (destination the endpoint) goes over Geneve VNI 2 to its node.
	out = w.trace(t, w.in, "in_port=1,icmp,icmp_type=3,icmp_code=4,nw_src=192.0.2.1,nw_dst=10.244.2.5")
	require.Contains(t, out, "set_field:0x2->tun_id", out)
	require.Contains(t, out, "set_field:192.0.2.12->tun_dst", out)
	// Backend node: +rel of a tunnel connection is delivered to the pod.
	w2 := newNode(t, "node2", "10.244.2.5")
	out = w2.trace(t, w2.in, "in_port=2,tun_id=2,tun_src=192.0.2.11,tun_dst=192.0.2.12,icmp,icmp_type=3,icmp_code=4,nw_src=192.0.2.1,nw_dst=10.244.2.5,ct_mark=0x2", "trk,rel")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, out, "output:NXM_NX_REG1[]", out)
	require.NotEqual(t, "drop", acts[1], out)
}

// Fragments: every fragment of UDP to an address with a UDP entry point goes through
// ct(zone=ZoneService,nat); a later fragment (no UDP ports) of an established connection then
// goes to br-int. UDP fragments to other addresses, and TCP fragments, go to the host untouched.
func TestUDPFragmentsGoThroughConntrack(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", dns("10.244.2.5"))
	frag := "in_port=1,dl_src=" + clientMAC + ",dl_dst=" + brExMAC + ",udp,nw_src=198.51.100.10,nw_dst=192.0.2.11,nw_frag=later,nw_ttl=64"
	out := w.trace(t, w.ex, frag, "trk,est")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.True(t, strings.HasPrefix(acts[0], "ct(zone=64256,nat),recirc("), out)
	require.Contains(t, out, "nw_frag=yes", out)
	require.Contains(t, out, "41. ct_state=+est+trk,ip", out)
	for _, other := range []string{strings.Replace(frag, "nw_dst=192.0.2.11", "nw_dst=192.0.2.99", 1), strings.Replace(frag, "udp,", "tcp,", 1)} {
		out = w.trace(t, w.ex, other)
		require.Len(t, datapathActions(out), 1, out)
		require.NotContains(t, out, "ct(", out)
		require.Contains(t, out, "LOCAL", out)
	}
	// A node without UDP entry points has no fragment flow.
	w = newNode(t, "node1", "10.244.1.5", web("10.244.2.5"))
	out = w.trace(t, w.ex, frag)
	require.NotContains(t, out, "ct(", out)
}
