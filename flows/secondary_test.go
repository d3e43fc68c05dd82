package flows

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A secondary uplink's subnet that would carry the node's own traffic (every address, or one
// holding this node's InternalIP) is ignored with a warning: no LOCAL -> NIC flow, and addresses
// in it are announced on the primary uplink. The NIC's other subnets keep working.
func TestSecondaryUplinkUnsafeSubnetsIgnored(t *testing.T) {
	st := testState()
	st.Ports.Secondary = []SecondaryUplink{{Name: "eth1", OFPort: 5, Subnets: []netip.Prefix{
		pfx("0.0.0.0/0"), pfx("192.0.2.0/24"), pfx("203.0.113.0/24")}}}
	fs, err := BuildExBase(st)
	require.NoError(t, err)
	text := strings.Join(fs.FlowLines(), "\n")
	assert.Contains(t, text, "nw_src=203.0.113.0/24")
	assert.NotContains(t, text, "0.0.0.0/0")
	assert.NotContains(t, text, "192.0.2.0/24")
	assert.Contains(t, text, "priority=500,in_port=5,", "the NIC's own input still goes to LOCAL")
	require.Len(t, fs.Warnings, 2)
	assert.Contains(t, fs.Warnings[0], "secondary uplink eth1: subnet 0.0.0.0/0 ignored (every address)")
	assert.Contains(t, fs.Warnings[1], "subnet 192.0.2.0/24 ignored (contains this node's address 192.0.2.11)")
	assert.Equal(t, 5, st.UplinkFor(ip("203.0.113.50")))
	assert.Equal(t, st.Ports.ExUplink, st.UplinkFor(ip("192.0.2.50")))
}

// An IPv6 egress IP inside an IPv6 subnet of a secondary uplink (Subnets6, recorded by
// node-setup) is declined by its gateway: no SNAT, no Neighbor Advertisement on any uplink (the
// primary one is the wrong segment), its pods' packets dropped here (fail closed) and a warning
// that says why and what to do. The IPv4 egress IP in the NIC's IPv4 subnet is still served on
// the NIC, the IPv6 egress IP outside the NIC's subnets still on the primary uplink, and the
// NIC's IPv6 subnet gets no LOCAL -> NIC flow.
func TestEgress6SecondaryNICDeclined(t *testing.T) {
	st := goldenDualStackEgress6()
	st.Ports.Secondary = []SecondaryUplink{{Name: "eth1", OFPort: 5, Subnets: []netip.Prefix{pfx("203.0.113.0/24")},
		Subnets6: []netip.Prefix{pfx("2001:db8:113::/64")}}}
	in, out := ip("2001:db8:113::50"), ip("2001:db8::51")
	st.Egress[in] = EgressIP{IP: in, Policy: "sec6", Gateway: "node1"}
	st.Egress[ip("203.0.113.50")] = EgressIP{IP: ip("203.0.113.50"), Policy: "sec", Gateway: "node1"}

	nic, subnet, _, ok := st.SecondarySubnet6For(in)
	require.True(t, ok)
	assert.Equal(t, "eth1", nic)
	assert.Equal(t, pfx("2001:db8:113::/64"), subnet)
	_, _, _, ok = st.SecondarySubnet6For(out)
	assert.False(t, ok)
	_, _, _, ok = st.SecondarySubnet6For(ip("203.0.113.50"))
	assert.False(t, ok, "IPv4 goes by Subnets")

	fs, err := BuildEgress(st, st.Egress[in])
	require.NoError(t, err)
	lines := fs.FlowLines()
	require.Len(t, lines, 1, "%v", lines)
	assert.Contains(t, lines[0], "ipv6,reg3=0x50,table="+IntEgressOut.String()+",")
	assert.Contains(t, lines[0], "actions=drop")
	assert.NotContains(t, strings.Join(lines, "\n"), "ct(commit")
	require.Len(t, fs.Warnings, 1)
	assert.Equal(t, "IPv6 egress IP 2001:db8:113::50 is inside IPv6 subnet 2001:db8:113::/64 of secondary NIC eth1 on node node1: "+
		Egress6SecondaryNote+"; its traffic is dropped", fs.Warnings[0])
	ann, err := BuildEgressAnnounce(st, st.Egress[in])
	require.NoError(t, err)
	assert.Empty(t, ann.Flows, "answered on no uplink")

	// Another node's pods still tunnel to node1 (the election keeps node1 from taking it; in
	// manifests mode node1 drops it: IntEgressSNAT has no flow for its MAC).
	other := *st
	other.Node = "node2"
	fs2, err := BuildEgress(&other, st.Egress[in])
	require.NoError(t, err)
	assert.Empty(t, fs2.Warnings)

	ann, err = BuildEgressAnnounce(st, st.Egress[out])
	require.NoError(t, err)
	text := strings.Join(ann.FlowLines(), "\n")
	assert.Contains(t, text, "in_port="+strconv.Itoa(st.Ports.ExUplink)+",", "outside the NIC's subnets: the primary uplink")
	assert.NotContains(t, text, "in_port=5,")
	ann, err = BuildEgressAnnounce(st, st.Egress[ip("203.0.113.50")])
	require.NoError(t, err)
	assert.Contains(t, strings.Join(ann.FlowLines(), "\n"), "in_port=5,", "IPv4 on the NIC as before")

	base, err := BuildExBase(st)
	require.NoError(t, err)
	assert.NotContains(t, strings.Join(base.FlowLines(), "\n"), "2001:db8:113::", "no flow for the NIC's IPv6 subnet")
	assert.Empty(t, base.Warnings)
}

// A secondary NIC whose recorded IPv6 subnets are unreadable (a hand-edited
// ovs-srcip.io/egress-subnets6) keeps its IPv4 egress IPs on the NIC, and every IPv6 egress IP is
// declined on this node (fail closed: none can be told apart from one on that NIC's segment),
// with a warning that names the NIC and what to do.
func TestEgress6SecondaryNICUnreadableSubnets6(t *testing.T) {
	st := goldenDualStackEgress6()
	st.Ports.Secondary = []SecondaryUplink{{Name: "eth1", OFPort: 5, Subnets: []netip.Prefix{pfx("203.0.113.0/24")},
		Subnets6Unreadable: "bad prefix"}}
	v6, v4 := ip("2001:db8::51"), ip("203.0.113.50")
	st.Egress[v6] = EgressIP{IP: v6, Policy: "any6", Gateway: "node1"}
	st.Egress[v4] = EgressIP{IP: v4, Policy: "sec", Gateway: "node1"}

	nic, _, where, ok := st.SecondarySubnet6For(v6)
	require.True(t, ok)
	assert.Equal(t, "eth1", nic)
	assert.Contains(t, where, "unreadable: bad prefix")
	assert.Equal(t, 5, st.UplinkFor(v4), "the IPv4 subnets are kept")

	fs, err := BuildEgress(st, st.Egress[v6])
	require.NoError(t, err)
	lines := fs.FlowLines()
	require.Len(t, lines, 1, "%v", lines)
	assert.Contains(t, lines[0], "actions=drop")
	require.Len(t, fs.Warnings, 1)
	assert.Contains(t, fs.Warnings[0], "IPv6 egress IP 2001:db8::51 is not checkable against the IPv6 subnets of secondary NIC eth1")
	ann, err := BuildEgressAnnounce(st, st.Egress[v6])
	require.NoError(t, err)
	assert.Empty(t, ann.Flows, "answered on no uplink")

	fs4, err := BuildEgress(st, st.Egress[v4])
	require.NoError(t, err)
	assert.Contains(t, strings.Join(fs4.FlowLines(), "\n"), "ct(commit", "the IPv4 egress IP is served")
}
