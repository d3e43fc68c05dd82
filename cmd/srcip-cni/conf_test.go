package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

const contractConf = `{"cniVersion": "1.1.0", "name": "ovs-srcip", "type": "srcip-cni",
 "bridge": "br-int", "ovsdb": "unix:/var/run/openvswitch/db.sock",
 "ovsRunDir": "/var/run/openvswitch", "mtu": 1450, "flowWait": "20s",
 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}]],
          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "/var/lib/cni/networks"}}`

// The conflist entry of the contract (issue 8) parses as written.
func TestParseConfContract(t *testing.T) {
	c, err := parseConf([]byte(contractConf), true)
	require.NoError(t, err)
	assert.Equal(t, "br-int", c.Bridge)
	assert.Equal(t, "unix:/var/run/openvswitch/db.sock", c.OVSDB)
	assert.Equal(t, "/var/run/openvswitch", c.OVSRunDir)
	assert.Equal(t, 1450, c.MTU)
	assert.Equal(t, 20*time.Second, c.FlowWait)
	assert.Equal(t, "host-local", c.IPAM.Type)
	assert.Equal(t, "1.1.0", c.CNIVersion)
	assert.Nil(t, c.PrevResult)
}

func TestParseConfDefaults(t *testing.T) {
	c, err := parseConf([]byte(`{"cniVersion":"1.0.0","name":"n","type":"srcip-cni","ipam":{"type":"host-local"}}`), true)
	require.NoError(t, err)
	assert.Equal(t, DefaultBridge, c.Bridge)
	assert.Equal(t, DefaultOVSDB, c.OVSDB)
	assert.Equal(t, DefaultOVSRunDir, c.OVSRunDir)
	assert.Equal(t, DefaultMTU, c.MTU)
	assert.Equal(t, DefaultFlowWait, c.FlowWait)
}

// A bare absolute socket path is taken as unix:PATH, as the agent's and node-setup's --ovsdb take it.
func TestParseConfBareOVSDBPath(t *testing.T) {
	c, err := parseConf([]byte(`{"type":"srcip-cni","ipam":{"type":"host-local"},"ovsdb":"/run/openvswitch/db.sock"}`), true)
	require.NoError(t, err)
	assert.Equal(t, "unix:/run/openvswitch/db.sock", c.OVSDB)
}

func TestParseConfErrors(t *testing.T) {
	for _, tc := range []struct{ conf, want string }{
		{`{`, "parse network configuration"},
		{`{"type":"srcip-cni"}`, `no "ipam" section`},
		{`{"type":"srcip-cni","ipam":{"type":"host-local"},"mtu":100}`, `"mtu" 100 out of range`},
		{`{"type":"srcip-cni","ipam":{"type":"host-local"},"flowWait":"soon"}`, `"flowWait" "soon"`},
		{`{"type":"srcip-cni","ipam":{"type":"host-local"},"flowWait":"-1s"}`, "must be positive"},
		{`{"type":"srcip-cni","ipam":{"type":"host-local"},"ovsdb":"db.sock"}`, "want unix:PATH"},
		{`{"cniVersion":"1.1.0","type":"srcip-cni","ipam":{"type":"host-local"},"prevResult":{"ips":"x"}}`, "parse prevResult"},
	} {
		_, err := parseConf([]byte(tc.conf), true)
		if assert.Error(t, err, tc.conf) {
			assert.Contains(t, err.Error(), tc.want, tc.conf)
		}
	}
	// STATUS-like callers may go without ipam.
	_, err := parseConf([]byte(`{"type":"srcip-cni"}`), false)
	assert.NoError(t, err)
}

// CHECK's prevResult is parsed into a 1.x result.
func TestParseConfPrevResult(t *testing.T) {
	conf := strings.TrimSuffix(contractConf, "}") + `, "prevResult": {"cniVersion": "1.1.0",
	 "interfaces": [{"name": "srcip0123456789", "mac": "02:00:00:00:00:01"}, {"name": "eth0", "mac": "02:00:00:00:00:02", "sandbox": "/var/run/netns/x"}],
	 "ips": [{"address": "10.244.1.5/24", "gateway": "10.244.1.1", "interface": 1}],
	 "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.1.1"}]}}`
	c, err := parseConf([]byte(conf), true)
	require.NoError(t, err)
	res, err := current.NewResultFromResult(c.PrevResult)
	require.NoError(t, err)
	assert.Equal(t, "10.244.1.5/24", ipAddresses(res))
	require.Len(t, res.Routes, 1)
}

func TestParseArgs(t *testing.T) {
	a, err := parseArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=1234-5678;OTHER=x")
	require.NoError(t, err)
	assert.Equal(t, "ns", string(a.K8S_POD_NAMESPACE))
	assert.Equal(t, "web-0", string(a.K8S_POD_NAME))
	assert.Equal(t, "1234-5678", string(a.K8S_POD_UID))

	_, err = parseArgs("K8S_POD_NAMESPACE=ns")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "lacks K8S_POD_NAMESPACE or K8S_POD_NAME")
	_, err = parseArgs("")
	assert.Error(t, err)
}

// Host-end names fit IFNAMSIZ, are stable, and differ per container and per interface.
func TestHostVethName(t *testing.T) {
	n := hostVethName("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0")
	assert.Len(t, n, 15)
	assert.True(t, strings.HasPrefix(n, "srcip"))
	assert.Equal(t, n, hostVethName("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0"))
	assert.NotEqual(t, n, hostVethName("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "net1"))
	assert.NotEqual(t, n, hostVethName("1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "eth0"))
}

// A result without a default route gets one via the IPv4 gateway; an existing one is kept.
func TestAddDefaultRoute(t *testing.T) {
	res := &current.Result{}
	require.NoError(t, json.Unmarshal([]byte(`{"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"}]}`), res))
	addDefaultRoutes(res)
	require.Len(t, res.Routes, 1)
	assert.Equal(t, "0.0.0.0/0", res.Routes[0].Dst.String())
	assert.Equal(t, "10.244.1.1", res.Routes[0].GW.String())
	addDefaultRoutes(res)
	assert.Len(t, res.Routes, 1)
}

// Dual-stack: a default route per family via that family's gateway; host-local's configured
// 0.0.0.0/0 (node-setup's conflist before IPv6) does not stand in for the IPv6 one.
func TestAddDefaultRoutesDualStack(t *testing.T) {
	res := &current.Result{}
	require.NoError(t, json.Unmarshal([]byte(`{"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1"},
		{"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}],"routes":[{"dst":"0.0.0.0/0"}]}`), res))
	addDefaultRoutes(res)
	require.Len(t, res.Routes, 2)
	assert.Equal(t, "0.0.0.0/0", res.Routes[0].Dst.String())
	assert.Nil(t, res.Routes[0].GW, "host-local's own route: ConfigureIface takes the family's gateway")
	assert.Equal(t, "::/0", res.Routes[1].Dst.String())
	assert.Equal(t, "fd00:10:244:1::1", res.Routes[1].GW.String())
	addDefaultRoutes(res)
	assert.Len(t, res.Routes, 2)
	assert.Equal(t, "10.244.1.5/24,fd00:10:244:1::5/64", ipAddresses(res), "external_ids:ip_addresses lists both")

	v6only := &current.Result{}
	require.NoError(t, json.Unmarshal([]byte(`{"ips":[{"address":"fd00:10:244:1::5/64","gateway":"fd00:10:244:1::1"}]}`), v6only))
	addDefaultRoutes(v6only)
	require.Len(t, v6only.Routes, 1)
	assert.Equal(t, "::/0", v6only.Routes[0].Dst.String())
}

func TestCheckFamilies(t *testing.T) {
	for _, tc := range []struct{ ips, want string }{
		{`[{"address":"10.244.1.5/24"}]`, ""},
		{`[{"address":"fd00:10:244:1::5/64"}]`, ""},
		{`[{"address":"10.244.1.5/24"},{"address":"fd00:10:244:1::5/64"}]`, ""},
		{`[]`, "no address"},
		{`[{"address":"10.244.1.5/24"},{"address":"10.244.2.5/24"}]`, "2 IPv4 and 0 IPv6 addresses"},
		{`[{"address":"fd00::5/64"},{"address":"fd01::5/64"}]`, "0 IPv4 and 2 IPv6 addresses"},
	} {
		res := &current.Result{}
		require.NoError(t, json.Unmarshal([]byte(`{"ips":`+tc.ips+`}`), res))
		err := checkFamilies(res)
		if tc.want == "" {
			assert.NoError(t, err, tc.ips)
		} else {
			assert.ErrorContains(t, err, tc.want, tc.ips)
		}
	}
}

func TestParseConfChained(t *testing.T) {
	c, err := parseConf([]byte(`{"cniVersion":"1.0.0","name":"n","type":"srcip-cni","mode":"chained","egressDestinations":["198.51.100.7/24"]}`), true)
	require.NoError(t, err, "chained mode needs no ipam")
	assert.Equal(t, DefaultEgressIfName, c.EgressIfName)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, c.EgressPrefixes)
	c, err = parseConf([]byte(`{"cniVersion":"1.0.0","name":"n","type":"srcip-cni","mode":"chained","egressDestinations":["198.51.100.7/24","2001:db8:0:100::7/64"]}`), true)
	require.NoError(t, err, "IPv6 destinations too")
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:0:100::/64")}, c.EgressPrefixes)
	for _, bad := range []string{
		`{"mode":"chained"}`,
		`{"mode":"chained","egressDestinations":["0.0.0.0/0"]}`,
		`{"mode":"chained","egressDestinations":["::/0"]}`,
		`{"mode":"chained","egressDestinations":["198.51.100.0/24","::ffff:198.51.100.0/120"]}`,
		`{"mode":"chained","egressDestinations":["198.51.100.0/24"],"egressIfName":"a-very-long-name-x"}`,
		`{"mode":"other","ipam":{"type":"host-local"}}`,
	} {
		_, err := parseConf([]byte(bad), true)
		assert.Error(t, err, bad)
	}
}

// Chained mode takes the main CNI's addresses by family, never by index: per family the first
// one on a sandbox interface, when a destination of that family is listed; an address of a
// host-side interface is no pod address. A prevResult with no address of a listed family is
// errNoChainedAddress with the prevResult (ADD passes it on unchanged).
func TestChainedAddressFamilies(t *testing.T) {
	base := `{"cniVersion":"1.1.0","name":"n","type":"srcip-cni","mode":"chained","egressDestinations":%s,
	 "prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"cni0"},{"name":"eth0","sandbox":"/var/run/netns/x"}],"ips":%s}}`
	both := `["198.51.100.0/24","2001:db8:0:100::/64"]`
	conf := func(dsts, ips string) *NetConf {
		t.Helper()
		c, err := parseConf([]byte(fmt.Sprintf(base, dsts, ips)), true)
		require.NoError(t, err)
		return c
	}
	dual := `[{"address":"fd00::1/64","interface":0},{"address":"fd00::5/64","interface":1},{"address":"fd00::6/64","interface":1},{"address":"10.0.0.5/24","interface":1}]`

	// v4+v6 (the IPv6 address first in ips, and one of the host's): one of each, IPv4 first.
	_, a, skipped, err := chainedAddresses(conf(both, dual))
	require.NoError(t, err)
	assert.Empty(t, skipped)
	require.NotNil(t, a.v4)
	require.NotNil(t, a.v6)
	assert.Equal(t, "10.0.0.5/24", a.v4.Address.String())
	assert.Equal(t, "fd00::5/64", a.v6.Address.String())
	assert.Equal(t, "10.0.0.5/24,fd00::5/64", a.ipAddresses())
	src, gw, ok := a.routeSrc(netip.MustParsePrefix("2001:db8:0:100::/64"))
	require.True(t, ok)
	assert.Equal(t, "fd00::5", src.String())
	assert.Equal(t, flows.ChainedGatewayIP6.String(), gw.String())
	src, gw, ok = a.routeSrc(netip.MustParsePrefix("198.51.100.0/24"))
	require.True(t, ok)
	assert.Equal(t, "10.0.0.5", src.String())
	assert.Equal(t, flows.ChainedGatewayIP.String(), gw.String())

	// Only IPv4 destinations: the pod's IPv6 address is not used (no IPv6 on the interface).
	_, a, _, err = chainedAddresses(conf(`["198.51.100.0/24"]`, dual))
	require.NoError(t, err)
	assert.Nil(t, a.v6)
	assert.Equal(t, "10.0.0.5/24", a.ipAddresses())

	// v6-only pod: its IPv6 address; the IPv4 destination is not routed (skipped).
	_, a, skipped, err = chainedAddresses(conf(both, `[{"address":"fd00::5/64","interface":1}]`))
	require.NoError(t, err)
	assert.Nil(t, a.v4)
	assert.Equal(t, "fd00::5/64", a.ipAddresses())
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, skipped)
	_, _, ok = a.routeSrc(netip.MustParsePrefix("198.51.100.0/24"))
	assert.False(t, ok)

	// v6-only pod, IPv4 destinations only: nothing to do, prevResult passed on.
	prev, a, _, err := chainedAddresses(conf(`["198.51.100.0/24"]`, `[{"address":"fd00::5/64","interface":1}]`))
	assert.ErrorIs(t, err, errNoChainedAddress)
	assert.Empty(t, a.ipAddresses())
	require.NotNil(t, prev)
	assert.Equal(t, "fd00::5/64", ipAddresses(prev))

	// Only a host-side address: none of the pod.
	_, _, _, err = chainedAddresses(conf(both, `[{"address":"10.0.0.1/24","interface":0}]`))
	assert.ErrorIs(t, err, errNoChainedAddress)
}
