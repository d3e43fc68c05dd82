// Package trace checks the pipeline of package flows with ofproto/trace on a dummy-datapath
// ovs-vswitchd: the real OVS classifier, no packets and no network namespaces. Each case names the
// path of docs/pipeline.md it covers and asserts on the "Datapath actions" OVS computes.
package trace

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"strconv"
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
		{Name: "node3", InternalIP: netip.MustParseAddr("192.0.2.13"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}},
		// node4's Ready condition is Unknown (agent.ConvertNode): not live.
		{Name: "node4", InternalIP: netip.MustParseAddr("192.0.2.14"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.4.0/24")}, Down: true},
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

// datapathActions returns every "Datapath actions:" line of a trace, one per recirculation
// (ofctl.ParseTrace).
func datapathActions(out string) []string {
	return ofctl.ParseTrace(out, nil).DatapathActions
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

// No endpoints: the SYN goes to the host untouched (kube-proxy rejects it there) and nothing is
// committed.
func TestNoEndpointsToHost(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web())
	out := w.trace(t, w.ex, synToNodePort, "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.NotContains(t, out, "commit", out)
	require.NotContains(t, acts[1], "ct(", out)
	require.Contains(t, out, "LOCAL", out)
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

// A tunnel packet never changes the state of an existing connection whose ingress node is live: a
// packet of an established connection is delivered without a commit, whatever its origin (ct_mark
// and ct_label keep what the first packet recorded); one that conntrack finds invalid is dropped.
// Only a connection recorded as entering through a node that is no longer live is re-pointed.
func TestTunnelPacketDoesNotRewriteConnection(t *testing.T) {
	w := newNode(t, "node2", "10.244.2.5")
	// A packet of an existing connection arrives by the tunnel.
	in := "in_port=2,tun_id=2,tun_src=192.0.2.11,tun_dst=192.0.2.12,tcp,nw_src=198.51.100.10,nw_dst=10.244.2.5,tp_src=40000,tp_dst=8080,tcp_flags=ack"
	out := w.trace(t, w.in, in, "trk,est")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.NotContains(t, out, "ct(commit", "an established connection is not committed again")
	require.NotEqual(t, "drop", acts[1], "a connection of the other origin (ct_mark 0x1) is delivered, not re-committed: %s", out)
	// Recorded as entering through node3 (live): a packet from node1 changes nothing.
	out = w.trace(t, w.in, in+",ct_mark=0x2,ct_label=0xc000020d", "trk,est")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.NotContains(t, out, "ct(commit", out)
	require.NotEqual(t, "drop", acts[1], out)
	require.Contains(t, out, "output:NXM_NX_REG1[]", out)
	// Recorded as entering through a node that is not live (node4, Ready=Unknown; 192.0.2.99, no
	// such Node any more): the packet re-points the connection to the node it came from (node1).
	for _, label := range []string{"0xc000020e", "0xc0000263"} {
		out = w.trace(t, w.in, in+",ct_mark=0x2,ct_label="+label, "trk,est")
		acts = datapathActions(out)
		require.Len(t, acts, 2, out)
		require.Contains(t, acts[1], "ct(commit,zone=64257,label=0xc000020b/0xffffffff)", out)
	}
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
	out = w.trace(t, w.in, "in_port=1,dl_dst="+brExMAC+",icmp,icmp_type=3,icmp_code=4,nw_src=192.0.2.1,nw_dst=10.244.2.5")
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

// C31 (docs/field-cases.md#c31): a segment of a DNATed connection that conntrack holds invalid
// (far out of window) comes out of ct(nat) translated, ct_state +inv+trk+dnat. ExServiceCT sends it
// on through the NAT to br-int, never to the host (LOCAL); the endpoint's node (here node1 itself,
// P2) finds it invalid in ZonePod too and IntPodIngressCT drops it. ofproto/trace refuses to model
// that state (--ct-next allows only "trk" next to "inv"), so this case runs the dummy datapath's
// real conntrack (docs/lab-facts.md#fact-5) on injected frames: the connection's handshake, then an
// ACK with sequence and acknowledgment numbers 2^31 away. The host's own SYN-ACK (+inv without
// +dnat, C16) still goes to LOCAL (TestHostConnectionOnNodePortGoesToHost).
func TestC31InvalidDNATedSegmentDropped(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.1.5"))
	ack := strings.Replace(synToNodePort, "tcp_flags=syn", "tcp_flags=ack", 1)
	_, err := w.ex.Trace(w.ctx, ack, []string{"trk,inv,dnat"})
	require.ErrorContains(t, err, `only "trk" may also be set`, "ofproto/trace now models +inv+dnat: trace it instead")
	// Nor the reply side (ExServiceReply's +inv+snat flow; covered by the lab test
	// TestEntryRouteChangeContinuesOnNewIngressNode).
	_, err = w.in.Trace(w.ctx, "in_port=2,tun_id=3,tun_src=192.0.2.12,tun_dst=192.0.2.11,tcp,nw_src=10.244.2.5,nw_dst=198.51.100.10,tp_src=8080,tp_dst=40000,tcp_flags=ack", []string{"trk,inv,snat"})
	require.ErrorContains(t, err, `only "trk" may also be set`, "ofproto/trace now models +inv+snat: trace it instead")

	// A real handshake through P2 (local endpoint 10.244.1.5 on the dummy port "pod"), then the
	// out-of-window ACK.
	client, node, pod := netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("10.244.1.5")
	podMAC, gwMAC := flows.GatewayMAC(pod), flows.GatewayMAC(netip.MustParseAddr("10.244.1.1"))
	const syn, synack, ackf = 0x02, 0x12, 0x10
	for _, f := range []struct{ port, frame string }{
		{"eth0", tcpFrame(mac(clientMAC), mac(brExMAC), client, node, 40000, 30080, 1000, 0, syn)},
		{"pod", tcpFrame(podMAC, gwMAC, pod, client, 8080, 40000, 5000, 1001, synack)},
		{"eth0", tcpFrame(mac(clientMAC), mac(brExMAC), client, node, 40000, 30080, 1001, 5001, ackf)},
		{"eth0", tcpFrame(mac(clientMAC), mac(brExMAC), client, node, 40000, 30080, 1001+1<<31, 5001+1<<31, ackf)},
	} {
		w.sb.Run(t, "ovs-appctl", "netdev-dummy/receive", f.port, f.frame)
	}
	packets := func(match string) string {
		return flowPackets(t, w.sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br-ex", "table=41"), match)
	}
	require.Equal(t, "1", packets("tcp_flags=+syn-ack actions=group:"), "the SYN did not reach the group")
	require.Equal(t, "1", packets("ct_state=+est+trk,ip actions=output:2"), "the handshake's ACK was not established")
	require.Equal(t, "1", packets("ct_state=+inv+trk+dnat,ip actions=output:2"), "the invalid segment did not go on through the NAT")
	require.Equal(t, "0", packets("priority=0 actions=LOCAL"), "a packet of the DNATed connection reached the host")
	require.Equal(t, "1", flowPackets(t, w.sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "dump-flows", "br-int", "table=66"),
		"priority=0 actions=drop"), "the endpoint's node did not drop the invalid segment")
}

// flowPackets returns n_packets of the one flow of a dump-flows output that contains match.
func flowPackets(t *testing.T, out, match string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f, ok, err := ofctl.ParseFlowLine(l); ok && err == nil && strings.Contains(l, match) {
			return strconv.FormatUint(f.Packets, 10)
		}
	}
	t.Fatalf("no flow %q in:\n%s", match, out)
	return ""
}

// tcpFrame renders an Ethernet/IPv4/TCP frame (no payload, valid checksums) as hex for
// netdev-dummy/receive.
func tcpFrame(smac, dmac net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, seq, ack uint32, flags byte) string {
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], ack)
	tcp[12], tcp[13] = 5<<4, flags
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	s4, d4 := src.As4(), dst.As4()
	pseudo := append(append(append([]byte{}, s4[:]...), d4[:]...), 0, 6, 0, byte(len(tcp)))
	binary.BigEndian.PutUint16(tcp[16:], inetChecksum(append(pseudo, tcp...)))
	ip := []byte{0x45, 0, 0, byte(20 + len(tcp)), 0, 1, 0, 0, 64, 6, 0, 0}
	ip = append(append(ip, s4[:]...), d4[:]...)
	binary.BigEndian.PutUint16(ip[10:], inetChecksum(ip))
	frame := append(append(append([]byte{}, dmac...), smac...), 0x08, 0x00)
	return hex.EncodeToString(append(append(frame, ip...), tcp...))
}

func inetChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// Issue 7 point 6: a port of br-ex the agent does not own (a VM tap) keeps the installer's NORMAL
// forwarding, and so do frames from the uplink for its MAC, even IP to an entry point: only
// frames addressed to br-ex's MAC are the node's to DNAT. Frames to br-ex's MAC from that port go
// straight to the host, never flooded.
func TestForeignPortKeepsNormal(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.2.5"))
	w.sb.Vsctl(t, "add-port", "br-ex", "vm0", "--", "set", "interface", "vm0", "type=dummy", "ofport_request=7")
	const vmMAC = "02:00:00:00:00:50"
	for name, flow := range map[string]string{
		"vm arp":                        "in_port=7,arp,dl_src=" + vmMAC + ",dl_dst=ff:ff:ff:ff:ff:ff,arp_op=1,arp_spa=192.0.2.50,arp_tpa=192.0.2.1",
		"vm to the outside":             "in_port=7,tcp,dl_src=" + vmMAC + ",dl_dst=02:00:00:00:00:01,nw_src=192.0.2.50,nw_dst=198.51.100.10,tp_src=40000,tp_dst=80",
		"uplink to the vm":              "in_port=1,tcp,dl_src=02:00:00:00:00:01,dl_dst=" + vmMAC + ",nw_src=198.51.100.10,nw_dst=192.0.2.50,tp_src=80,tp_dst=40000",
		"uplink, entry point, vm's MAC": strings.Replace(synToNodePort, "dl_dst="+brExMAC, "dl_dst="+vmMAC, 1),
	} {
		out := w.trace(t, w.ex, flow)
		require.Contains(t, out, "0. priority 0", name+": "+out)
		require.Contains(t, out, "NORMAL", name+": "+out)
		require.NotContains(t, out, "ct(", name+": "+out)
		require.NotEqual(t, []string{"drop"}, datapathActions(out), name+": "+out)
	}
	out := w.trace(t, w.ex, "in_port=7,tcp,dl_src="+vmMAC+",dl_dst="+brExMAC+",nw_src=192.0.2.50,nw_dst=192.0.2.11,tp_src=40000,tp_dst=22")
	require.Contains(t, out, "0. dl_dst="+brExMAC+", priority 10", out)
	require.NotContains(t, out, "NORMAL", out)
	require.Contains(t, out, "LOCAL", out)
}

// Frames NORMAL floods from br-ex into the patch port (broadcasts, unknown unicast of other ports)
// do not enter br-int's pipeline: only frames to br-ex's MAC, which every packet of the Service
// tables carries, are taken from the patch.
func TestFloodedFrameFromPatchDropped(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5")
	for _, dst := range []string{"ff:ff:ff:ff:ff:ff", "02:00:00:00:00:50"} {
		out := w.trace(t, w.in, "in_port=1,tcp,dl_src=02:00:00:00:00:01,dl_dst="+dst+",nw_src=198.51.100.10,nw_dst=10.244.1.5,tp_src=40000,tp_dst=8080")
		require.Equal(t, []string{"drop"}, datapathActions(out), out)
	}
	out := w.trace(t, w.in, "in_port=1,tcp,dl_src=02:00:00:00:00:01,dl_dst="+brExMAC+",nw_src=198.51.100.10,nw_dst=10.244.1.5,tp_src=40000,tp_dst=8080")
	require.Contains(t, out, "ct(commit,zone=64257", out)
}

// The backend node does not let a packet re-point an established connection whose ingress node
// is live. A SYN that another ingress node sends for the 4-tuple of an established connection
// (invalid in ZonePod, or established) is refused, never committed (committed, it would overwrite
// the connection's ct_label and send its replies there): it goes to the pod's port 0 and the flow
// it learns carries the pod's RST back to its ingress node. A SYN through the recorded ingress node
// is the client's retransmission and is delivered. A valid packet of the connection from another
// ingress node (+est: a route change) is delivered without a commit, so the recorded ingress node
// stays.
func TestBackendInvalidFromOtherIngressRefused(t *testing.T) {
	w := newNode(t, "node2", "10.244.2.5")
	in := "in_port=2,tun_id=2,tun_src=192.0.2.13,tun_dst=192.0.2.12,tcp,nw_src=198.51.100.10,nw_dst=10.244.2.5,tp_src=40000,tp_dst=8080,tcp_flags=syn"
	refused := func(out string) {
		t.Helper()
		acts := datapathActions(out)
		require.Len(t, acts, 2, out)
		require.NotContains(t, out, "ct(commit", out)
		require.Contains(t, out, "learn(table=0", out)
		require.Contains(t, acts[1], "set(tcp(dst=0))", out)
	}
	refused(w.trace(t, w.in, in, "trk,inv"))
	refused(w.trace(t, w.in, in+",ct_mark=0x2,ct_label=0xc000020b", "trk,est"))
	// The same SYN through the recorded node (node3) is a retransmission: delivered as it is.
	out := w.trace(t, w.in, in+",ct_mark=0x2,ct_label=0xc000020d", "trk,est")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.NotContains(t, out, "learn(", out)
	require.NotContains(t, out, "ct(commit", out)
	require.NotEqual(t, "drop", acts[1], out)

	moved := strings.Replace(in, "tcp_flags=syn", "tcp_flags=ack", 1)
	out = w.trace(t, w.in, moved+",ct_mark=0x2,ct_label=0xc000020b", "trk,est")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.NotContains(t, out, "ct(commit", out)
	require.NotEqual(t, "drop", acts[1], out)
}

// A connection this node holds no ZoneService state for (+new without SYN): on an LB IP it is
// picked up - the select group chooses its endpoint, the same on every node - so a connection a
// route change moved here continues; on a node address it goes to the host, whose RST ends it
// (C16: the host's own connections live there).
func TestMidStreamPickedUpOnLBIPOnly(t *testing.T) {
	w := newNode(t, "node1", "10.244.1.5", web("10.244.2.5"))
	ack := strings.Replace(synToNodePort, "tcp_flags=syn", "tcp_flags=ack", 1)
	lb := strings.Replace(strings.Replace(ack, "nw_dst=192.0.2.11", "nw_dst=203.0.113.100", 1), "tp_dst=30080", "tp_dst=80", 1)
	out := w.trace(t, w.ex, lb, "trk,new", "trk,new,dnat")
	acts := datapathActions(out)
	require.Len(t, acts, 3, out)
	require.Regexp(t, `-> using bucket \d+`, out)
	require.Contains(t, acts[1], "nat(dst=10.244.2.5:8080)", out)

	out = w.trace(t, w.ex, ack, "trk,new")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.NotContains(t, out, "group:", out)
	require.Contains(t, out, "41. priority 0", out)
}

// Session affinity on the ingress node: a new connection looks up the client's learned endpoint
// (ExServiceAffinity) and goes there while it is one of the port's; a client without one, or whose
// learned endpoint left the port, goes to the group (hash of ip_src alone), whose bucket learns.
// The learned flows are written by hand here (ofproto/trace does not run learn).
func TestAffinityLearnedEndpoint(t *testing.T) {
	sp := web("10.244.2.5", "10.244.1.5")
	sp.AffinitySeconds = 60
	w := newNode(t, "node1", "10.244.1.5", sp)
	gid := w.st.Services[sp.Key()].GroupID
	// No learned choice: the group, hashing the client IP, and its bucket learns.
	out := w.trace(t, w.ex, synToNodePort, "trk,new")
	require.Contains(t, out, "resubmit(,43)", out)
	require.Contains(t, out, "group:", out)
	require.Contains(t, out, "learn(table=43", out)
	// The client learned 10.244.2.5:8080 (an endpoint of the port): DNAT there, no group.
	learned := func(ip string) {
		a := netip.MustParseAddr(ip).As4()
		w.sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "add-flow", "br-ex",
			"table=43,priority=100,idle_timeout=60,cookie=0x5c21000000000001,ip,reg4="+strconv.FormatUint(uint64(gid), 10)+
				",nw_src=198.51.100.10,actions=load:"+strconv.FormatUint(uint64(binary.BigEndian.Uint32(a[:])), 10)+"->NXM_NX_REG5[],load:8080->NXM_NX_REG6[0..15]")
	}
	learned("10.244.2.5")
	out = w.trace(t, w.ex, synToNodePort, "trk,new")
	require.Contains(t, out, "nat(dst=10.244.2.5:8080)", out)
	require.NotContains(t, out, "group:", out)
	// The learned endpoint left the port (10.244.3.5 is none of its endpoints): the group picks.
	learned("10.244.3.5")
	out = w.trace(t, w.ex, synToNodePort, "trk,new")
	require.Contains(t, out, "group:", out)
	require.NotContains(t, out, "nat(dst=10.244.3.5", out)
}
