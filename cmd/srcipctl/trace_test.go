package main

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
)

// TestTrace loads the pipeline of node1 (one Service port, endpoint on node2) into a dummy-datapath
// OVS and traces a new connection to its NodePort with `srcipctl trace`.
func TestTrace(t *testing.T) {
	sb := ovstest.StartDummy(t)
	sb.AddNodeBridges(t)
	// br-ex's LOCAL MAC, which srcipctl trace reads as the packet's Ethernet destination.
	sb.Vsctl(t, "set", "bridge", "br-ex", "other_config:hwaddr=02:00:c0:00:02:0b")
	mac, _ := net.ParseMAC("02:00:c0:00:02:0b")
	gids := flows.NewGroupIDs()
	sp := flows.ServicePort{Namespace: "demo", Name: "web", PortName: "http", Protocol: flows.TCP, Port: 80, NodePort: 30080,
		Endpoints: []flows.Endpoint{{IP: netip.MustParseAddr("10.244.2.5"), Port: 8080}}}
	sp.GroupID = gids.ID(sp.Key())
	dns := flows.ServicePort{Namespace: "demo", Name: "web", PortName: "dns", Protocol: flows.UDP, Port: 53, NodePort: 30053,
		Endpoints: []flows.Endpoint{{IP: netip.MustParseAddr("10.244.2.5"), Port: 5353}}}
	dns.GroupID = gids.ID(dns.Key())
	// No endpoints: new connections go to the host, whose kube-proxy rejects them.
	empty := flows.ServicePort{Namespace: "demo", Name: "empty", PortName: "http", Protocol: flows.TCP, Port: 80, NodePort: 30090}
	empty.GroupID = gids.ID(empty.Key())
	st := flows.NewState("node1", flows.Ports{ExUplink: 1, ExPatch: 2, IntPatch: 1, IntTunnel: 2, ExMAC: mac},
		[]netip.Addr{netip.MustParseAddr("192.0.2.11")},
		[]flows.Node{
			{Name: "node1", InternalIP: netip.MustParseAddr("192.0.2.11"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}},
			{Name: "node2", InternalIP: netip.MustParseAddr("192.0.2.12"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
		},
		nil, []flows.ServicePort{sp, dns, empty})
	d, err := flows.Build(st)
	require.NoError(t, err)
	sb.LoadDesired(t, d)

	out := run(t, "trace", "--node-rundir", sb.RunDir, "--from", "198.51.100.10:40000", "--to", "192.0.2.11:30080")
	assert.Contains(t, out, "in_port=eth0,", "the uplink found in OVSDB")
	assert.Contains(t, out, "nw_src=198.51.100.10,")
	assert.Contains(t, out, "tcp_src=40000,")
	assert.Contains(t, out, "tcp_flags=syn")
	id := flows.BucketIDs([]netip.AddrPort{netip.MustParseAddrPort("10.244.2.5:8080")})[netip.MustParseAddrPort("10.244.2.5:8080")]
	assert.Contains(t, out, fmt.Sprintf("-> using bucket %d\n", id), "the bucket id is derived from the endpoint")
	assert.Contains(t, out, "dl_dst=02:00:c0:00:02:0b")
	assert.Contains(t, out, "nat(dst=10.244.2.5:8080)")
	assert.Contains(t, out, "cookie 0x5c10", "the Service port's flows are named by their cookie")

	// Without an agent: this node only, with table names and a verdict.
	assert.Contains(t, out, "ExServiceCT", "table names")
	assert.Contains(t, out, "verdict: DNAT to 10.244.2.5:8080, Geneve to 192.0.2.12")
	out = run(t, "trace", "--node-rundir", sb.RunDir, "--from", "198.51.100.10:40000", "--to", "192.0.2.11:30090")
	assert.Contains(t, out, "verdict: rejected at this node br-ex ExServiceCT: no-endpoints")
	out = run(t, "trace", "--node-rundir", sb.RunDir, "--from", "198.51.100.10:40000", "--to", "192.0.2.11:30999")
	assert.Contains(t, out, "verdict: not handled by ovs-srcip")
	// Geneve from an address that is no node's: the tunnel guard's drop reason.
	out = run(t, "flows", "--node-rundir", sb.RunDir)
	assert.Contains(t, out, "ex-base; ExClassifier; drop: tunnel-from-unknown-node")

	out = run(t, "trace", "--node-rundir", sb.RunDir, "--proto", "udp", "--from", "198.51.100.10:40000", "--to", "192.0.2.11:30053")
	assert.Contains(t, out, "nat(dst=10.244.2.5:5353)")

	_, err = newCommandErr(t, "trace", "--node-rundir", sb.RunDir, "--from", "198.51.100.10:40000", "--to", "192.0.2.11:30080", "--proto", "sctp")
	assert.ErrorContains(t, err, "want tcp or udp")

	// No default client: --from is required, with a clear error.
	_, err = newCommandErr(t, "trace", "--node-rundir", sb.RunDir, "--to", "192.0.2.11:30080")
	assert.ErrorIs(t, err, errFromRequired)

	// A second candidate uplink: no guess, --uplink is asked for; given, it is used.
	sb.Run(t, "ovs-vsctl", "--db=unix:"+sb.DBSock, "add-port", "br-ex", "eth1", "--", "set", "interface", "eth1", "type=dummy")
	_, err = newCommandErr(t, "trace", "--node-rundir", sb.RunDir, "--from", "198.51.100.10:40000", "--to", "192.0.2.11:30080")
	assert.ErrorContains(t, err, "2 candidate ports [eth0 eth1]; name it with --uplink")
	out = run(t, "trace", "--node-rundir", sb.RunDir, "--uplink", "eth0", "--from", "198.51.100.10:40000", "--to", "192.0.2.11:30080")
	assert.Contains(t, out, "in_port=eth0,")
	assert.Contains(t, out, "nat(dst=10.244.2.5:8080)")
}

// newCommandErr runs srcipctl and returns its output and error (for failure cases).
func newCommandErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newCommand(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// The packet srcipctl trace builds for an IPv6 client and entry point: tcp6/udp6 with ipv6_src
// and ipv6_dst (IPv4 as before); a client of one family and an entry point of the other is
// refused.
func TestTraceFlowFamilies(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:c0:00:02:0b")
	f, ctNext, err := traceFlow("eth0", mac, "tcp", netip.MustParseAddrPort("[2001:db8:51::10]:40000"), netip.MustParseAddrPort("[2001:db8::11]:30080"))
	require.NoError(t, err)
	assert.Equal(t, "in_port=eth0,tcp6,dl_dst=02:00:c0:00:02:0b,ipv6_src=2001:db8:51::10,ipv6_dst=2001:db8::11,tcp_src=40000,tcp_dst=30080,nw_ttl=64,tcp_flags=syn", f)
	assert.Equal(t, []string{"trk,new", "trk,new,dnat"}, ctNext)
	f, _, err = traceFlow("eth0", mac, "udp", netip.MustParseAddrPort("[2001:db8:51::10]:40000"), netip.MustParseAddrPort("[2001:db8::11]:30053"))
	require.NoError(t, err)
	assert.Equal(t, "in_port=eth0,udp6,dl_dst=02:00:c0:00:02:0b,ipv6_src=2001:db8:51::10,ipv6_dst=2001:db8::11,udp_src=40000,udp_dst=30053,nw_ttl=64", f)
	f, _, err = traceFlow("eth0", mac, "tcp", netip.MustParseAddrPort("198.51.100.10:40000"), netip.MustParseAddrPort("192.0.2.11:30080"))
	require.NoError(t, err)
	assert.Equal(t, "in_port=eth0,tcp,dl_dst=02:00:c0:00:02:0b,nw_src=198.51.100.10,nw_dst=192.0.2.11,tcp_src=40000,tcp_dst=30080,nw_ttl=64,tcp_flags=syn", f)
	_, _, err = traceFlow("eth0", mac, "tcp", netip.MustParseAddrPort("198.51.100.10:40000"), netip.MustParseAddrPort("[2001:db8::11]:30080"))
	assert.ErrorContains(t, err, "client and entry point of one family required")
	_, err = newCommandErr(t, "trace", "--local", "--node-rundir", t.TempDir(), "--from", "[2001:db8:51::10]:40000", "--to", "192.0.2.11:30080")
	assert.ErrorContains(t, err, "client and entry point of one family required")
}

// TestTraceIPv6 is TestTrace for an IPv6 Service port on a dual-stack node1: the NodePort on
// node1's IPv6 address, the endpoint on node2 (over the IPv4 underlay).
func TestTraceIPv6(t *testing.T) {
	sb := ovstest.StartDummy(t)
	sb.AddNodeBridges(t)
	sb.Vsctl(t, "set", "bridge", "br-ex", "other_config:hwaddr=02:00:c0:00:02:0b")
	mac, _ := net.ParseMAC("02:00:c0:00:02:0b")
	gids := flows.NewGroupIDs()
	sp := flows.ServicePort{Namespace: "demo", Name: "web", PortName: "http", Protocol: flows.TCP, Family: flows.IPv6, Port: 80, NodePort: 30080,
		Endpoints: []flows.Endpoint{{IP: netip.MustParseAddr("2001:db8:244:2::5"), Port: 8080}}}
	sp.GroupID = gids.ID(sp.Key())
	dns := flows.ServicePort{Namespace: "demo", Name: "web", PortName: "dns", Protocol: flows.UDP, Family: flows.IPv6, Port: 53, NodePort: 30053,
		Endpoints: []flows.Endpoint{{IP: netip.MustParseAddr("2001:db8:244:2::5"), Port: 5353}}}
	dns.GroupID = gids.ID(dns.Key())
	p := netip.MustParsePrefix
	st := flows.NewState("node1", flows.Ports{ExUplink: 1, ExPatch: 2, IntPatch: 1, IntTunnel: 2, ExMAC: mac},
		[]netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::11")},
		[]flows.Node{
			{Name: "node1", InternalIP: netip.MustParseAddr("192.0.2.11"), PodCIDRs: []netip.Prefix{p("10.244.1.0/24"), p("2001:db8:244:1::/64")}},
			{Name: "node2", InternalIP: netip.MustParseAddr("192.0.2.12"), PodCIDRs: []netip.Prefix{p("10.244.2.0/24"), p("2001:db8:244:2::/64")}},
		},
		nil, []flows.ServicePort{sp, dns})
	d, err := flows.Build(st)
	require.NoError(t, err)
	sb.LoadDesired(t, d)

	out := run(t, "trace", "--node-rundir", sb.RunDir, "--from", "[2001:db8:51::10]:40000", "--to", "[2001:db8::11]:30080")
	t.Log(out)
	assert.Contains(t, out, "in_port=eth0,tcp6,")
	assert.Contains(t, out, "ipv6_src=2001:db8:51::10,ipv6_dst=2001:db8::11,")
	assert.Contains(t, out, "nat(dst=[2001:db8:244:2::5]:8080)")
	assert.Contains(t, out, "ExServiceCT", "table names")
	assert.Contains(t, out, "verdict: DNAT to [2001:db8:244:2::5]:8080, Geneve to 192.0.2.12")
	out = run(t, "trace", "--node-rundir", sb.RunDir, "--proto", "udp", "--from", "[2001:db8:51::10]:40000", "--to", "[2001:db8::11]:30053")
	assert.Contains(t, out, "verdict: DNAT to [2001:db8:244:2::5]:5353, Geneve to 192.0.2.12")
	// Not an entry point: handed to the host.
	out = run(t, "trace", "--node-rundir", sb.RunDir, "--from", "[2001:db8:51::10]:40000", "--to", "[2001:db8::11]:30999")
	assert.Contains(t, out, "verdict: not handled by ovs-srcip")
}

// The hops between nodes are traced over the underlay's family: IPv4 as before, IPv6 with
// udp6/ipv6_src, tun_ipv6_src/tun_ipv6_dst and the 128-bit CTLabelIngressNode6.
func TestTraceUnderlayFields(t *testing.T) {
	assert.Equal(t, "udp", underlayUDP("192.0.2.11"))
	assert.Equal(t, "nw_src=192.0.2.11,nw_dst=192.0.2.12", underlayAddrs("192.0.2.11", "192.0.2.12"))
	assert.Equal(t, "tun_src=192.0.2.11,tun_dst=192.0.2.12", tunAddrs("192.0.2.11", "192.0.2.12"))
	assert.Equal(t, "0xc000020b", ipLabel("192.0.2.11"))
	assert.Equal(t, "udp6", underlayUDP("2001:db8:0:2::11"))
	assert.Equal(t, "ipv6_src=2001:db8:0:2::11,ipv6_dst=2001:db8:0:2::12", underlayAddrs("2001:db8:0:2::11", "2001:db8:0:2::12"))
	assert.Equal(t, "tun_ipv6_src=2001:db8:0:2::11,tun_ipv6_dst=2001:db8:0:2::12", tunAddrs("2001:db8:0:2::11", "2001:db8:0:2::12"))
	assert.Equal(t, "0x20010db8000000020000000000000011", ipLabel("2001:db8:0:2::11"))
	assert.Equal(t, "0", ipLabel(""))
}
