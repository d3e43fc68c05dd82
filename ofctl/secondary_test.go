package ofctl_test

import (
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// A secondary uplink (node-setup --egress-interface) is added with its tag and subnets,
// idempotently; EnsureIntegration reports it in Ports.Secondary and never takes it for the
// primary uplink; a port whose subnets do not parse is left out.
func TestSecondaryUplink(t *testing.T) {
	ctx, sb, db := startNode(t)
	subnets := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	changes, err := db.EnsureSecondaryUplink(ctx, "br-ex", "eth1", subnets)
	require.NoError(t, err)
	assert.Equal(t, []string{"added eth1 to br-ex (tag 4094, ovs-srcip.io/egress-subnets=203.0.113.0/24)"}, changes)
	assert.Equal(t, "4094", vsGet(t, sb, "Port", "eth1", "tag"))
	assert.Equal(t, "203.0.113.0/24", vsGet(t, sb, "Interface", "eth1", "external_ids:ovs-srcip.io/egress-subnets"))
	require.Eventually(t, func() bool {
		changes, err = db.EnsureSecondaryUplink(ctx, "br-ex", "eth1", subnets)
		return err == nil && len(changes) == 0
	}, 5*time.Second, 50*time.Millisecond, "a second call changes nothing: %v %v", changes, err)

	c := integration
	c.Uplink = "" // found: eth1 is no candidate
	var ports flows.Ports
	require.Eventually(t, func() bool {
		ports, err = db.EnsureIntegration(ctx, c)
		return err == nil && len(ports.Secondary) == 1
	}, 5*time.Second, 50*time.Millisecond, "%v", err)
	assert.Equal(t, vsGet(t, sb, "Interface", "eth0", "ofport"), strconv.Itoa(ports.ExUplink))
	assert.Equal(t, flows.SecondaryUplink{Name: "eth1", OFPort: mustAtoi(t, vsGet(t, sb, "Interface", "eth1", "ofport")), Subnets: subnets}, ports.Secondary[0])
	st := &flows.State{Ports: ports}
	assert.Equal(t, ports.Secondary[0].OFPort, st.UplinkFor(netip.MustParseAddr("203.0.113.50")))
	assert.Equal(t, ports.ExUplink, st.UplinkFor(netip.MustParseAddr("192.0.2.50")))

	// A secondary port ovs-vswitchd cannot add (ofport -1) is left out; the agent keeps going.
	sb.Vsctl(t, "add-port", "br-ex", "eth3", "--", "set", "Interface", "eth3", "type=bogus",
		`external_ids:ovs-srcip.io/egress-subnets="198.51.100.0/24"`)
	require.Eventually(t, func() bool { return vsGet(t, sb, "Interface", "eth3", "ofport") == "-1" }, 5*time.Second, 50*time.Millisecond)
	ports, err = db.EnsureIntegration(ctx, c)
	require.NoError(t, err)
	require.Len(t, ports.Secondary, 1)
	assert.Equal(t, "eth1", ports.Secondary[0].Name)
	sb.Vsctl(t, "del-port", "br-ex", "eth3")

	// Corrected: other subnets, the tag put back.
	sb.Vsctl(t, "set", "Port", "eth1", "tag=7")
	two := append(subnets, netip.MustParsePrefix("198.18.0.0/15"))
	require.Eventually(t, func() bool {
		changes, err = db.EnsureSecondaryUplink(ctx, "br-ex", "eth1", two)
		return err == nil && len(changes) == 2
	}, 5*time.Second, 50*time.Millisecond, "%v %v", changes, err)
	assert.Equal(t, "4094", vsGet(t, sb, "Port", "eth1", "tag"))
	assert.Equal(t, "203.0.113.0/24,198.18.0.0/15", vsGet(t, sb, "Interface", "eth1", "external_ids:ovs-srcip.io/egress-subnets"))

	// The NIC's IPv6 subnets go into a key of their own (the IPv4 key unchanged); the agent reads
	// them into Subnets6, and removes the key when the NIC has none any more.
	dual := append(slices.Clone(two), netip.MustParsePrefix("2001:db8:0:113::/64"))
	changes, err = db.EnsureSecondaryUplink(ctx, "br-ex", "eth1", dual)
	require.NoError(t, err)
	assert.Equal(t, []string{"set ovs-srcip.io/egress-subnets6=2001:db8:0:113::/64 on eth1"}, changes)
	assert.Equal(t, "203.0.113.0/24,198.18.0.0/15", vsGet(t, sb, "Interface", "eth1", "external_ids:ovs-srcip.io/egress-subnets"))
	assert.Equal(t, "2001:db8:0:113::/64", vsGet(t, sb, "Interface", "eth1", "external_ids:ovs-srcip.io/egress-subnets6"))
	require.Eventually(t, func() bool {
		ports, err = db.EnsureIntegration(ctx, c)
		return err == nil && len(ports.Secondary) == 1 && len(ports.Secondary[0].Subnets6) == 1
	}, 5*time.Second, 50*time.Millisecond, "%v %v", ports.Secondary, err)
	assert.Equal(t, two, ports.Secondary[0].Subnets)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("2001:db8:0:113::/64")}, ports.Secondary[0].Subnets6)
	require.Eventually(t, func() bool {
		changes, err = db.EnsureSecondaryUplink(ctx, "br-ex", "eth1", two)
		return err == nil && len(changes) == 1
	}, 5*time.Second, 50*time.Millisecond, "%v %v", changes, err)
	assert.Equal(t, []string{"removed ovs-srcip.io/egress-subnets6 from eth1"}, changes)
	_, err = db.EnsureSecondaryUplink(ctx, "br-ex", "eth2", []netip.Prefix{netip.MustParsePrefix("2001:db8:0:113::/64")})
	require.ErrorContains(t, err, "no IPv4 subnet", "an IPv6 subnet alone is no secondary uplink")

	// A malformed IPv6 value keeps the NIC and its IPv4 subnets (their egress IPs still leave
	// through it) and marks its IPv6 subnets unreadable (every IPv6 egress IP declined here).
	sb.Vsctl(t, "set", "Interface", "eth1", `external_ids:ovs-srcip.io/egress-subnets6="bogus"`)
	require.Eventually(t, func() bool {
		ports, err = db.EnsureIntegration(ctx, c)
		return err == nil && len(ports.Secondary) == 1 && ports.Secondary[0].Subnets6Unreadable != ""
	}, 5*time.Second, 50*time.Millisecond, "%v %v", ports.Secondary, err)
	assert.Equal(t, two, ports.Secondary[0].Subnets)
	assert.Empty(t, ports.Secondary[0].Subnets6)
	sb.Vsctl(t, "remove", "Interface", "eth1", "external_ids", "ovs-srcip.io/egress-subnets6")

	// A malformed value: the port is ignored (and still no primary candidate).
	sb.Vsctl(t, "set", "Interface", "eth1", `external_ids:ovs-srcip.io/egress-subnets="bogus"`)
	require.Eventually(t, func() bool {
		ports, err = db.EnsureIntegration(ctx, c)
		return err == nil && len(ports.Secondary) == 0
	}, 5*time.Second, 50*time.Millisecond, "%v", err)

	_, err = db.EnsureSecondaryUplink(ctx, "br-nope", "eth2", subnets)
	require.ErrorIs(t, err, ofctl.ErrBridgeNotFound)
	_, err = db.EnsureSecondaryUplink(ctx, "br-ex", "eth2", nil)
	require.Error(t, err)
}

func TestParseEgressSubnets(t *testing.T) {
	got, err := ofctl.ParseEgressSubnets(" 203.0.113.7/24, 198.18.0.0/15")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.18.0.0/15")}, got)
	for _, bad := range []string{"", ",", "2001:db8::/64", "203.0.113.0"} {
		_, err := ofctl.ParseEgressSubnets(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseEgressSubnets6(t *testing.T) {
	got, err := ofctl.ParseEgressSubnets6(" 2001:db8:0:113::7/64, 2001:db8:1::/48")
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("2001:db8:0:113::/64"), netip.MustParsePrefix("2001:db8:1::/48")}, got)
	for _, bad := range []string{"", ",", "203.0.113.0/24", "::ffff:203.0.113.0/120", "2001:db8::"} {
		_, err := ofctl.ParseEgressSubnets6(bad)
		assert.Error(t, err, bad)
	}
}

func mustAtoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}
