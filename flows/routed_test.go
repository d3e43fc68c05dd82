package flows

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ip-masq-agent's semantics: the list masked and deduplicated, link-local added unless
// masqLinkLocal, nothing at all for an empty list.
func TestNonMasqueradeSet(t *testing.T) {
	p := netip.MustParsePrefix
	assert.Nil(t, NonMasqueradeSet(nil, false))
	assert.Nil(t, NonMasqueradeSet(nil, true))
	assert.Equal(t, []netip.Prefix{p("192.168.10.0/24"), p("2001:db8:10::/64"), p("169.254.0.0/16")},
		NonMasqueradeSet([]netip.Prefix{p("192.168.10.9/24"), p("2001:db8:10::/64"), p("192.168.10.0/24")}, false))
	assert.Equal(t, []netip.Prefix{p("192.168.10.0/24")}, NonMasqueradeSet([]netip.Prefix{p("192.168.10.0/24")}, true))
	assert.Equal(t, []netip.Prefix{p("169.254.0.0/16")}, NonMasqueradeSet([]netip.Prefix{p("169.254.0.0/16")}, false))
}

// The guards: with routed pods off, br-ex has no routed-pods flow and every other node's flow set
// drops new connections tunnelled to local pods from sources outside the cluster, per family,
// below the node's own commit; with them on, listed sources of each family are let in on br-ex
// and committed with the ingress node on br-int; a node without a gateway port (chained mode)
// gets none of it.
func TestRoutedGuards(t *testing.T) {
	off := GoldenStates()["node1-dual-stack-gateway"]
	d, err := Build(off)
	require.NoError(t, err)
	for _, dst := range []string{"nw_dst=10.244.", "ipv6_dst=2001:db8:244:"} {
		assert.Empty(t, flowsOf(t, d, Key{Kind: KindExBase}, "priority=50", dst), "routed pods off: no br-ex routed-pods flow")
	}
	node2 := Key{Kind: KindNode, Name: "node2"}
	assert.Len(t, flowsOf(t, d, node2, "priority=260,", "tun_src=192.0.2.12", "ct_state=+trk+new", "actions=drop"), 2, "IPv4 and IPv6 guard")
	assert.Len(t, flowsOf(t, d, node2, "priority=295,", "nw_src=10.244.2.0/24,nw_dst=10.244.1.0/24"), 1)
	assert.Len(t, flowsOf(t, d, node2, "priority=295,", "ipv6_src=2001:db8:244:2::/64,ipv6_dst=2001:db8:244:1::/64"), 1)
	assert.Empty(t, flowsOf(t, d, node2, "priority=290,"))
	// node3 is IPv4-only: one guard (this node's IPv4 pod CIDR), its pods' source flow for IPv4
	// only.
	node3 := Key{Kind: KindNode, Name: "node3"}
	assert.Len(t, flowsOf(t, d, node3, "priority=260,"), 2, "both of this node's pod CIDRs are guarded")
	assert.Len(t, flowsOf(t, d, node3, "priority=295,"), 1)

	on := GoldenStates()["node1-routed-pods"]
	d, err = Build(on)
	require.NoError(t, err)
	ex := Key{Kind: KindExBase}
	assert.Len(t, flowsOf(t, d, ex, "priority=506,", "nw_src=198.51.100.0/24"), 3, "one per Node's IPv4 pod CIDR")
	assert.Len(t, flowsOf(t, d, ex, "priority=506,", "nw_src=169.254.0.0/16"), 3, "link-local, ip-masq-agent's default")
	assert.Len(t, flowsOf(t, d, ex, "priority=506,", "ipv6_src=2001:db8:0:100::/64"), 2, "node1's and node2's IPv6 pod CIDRs")
	assert.Empty(t, flowsOf(t, d, ex, "priority=506,", "nw_src=2001:db8"), "no listed source of the other family")
	assert.Len(t, flowsOf(t, d, ex, "priority=505,", "actions=drop"), 5)
	// Forged pod sources are dropped before the allow flows: each pod CIDR from each pod CIDR
	// of its family (3 x 3 IPv4, 2 x 2 IPv6).
	assert.Len(t, flowsOf(t, d, ex, "priority=508,", "actions=drop"), 13)
	assert.Len(t, flowsOf(t, d, ex, "priority=508,", "nw_src=10.244.2.0/24,nw_dst=10.244.1.0/24"), 1)
	assert.Len(t, flowsOf(t, d, node2, "priority=290,", "nw_src=198.51.100.0/24", "ct(commit,zone=64257,exec("), 1)
	assert.Len(t, flowsOf(t, d, node2, "priority=290,", "ipv6_src=2001:db8:0:100::/64", "ct(commit,zone=64257,exec("), 1)

	// A secondary uplink (node-setup --egress-interface) gets the same guard, without the MAC.
	sec := GoldenStates()["node1-routed-pods"]
	sec.Ports.Secondary = []SecondaryUplink{{Name: "eth1", OFPort: 5, Subnets: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}}
	d, err = Build(sec)
	require.NoError(t, err)
	assert.Len(t, flowsOf(t, d, ex, "priority=505,", "in_port=5,", "actions=drop"), 5)
	assert.Len(t, flowsOf(t, d, ex, "priority=506,", "in_port=5,", "nw_src=198.51.100.0/24"), 3)
	assert.Empty(t, flowsOf(t, d, ex, "priority=50", "in_port=5,", "dl_dst="))

	chained := GoldenStates()["node1-routed-pods"]
	chained.Ports.IntGateway = 0
	d, err = Build(chained)
	require.NoError(t, err)
	assert.Empty(t, flowsOf(t, d, ex, "priority=50", "nw_dst=10.244."), "no gateway port: no routed-pods flow")
	assert.Empty(t, flowsOf(t, d, node2, "priority=2"), "no gateway port: no tunnel guard")
}
