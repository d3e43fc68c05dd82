package ofctl_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
)

// conntrackBridge starts a dummy datapath with bridge br-ex (port eth0) and adds lines (ovs-ofctl
// flow syntax, e.g. table 0 flows that commit into a zone) in one bundle.
func conntrackBridge(t *testing.T, lines ...string) (context.Context, *ovstest.Sandbox, *ofctl.OpenFlow) {
	t.Helper()
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br-ex", "eth0")
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))
	adds := make([]string, len(lines))
	for i, l := range lines {
		adds[i] = "flow add " + l
	}
	require.NoError(t, of.BundleText(ctx, adds))
	return ctx, sb, of
}

// dumpZone is the datapath's `dpctl/dump-conntrack zone=Z`.
func dumpZone(t *testing.T, sb *ovstest.Sandbox, zone uint16) string {
	t.Helper()
	return sb.Run(t, "ovs-appctl", "-t", sb.VswitchdCtl, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", zone))
}

// receive injects one packet from the client (198.51.100.10:sport) to 192.0.2.11:dport into
// port eth0 of the dummy datapath.
func receive(t *testing.T, sb *ovstest.Sandbox, l4 string, sport, dport int) {
	t.Helper()
	proto := map[string]int{"tcp": 6, "udp": 17}[l4]
	pkt := fmt.Sprintf("in_port(1),eth(src=50:54:00:00:00:01,dst=50:54:00:00:00:02),eth_type(0x0800),"+
		"ipv4(src=198.51.100.10,dst=192.0.2.11,proto=%d,tos=0,ttl=64,frag=no),%s(src=%d,dst=%d)", proto, l4, sport, dport)
	if l4 == "tcp" {
		pkt += ",tcp_flags(syn)"
	}
	sb.Run(t, "ovs-appctl", "-t", sb.VswitchdCtl, "netdev-dummy/receive", "eth0", pkt)
}

// Real conntrack entries of OVS's userspace datapath: ConntrackDestinations counts them by
// original destination; FlushConntrack removes exactly the UDP entries of one endpoint (and one
// entry point when given), leaving TCP and other endpoints alone.
func TestConntrackFlushAndDestinations(t *testing.T) {
	zone := flows.ZoneService
	ctx, sb, of := conntrackBridge(t,
		fmt.Sprintf("table=0,priority=10,udp,tp_src=1000,actions=ct(commit,zone=%d,nat(dst=10.0.0.5:8080))", zone),
		fmt.Sprintf("table=0,priority=10,udp,tp_src=1001,actions=ct(commit,zone=%d,nat(dst=10.0.0.6:8080))", zone),
		fmt.Sprintf("table=0,priority=10,udp,tp_src=1003,actions=ct(commit,zone=%d,nat(dst=10.0.0.5:8080))", zone),
		fmt.Sprintf("table=0,priority=10,tcp,actions=ct(commit,zone=%d,nat(dst=10.0.0.5:8080))", zone),
	)
	receive(t, sb, "udp", 1000, 31300)
	receive(t, sb, "udp", 1001, 31300)
	receive(t, sb, "udp", 1003, 31399)
	receive(t, sb, "tcp", 1002, 31300)

	ep := func(p flows.Protocol, s string) flows.EntryPoint {
		return flows.EntryPoint{Protocol: p, Addr: netip.MustParseAddrPort(s)}
	}
	dsts, err := of.ConntrackDestinations(ctx, zone)
	require.NoError(t, err)
	assert.Equal(t, map[flows.EntryPoint]int{ep(flows.UDP, "192.0.2.11:31300"): 2, ep(flows.UDP, "192.0.2.11:31399"): 1,
		ep(flows.TCP, "192.0.2.11:31300"): 1}, dsts)

	// Endpoint 10.0.0.5:8080 behind entry point 31300 only.
	require.NoError(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.UDP, ReplySrc: netip.MustParseAddrPort("10.0.0.5:8080"), OrigDst: netip.MustParseAddrPort("192.0.2.11:31300")}))
	dump := dumpZone(t, sb, zone)
	assert.NotContains(t, dump, "sport=1000,")
	assert.Contains(t, dump, "sport=1001,")
	assert.Contains(t, dump, "sport=1003,")
	assert.Contains(t, dump, "tcp,")
	// Any entry point; nothing left to flush is not an error.
	require.NoError(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.UDP, ReplySrc: netip.MustParseAddrPort("10.0.0.5:8080")}))
	require.NoError(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.UDP, ReplySrc: netip.MustParseAddrPort("10.0.0.5:8080")}))
	dump = dumpZone(t, sb, zone)
	assert.Equal(t, 2, strings.Count(strings.TrimSpace(dump), "\n")+1, dump)
	assert.Contains(t, dump, "sport=1001,")
	assert.Contains(t, dump, "tcp,")
	// TCP is IP protocol 6: the TCP entry of the endpoint goes, the other endpoint's UDP entry stays.
	require.NoError(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.TCP, ReplySrc: netip.MustParseAddrPort("10.0.0.5:8080")}))
	dump = dumpZone(t, sb, zone)
	assert.NotContains(t, dump, "tcp,")
	assert.Contains(t, dump, "sport=1001,")
	// A protocol without an IP protocol number, or tuples of two families, are refused before
	// running anything.
	require.Error(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: "SCTP", ReplySrc: netip.MustParseAddrPort("10.0.0.5:8080")}))
	require.Error(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.UDP, ReplySrc: netip.MustParseAddrPort("[2001:db8::5]:8080"),
		OrigDst: netip.MustParseAddrPort("192.0.2.11:31300")}))
}

// A gateway's SNAT entries in ZoneEgress: FlushConntrack with ReplyDst removes those of one
// egress IP and one protocol (reply tuple ct_nw_dst=IP) and leaves the other egress IP's; a
// filter with both ReplySrc and ReplyDst, or neither, is refused.
func TestConntrackFlushEgressIP(t *testing.T) {
	zone := flows.ZoneEgress
	ctx, sb, of := conntrackBridge(t,
		fmt.Sprintf("table=0,priority=10,udp,tp_src=1000,actions=ct(commit,zone=%d,nat(src=10.89.0.50))", zone),
		fmt.Sprintf("table=0,priority=10,udp,tp_src=1001,actions=ct(commit,zone=%d,nat(src=10.89.0.51))", zone),
		fmt.Sprintf("table=0,priority=10,tcp,actions=ct(commit,zone=%d,nat(src=10.89.0.50))", zone),
	)
	receive(t, sb, "udp", 1000, 9090)
	receive(t, sb, "udp", 1001, 9090)
	receive(t, sb, "tcp", 1002, 9090)
	dump := func() string {
		return dumpZone(t, sb, zone)
	}
	require.Equal(t, 3, strings.Count(strings.TrimSpace(dump()), "\n")+1, dump())

	require.NoError(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.TCP, ReplyDst: netip.MustParseAddr("10.89.0.50")}))
	d := dump()
	assert.NotContains(t, d, "tcp,")
	assert.Contains(t, d, "sport=1000,")
	assert.Contains(t, d, "sport=1001,")
	require.NoError(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.UDP, ReplyDst: netip.MustParseAddr("10.89.0.50")}))
	d = dump()
	assert.NotContains(t, d, "sport=1000,")
	assert.Contains(t, d, "sport=1001,", "the other egress IP's entry stays")

	require.Error(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.UDP}))
	require.Error(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.UDP, ReplyDst: netip.MustParseAddr("10.89.0.50"),
		ReplySrc: netip.MustParseAddrPort("198.51.100.10:9090")}))
}

// receive6 injects one UDP packet from the client [2001:db8:51::10]:sport to
// [2001:db8::11]:dport into port eth0 of the dummy datapath.
func receive6(t *testing.T, sb *ovstest.Sandbox, sport, dport int) {
	t.Helper()
	pkt := fmt.Sprintf("in_port(1),eth(src=50:54:00:00:00:01,dst=50:54:00:00:00:02),eth_type(0x86dd),"+
		"ipv6(src=2001:db8:51::10,dst=2001:db8::11,label=0,proto=17,tclass=0,hlimit=64,frag=no),udp(src=%d,dst=%d)", sport, dport)
	sb.Run(t, "ovs-appctl", "-t", sb.VswitchdCtl, "netdev-dummy/receive", "eth0", pkt)
}

// IPv6 entries in ZoneService6 (issue 22): ConntrackDestinations counts them by their IPv6
// original destination; FlushConntrack removes the UDP entries of one IPv6 endpoint (ct_ipv6_src
// in the reply tuple, ct_ipv6_dst in the original one) and leaves the others.
func TestConntrackIPv6(t *testing.T) {
	zone := flows.ZoneService6
	ctx, sb, of := conntrackBridge(t,
		fmt.Sprintf("table=0,priority=10,udp6,tp_src=1000,actions=ct(commit,zone=%d,nat(dst=[2001:db8:244:2::5]:8080))", zone),
		fmt.Sprintf("table=0,priority=10,udp6,tp_src=1001,actions=ct(commit,zone=%d,nat(dst=[2001:db8:244:2::6]:8080))", zone),
	)
	receive6(t, sb, 1000, 31300)
	receive6(t, sb, 1001, 31300)
	dsts, err := of.ConntrackDestinations(ctx, zone)
	require.NoError(t, err)
	assert.Equal(t, map[flows.EntryPoint]int{{Protocol: flows.UDP, Addr: netip.MustParseAddrPort("[2001:db8::11]:31300")}: 2}, dsts)
	require.NoError(t, of.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: flows.UDP,
		ReplySrc: netip.MustParseAddrPort("[2001:db8:244:2::5]:8080"), OrigDst: netip.MustParseAddrPort("[2001:db8::11]:31300")}))
	dump := dumpZone(t, sb, zone)
	assert.NotContains(t, dump, "sport=1000,", dump)
	assert.Contains(t, dump, "sport=1001,", dump)
	dsts, err = of.ConntrackDestinations(ctx, flows.ZoneService)
	require.NoError(t, err)
	assert.Empty(t, dsts, "ZoneService holds no IPv6 entry")
}

// A flow edited in place is restored by "flow modify_strict" with the same cookie; a missing flow
// is not added; the packet counters stay.
func TestBundleModifyStrictRepairs(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br-ex", "eth0")
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))
	line := fmt.Sprintf("cookie=%#x,table=40,priority=100,tcp,nw_dst=192.0.2.11,tp_dst=30100,actions=output:1", uint64(c1))
	require.NoError(t, of.BundleText(ctx, []string{"flow add " + line}))
	sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "mod-flows", "br-ex", "table=40,tcp,nw_dst=192.0.2.11,tp_dst=30100,actions=drop")
	require.NoError(t, of.BundleText(ctx, []string{"flow modify_strict " + line,
		fmt.Sprintf("flow modify_strict cookie=%#x,table=40,priority=100,tcp,nw_dst=192.0.2.11,tp_dst=30101,actions=output:1", uint64(c1))}))
	out, err := of.DumpFlows(ctx, "table=40")
	require.NoError(t, err)
	assert.Contains(t, out, "actions=output")
	assert.NotContains(t, out, "drop")
	assert.NotContains(t, out, "30101")
	assert.Contains(t, out, fmt.Sprintf("cookie=%#x", uint64(c1)))
}

// Per-zone conntrack limits on OVS's userspace datapath: a zone at its limit holds no more
// entries than the limit (further commits fail), the limits and counts read back, and deleting a
// zone's limit lifts it.
func TestConntrackZoneLimits(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br-ex", "eth0")
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))
	max, err := of.ConntrackMax(ctx)
	require.NoError(t, err)
	assert.Positive(t, max)
	zone := flows.ZoneService
	require.NoError(t, of.SetConntrackZoneLimits(ctx, map[uint16]int{zone: 3, flows.ZonePod: 7}))
	require.NoError(t, of.BundleText(ctx, []string{fmt.Sprintf("flow add table=0,priority=10,udp,actions=ct(commit,zone=%d)", zone)}))
	for i := 0; i < 6; i++ {
		receive(t, sb, "udp", 2000+i, 31300)
	}
	got, err := of.ConntrackZoneLimits(ctx, zone, flows.ZonePod)
	require.NoError(t, err)
	assert.Equal(t, map[uint16]flows.ZoneLimit{zone: {Limit: 3, Count: 3}, flows.ZonePod: {Limit: 7, Count: 0}}, got)
	dump := dumpZone(t, sb, zone)
	assert.Equal(t, 3, strings.Count(strings.TrimSpace(dump), "\n")+1, "6 new connections, limit 3:\n%s", dump)
	require.NoError(t, of.DeleteConntrackZoneLimits(ctx, zone))
	receive(t, sb, "udp", 2100, 31300)
	got, err = of.ConntrackZoneLimits(ctx, zone)
	require.NoError(t, err)
	assert.Zero(t, got[zone].Limit, "limit lifted")
	dump = dumpZone(t, sb, zone)
	assert.Equal(t, 4, strings.Count(strings.TrimSpace(dump), "\n")+1, "a fourth connection once the limit is lifted:\n%s", dump)
	require.Error(t, of.SetConntrackZoneLimits(ctx, map[uint16]int{zone: 0}), "0 is not a limit")
}
