package bgp

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	dual = NodeFacts{
		InternalIPs: []netip.Addr{netip.MustParseAddr("2001:db8:89::12"), netip.MustParseAddr("10.89.0.12")},
		PodCIDRs:    []netip.Prefix{netip.MustParsePrefix("fd00:10:244:1::/64"), netip.MustParsePrefix("10.244.1.0/24")},
		RoutedPods:  true,
	}
	router4 = PeerSpec{Name: "a-router", Address: netip.MustParseAddr("10.89.0.254"), PeerASN: 64500, MyASN: 64513, HoldTime: 3 * time.Second}
	router6 = PeerSpec{Name: "b-router6", Address: netip.MustParseAddr("2001:db8:89::fe"), PeerASN: 64500, MyASN: 64513}
)

// TestDesiredByFamily: each session announces the pod CIDR of its own family with the node's
// InternalIP of that family, whatever the order of the Node's lists.
func TestDesiredByFamily(t *testing.T) {
	c, d := Desired(dual, []PeerSpec{router6, router4})
	require.Empty(t, d)
	require.NoError(t, c.Validate())
	assert.Equal(t, netip.MustParseAddr("10.89.0.12"), c.RouterID)
	assert.Equal(t, uint32(64513), c.ASN)
	require.Len(t, c.Peers, 2)
	assert.Equal(t, netip.MustParseAddr("10.89.0.12"), c.Peers[0].LocalAddress)
	assert.Equal(t, netip.MustParseAddr("2001:db8:89::12"), c.Peers[1].LocalAddress)
	assert.ElementsMatch(t, []Route{
		{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParseAddr("10.89.0.12")},
		{netip.MustParsePrefix("fd00:10:244:1::/64"), netip.MustParseAddr("2001:db8:89::12")},
	}, c.Announce)
}

func TestDesiredDeclines(t *testing.T) {
	off := dual
	off.RoutedPods = false
	c, d := Desired(off, []PeerSpec{router4, router6})
	assert.Empty(t, c.Peers)
	require.Len(t, d, 2)
	assert.Contains(t, d[0].Message, "routed pods are off")

	v6only := NodeFacts{InternalIPs: dual.InternalIPs[:1], PodCIDRs: dual.PodCIDRs[:1], RoutedPods: true}
	_, d = Desired(v6only, []PeerSpec{router6})
	require.Len(t, d, 1)
	assert.Contains(t, d[0].Message, "no IPv4 InternalIP for the BGP router ID")

	v4only := NodeFacts{InternalIPs: dual.InternalIPs[1:], PodCIDRs: dual.PodCIDRs[1:], RoutedPods: true}
	c, d = Desired(v4only, []PeerSpec{router4, router6})
	require.Len(t, c.Peers, 1)
	require.Len(t, d, 1)
	assert.Equal(t, "b-router6", d[0].Name)
	assert.Contains(t, d[0].Message, "no IPv6 InternalIP")

	noV6CIDR := NodeFacts{InternalIPs: dual.InternalIPs, PodCIDRs: dual.PodCIDRs[1:], RoutedPods: true}
	_, d = Desired(noV6CIDR, []PeerSpec{router6, router4})
	require.Len(t, d, 1)
	assert.Contains(t, d[0].Message, "no IPv6 pod CIDR")

	twice := router4
	twice.Name = "z-again"
	secret := router6
	secret.PasswordErr = errors.New(`secret ovs-srcip/bgp-router6: not found`)
	bad := router4
	bad.Name, bad.Address, bad.HoldTime = "c-hold", netip.MustParseAddr("10.89.0.253"), time.Second
	c, d = Desired(dual, []PeerSpec{twice, secret, router4, bad})
	require.Len(t, c.Peers, 1)
	assert.Equal(t, router4.Address, c.Peers[0].Address)
	names := map[string]string{}
	for _, x := range d {
		names[x.Name] = x.Message
	}
	assert.Contains(t, names["z-again"], "also a-router's")
	assert.Contains(t, names["b-router6"], "password cannot be read")
	assert.Contains(t, names["c-hold"], "hold time 1s")
	// Only the IPv4 pod CIDR: the IPv6 peer is declined, so nothing announces the IPv6 one.
	assert.Equal(t, []Route{{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParseAddr("10.89.0.12")}}, c.Announce)

	c, d = Desired(dual, nil)
	assert.Empty(t, c.Peers)
	assert.Empty(t, d)
}
