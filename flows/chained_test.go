package flows

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBuildPodChained: a chained pod's egress interface (docs/egress.md#chained-mode) holds the
// main CNI's address, outside every pod CIDR: it gets the spoof guard, its egress flows, the
// delivery of gateway replies only, and a drop for anything else to its address; no ARP flow.
func TestBuildPodChained(t *testing.T) {
	st := testState()
	p := Pod{Namespace: "demo", Name: "job", IPs: []netip.Addr{ip("10.88.1.7")}, MAC: mustMAC("0a:58:0a:58:01:07"),
		OFPort: 9, Chained: true, Egress: &PodEgress{IP: ip("192.0.2.50"), Policy: "job", Destinations: []netip.Prefix{pfx("198.51.100.0/24")}}}
	fs, err := BuildPod(st, p)
	require.NoError(t, err)
	assert.Empty(t, fs.Warnings)
	text := strings.Join(fs.FlowLines(), "\n")
	for _, want := range []string{
		"priority=300,ip,in_port=9,dl_src=0a:58:0a:58:01:07,nw_src=10.88.1.7,table=0",
		"priority=200,ip,reg0=0x6/0xf,nw_dst=10.88.1.7,table=60",
		"actions=mod_dl_src:0a:58:a9:fe:01:01,mod_dl_dst:0a:58:0a:58:01:07",
		"priority=199,ip,nw_dst=10.88.1.7,table=60",
		"priority=20,ip,reg0=0x1/0xf,nw_src=10.88.1.7,ct_state=+trk+new,nw_dst=198.51.100.0/24,table=60",
		"priority=200,in_port=9,table=0",
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, "arp", "no ARP on a chained egress interface")

	// Without a policy: no egress flow, the rest stays (the host path is BuildGateway's).
	p.Egress = nil
	fs, err = BuildPod(st, p)
	require.NoError(t, err)
	assert.NotContains(t, strings.Join(fs.FlowLines(), "\n"), "table=75")
	assert.Len(t, fs.Flows, 4)

	// The same address on an ordinary pod is refused (outside the pod CIDRs).
	p.Chained = false
	fs, err = BuildPod(st, p)
	require.NoError(t, err)
	assert.Empty(t, fs.Flows)
	assert.NotEmpty(t, fs.Warnings)
}

// TestBuildPodChainedDualStack: a chained pod with an IPv4 and an IPv6 address of its main CNI on
// a dual-stack node: per family the spoof guard, the delivery of gateway replies only (from
// ChainedGatewayMAC), the drop of anything else to the address and the egress flows of that
// family's assignment; no ARP, no ND (the pod has a permanent neighbour entry for
// ChainedGatewayIP6). On an IPv4-only node the IPv6 address is refused with a warning.
func TestBuildPodChainedDualStack(t *testing.T) {
	assert.Equal(t, ChainedGatewayMAC, GatewayMAC(ChainedGatewayIP6), "one next-hop MAC for both families")
	assert.True(t, ChainedGatewayIP6.IsLinkLocalUnicast())
	st := goldenDualStackChained()
	p := st.Pods[Key{Kind: KindPod, Namespace: "demo", Name: "job"}]
	fs, err := BuildPod(st, p)
	require.NoError(t, err)
	assert.Empty(t, fs.Warnings)
	text := strings.Join(fs.FlowLines(), "\n")
	for _, want := range []string{
		"priority=300,ip,in_port=9,dl_src=0a:58:0a:58:01:07,nw_src=10.88.1.7,table=0",
		"priority=300,ipv6,in_port=9,dl_src=0a:58:0a:58:01:07,ipv6_src=2001:db8:88:1::7,table=0",
		"priority=200,ipv6,reg0=0x6/0xf,ipv6_dst=2001:db8:88:1::7,table=60",
		"priority=199,ipv6,ipv6_dst=2001:db8:88:1::7,table=60",
		"priority=20,ipv6,reg0=0x1/0xf,ipv6_src=2001:db8:88:1::7,ct_state=+trk+new,ipv6_dst=2001:db8:100::/48,table=60",
		"priority=20,ip,reg0=0x1/0xf,nw_src=10.88.1.7,ct_state=+trk+new,nw_dst=198.51.100.0/24,table=60",
		"priority=200,in_port=9,table=0",
	} {
		assert.Contains(t, text, want)
	}
	for _, l := range fs.FlowLines() {
		if strings.Contains(l, "ipv6_dst=2001:db8:88:1::7") && strings.Contains(l, "priority=200") {
			assert.Contains(t, l, "mod_dl_src:0a:58:a9:fe:01:01", "IPv6 replies come from ChainedGatewayMAC")
		}
	}
	assert.NotContains(t, text, "arp")
	assert.NotContains(t, text, "icmp6", "no ND flow for a chained port")
	assert.NotContains(t, text, "table=56")

	// The IPv6 address without an IPv6 assignment: no IPv6 egress flow, the rest stays.
	p.Egress6 = nil
	fs, err = BuildPod(st, p)
	require.NoError(t, err)
	assert.NotContains(t, strings.Join(fs.FlowLines(), "\n"), "ipv6,reg0=0x1/0xf")
	assert.Contains(t, strings.Join(fs.FlowLines(), "\n"), "ipv6_src=2001:db8:88:1::7,table=0")

	// An IPv4-only node: the IPv6 address is not programmed, and says so.
	st4 := testState()
	fs, err = BuildPod(st4, p)
	require.NoError(t, err)
	assert.NotContains(t, strings.Join(fs.FlowLines(), "\n"), "ipv6")
	require.Len(t, fs.Warnings, 1)
	assert.Contains(t, fs.Warnings[0], "2001:db8:88:1::7")
}
