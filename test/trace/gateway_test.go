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

// Host connectivity (docs/pipeline.md "Host connectivity"): node1 with its gateway port
// srcip-gw0 (a dummy port here, ofport gwPort) next to the pod.
const (
	gwPort = ovstest.NodeIntPod + 1
	gwMAC  = "02:00:0a:f4:01:01"
)

func newGatewayNode(t *testing.T) *world {
	sb := ovstest.StartDummy(t)
	sb.AddNodeBridges(t, "pod", "srcip-gw0")
	st := flows.NewState("node1",
		flows.Ports{ExUplink: exUplink, ExPatch: exPatch, IntPatch: intPatch, IntTunnel: intTunnel, ExMAC: mac(brExMAC),
			IntGateway: gwPort, GatewayMAC: mac(gwMAC)},
		[]netip.Addr{netip.MustParseAddr("192.0.2.11")},
		[]flows.Node{
			{Name: "node1", InternalIP: netip.MustParseAddr("192.0.2.11"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}},
			{Name: "node2", InternalIP: netip.MustParseAddr("192.0.2.12"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
		},
		[]flows.Pod{{Namespace: "demo", Name: "echo", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")},
			MAC: flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")), OFPort: podPort}},
		nil)
	d, err := flows.Build(st)
	require.NoError(t, err)
	w := &world{sb: sb, st: st, ctx: context.Background(),
		ex: ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex")),
		in: ofctl.NewOpenFlow("br-int", sb.MgmtTarget("br-int"))}
	sb.LoadDesired(t, d)
	return w
}

// The host opens a connection to a pod on node2 (e.g. kube-proxy DNATed a pod's ClusterIP
// connection there): committed in ZonePod with OriginGateway (4) and sent with VNI 1 to node2.
// node2's answer comes back with VNI 1 and, +est+rpl with that mark, goes out srcip-gw0 to the
// gateway port's MAC.
func TestGatewayHostToRemotePodAndReply(t *testing.T) {
	w := newGatewayNode(t)
	syn := "in_port=4,dl_dst=0a:58:0a:f4:01:01,tcp,nw_src=10.244.1.5,nw_dst=10.244.2.5,tp_src=40000,tp_dst=8080,tcp_flags=syn"
	out := w.trace(t, w.in, syn, "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, acts[0], "ct(zone=64257),recirc(", out)
	require.Contains(t, acts[1], "ct(commit,zone=64257,mark=0x4/0xf)", out)
	require.Contains(t, out, "set_field:0x1->tun_id", out)
	require.Contains(t, out, "set_field:192.0.2.12->tun_dst", out)

	reply := "in_port=2,tun_id=1,tun_src=192.0.2.12,tun_dst=192.0.2.11,tcp,nw_src=10.244.2.5,nw_dst=10.244.1.5,tp_src=8080,tp_dst=40000,tcp_flags=syn|ack,ct_mark=0x4"
	out = w.trace(t, w.in, reply, "trk,est,rpl")
	acts = datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, acts[1], "dst="+gwMAC, out)
	require.Contains(t, out, "output:4", "output to srcip-gw0, not the pod")
}

// Without the mark, the same tunnelled packet is plain pod traffic: delivered to the pod.
func TestGatewayTunnelPodTrafficStillDelivered(t *testing.T) {
	w := newGatewayNode(t)
	pkt := "in_port=2,tun_id=1,tun_src=192.0.2.12,tun_dst=192.0.2.11,tcp,nw_src=10.244.2.5,nw_dst=10.244.1.5,tp_src=8080,tp_dst=40000,tcp_flags=syn"
	out := w.trace(t, w.in, pkt, "trk,new")
	acts := datapathActions(out)
	require.Contains(t, acts[len(acts)-1], "dst=0a:58:0a:f4:01:05", "delivered to the pod: %s", out)
	require.NotContains(t, out, "output:4", out)
}

// A pod's packet for something that is not a pod (the outside world) is committed (mark 0) and
// handed to the host through srcip-gw0; a packet from the pod's port with the gateway address as
// source is dropped by the spoof guard.
func TestGatewayPodToOutsideAndSpoof(t *testing.T) {
	w := newGatewayNode(t)
	podMAC := flows.GatewayMAC(netip.MustParseAddr("10.244.1.5")).String()
	syn := "in_port=3,dl_src=" + podMAC + ",tcp,nw_src=10.244.1.5,nw_dst=198.51.100.10,tp_src=40000,tp_dst=80,tcp_flags=syn"
	out := w.trace(t, w.in, syn, "trk,new")
	acts := datapathActions(out)
	require.Len(t, acts, 2, out)
	require.Contains(t, acts[1], "ct(commit,zone=64257)", out)
	require.Contains(t, acts[1], "dst="+gwMAC, out)
	require.Contains(t, out, "output:4", out)

	spoof := strings.Replace(syn, "nw_src=10.244.1.5", "nw_src=10.244.1.1", 1)
	out = w.trace(t, w.in, spoof)
	require.Equal(t, []string{"drop"}, datapathActions(out), out)
}

// node2's host reaches node1's pod from its InternalIP over VNI 1: node1 commits the connection
// with OriginNode (mark 8), so the pod's replies go back over Geneve to node2. The same packet
// from node2's InternalIP to an address that is not one of node1's pods (node2 has no business
// sending it here) leaves no conntrack entry: no commit, and nothing goes out srcip-gw0 or back.
func TestNodeHostToPodCommitsOnlyLocalPods(t *testing.T) {
	w := newGatewayNode(t)
	syn := "in_port=2,tun_id=1,tun_src=192.0.2.12,tun_dst=192.0.2.11,tcp,nw_src=192.0.2.12,nw_dst=10.244.1.5,tp_src=40000,tp_dst=8080,tcp_flags=syn"
	out := w.trace(t, w.in, syn, "trk,new")
	require.Contains(t, out, "ct(commit,zone=64257,mark=0x8/0xf", out)
	acts := datapathActions(out)
	require.Contains(t, acts[len(acts)-1], "dst=0a:58:0a:f4:01:05", "delivered to the pod: %s", out)

	for _, dst := range []string{"10.244.2.5", "198.51.100.10", "192.0.2.11"} {
		stray := strings.Replace(syn, "nw_dst=10.244.1.5", "nw_dst="+dst, 1)
		out := w.trace(t, w.in, stray, "trk,new")
		require.NotContains(t, out, "commit", "%s: committed: %s", dst, out)
		require.NotContains(t, out, "output:4", "%s: handed to the host: %s", dst, out)
		require.NotContains(t, out, "output:2", "%s: sent back into the tunnel: %s", dst, out)
	}
}
