package nodesetup

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

func TestParseEgressInterface(t *testing.T) {
	e, err := ParseEgressInterface("eth1=203.0.113.1")
	require.NoError(t, err)
	assert.Equal(t, EgressInterface{NIC: "eth1", Router: netip.MustParseAddr("203.0.113.1")}, e)
	e, err = ParseEgressInterface("eth1.100")
	require.NoError(t, err)
	assert.Equal(t, EgressInterface{NIC: "eth1.100"}, e)
	for _, bad := range []string{"", "=1.2.3.4", "eth1=", "eth1=2001:db8::1", "eth1=foo", "eth1,eth2"} {
		_, err := ParseEgressInterface(bad)
		assert.Error(t, err, bad)
	}
}

// The NIC's table: its subnet on-link with its address as source, its own routes through a
// gateway of its subnet (a default route among them replaces the --egress-interface router),
// the router's default otherwise; the main table gets every route but the default.
func TestEgressTableRoutes(t *testing.T) {
	st := EgressNICState{NIC: "eth1", BridgeEx: "br-ex", Subnets: []string{"203.0.113.0/24"}, Router: "203.0.113.1", Table: 7100,
		Addrs:  []SavedAddr{{CIDR: "203.0.113.13/24"}},
		Routes: []SavedRoute{{Dst: "10.60.0.0/16", Gw: "203.0.113.254", Metric: 5}, {Dst: "10.70.0.0/16", Gw: "192.0.2.9"}}}
	got := egressTableRoutes(st)
	require.Len(t, got, 3)
	assert.Equal(t, "203.0.113.0/24", got[0].Dst)
	assert.Equal(t, "203.0.113.13", got[0].Src)
	assert.Equal(t, "10.60.0.0/16", got[1].Dst)
	assert.Equal(t, "203.0.113.254", got[1].Gw)
	assert.Equal(t, SavedRoute{Dst: "0.0.0.0/0", Gw: "203.0.113.1", Scope: 0, Protocol: 4}, got[2])
	assert.Len(t, st.mainRoutes(), 2)

	st.Routes = append(st.Routes, SavedRoute{Dst: "0.0.0.0/0", Gw: "203.0.113.2", Metric: 100})
	got = egressTableRoutes(st)
	require.Len(t, got, 3)
	assert.Equal(t, "203.0.113.2", got[2].Gw, "the NIC's own default route")
	assert.Len(t, st.mainRoutes(), 2, "the NIC's default route stays out of the main table")

	// NIC=ROUTER given: it replaces the NIC's own default route.
	given := st
	given.RouterGiven = true
	got = egressTableRoutes(given)
	require.Len(t, got, 3)
	assert.Equal(t, SavedRoute{Dst: "0.0.0.0/0", Gw: "203.0.113.1", Scope: 0, Protocol: 4}, got[2], "the given router")

	lines := RenderEgressBootLines([]EgressNICState{st})
	for _, want := range []string{
		"ip -4 addr flush dev eth1\n",
		"ip addr replace 203.0.113.13/24 dev br-ex scope 0\n",
		"ip route replace 203.0.113.0/24 dev br-ex src 203.0.113.13 metric 0 proto 4 scope 253 table 7100\n",
		"ip route replace default via 203.0.113.2 dev br-ex metric 100 proto 4 scope 0 table 7100\n",
		"ip rule show from 203.0.113.0/24 table 7100 priority 7100 | grep -q . || ip rule add from 203.0.113.0/24 lookup 7100 priority 7100\n",
	} {
		assert.Contains(t, lines, want)
	}
	assert.NotContains(t, lines, "ip route replace default via 203.0.113.2 dev br-ex metric 100 proto 0 scope 0\n")
}

// A router must be a host of the NIC's subnets other than the NIC itself.
func TestCheckRouter(t *testing.T) {
	subnets := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.0/31")}
	own := map[netip.Addr]bool{netip.MustParseAddr("203.0.113.13"): true}
	for _, ok := range []string{"203.0.113.1", "203.0.113.254", "198.51.100.0", "198.51.100.1"} {
		assert.NoError(t, checkRouter(netip.MustParseAddr(ok), subnets, own), ok)
	}
	for bad, msg := range map[string]string{
		"192.0.2.1":     "not inside the NIC's subnets",
		"203.0.113.13":  "the NIC's own address",
		"203.0.113.0":   "network or broadcast address of 203.0.113.0/24",
		"203.0.113.255": "network or broadcast address of 203.0.113.0/24",
	} {
		assert.ErrorContains(t, checkRouter(netip.MustParseAddr(bad), subnets, own), msg, bad)
	}
}

// A secondary NIC's IPv6 subnets (recorded for the agent, which declines an IPv6 egress IP in
// them): the networks of its global unicast addresses only, once each.
func TestGlobalIPv6Subnets(t *testing.T) {
	addr := func(cidr string) netlink.Addr {
		a, err := netlink.ParseAddr(cidr)
		require.NoError(t, err)
		return *a
	}
	got := globalIPv6Subnets([]netlink.Addr{
		addr("fe80::1/64"), addr("2001:db8:0:113::13/64"), addr("2001:db8:0:113::14/64"),
		addr("203.0.113.13/24"), addr("2001:db8:1::5/128"), addr("ff02::1/128"),
	})
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("2001:db8:0:113::/64"), netip.MustParsePrefix("2001:db8:1::5/128")}, got)
	assert.Empty(t, globalIPv6Subnets([]netlink.Addr{addr("fe80::1/64"), addr("192.0.2.1/24")}))
}
