package nodesetup

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/knftables"
)

func TestGatewayPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.1.0/24": "10.244.1.1/24", "10.244.1.77/24": "10.244.1.1/24", "172.16.0.0/16": "172.16.0.1/16",
	} {
		assert.Equal(t, want, GatewayPrefix(netip.MustParsePrefix(in)).String(), in)
	}
}

// The conflist has the contract's fields, one host-local range per pod CIDR in one range set, and
// chains portmap (nftables backend) with the portMappings capability, so that the runtime hands it
// the pods' hostPorts.
func TestRenderConflist(t *testing.T) {
	b, err := RenderConflist("br-int", "unix:/var/run/openvswitch/db.sock", "/var/run/openvswitch", 1450, 20*time.Second,
		"/var/lib/cni/networks", []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("10.245.0.0/25")})
	require.NoError(t, err)
	assert.JSONEq(t, `{"cniVersion": "1.1.0", "name": "ovs-srcip", "plugins": [
		{"type": "srcip-cni", "bridge": "br-int", "ovsdb": "unix:/var/run/openvswitch/db.sock",
		 "ovsRunDir": "/var/run/openvswitch", "mtu": 1450, "flowWait": "20s",
		 "ipam": {"type": "host-local",
		          "ranges": [[{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}, {"subnet": "10.245.0.0/25", "gateway": "10.245.0.1"}]],
		          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "/var/lib/cni/networks"}},
		{"type": "portmap", "capabilities": {"portMappings": true}, "backend": "nftables"}]}`, string(b))
	var v any
	require.NoError(t, json.Unmarshal(b, &v))
}

// Dual-stack: a range set per family (IPv4 first) and a default route per family; host-local
// then hands each pod an address of each family.
func TestRenderConflistDualStack(t *testing.T) {
	b, err := RenderConflist("br-int", "unix:/var/run/openvswitch/db.sock", "/var/run/openvswitch", 1450, 20*time.Second,
		"/var/lib/cni/networks", []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")})
	require.NoError(t, err)
	var cl struct {
		Plugins []struct {
			IPAM json.RawMessage `json:"ipam"`
		} `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal(b, &cl))
	assert.JSONEq(t, `{"type": "host-local",
		"ranges": [[{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}], [{"subnet": "fd00:10:244:1::/64", "gateway": "fd00:10:244:1::1"}]],
		"routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}], "dataDir": "/var/lib/cni/networks"}`, string(cl.Plugins[0].IPAM))
}

// The rules' comments carry a hash of the whole table: the same inputs give the same comments,
// any change of CIDRs or port gives others (that is how a run sees that the table is current).
func TestNFTObjectsFingerprint(t *testing.T) {
	pod := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	chains, rules := nftObjects(knftables.IPv4Family, pod, cluster, nil, "srcip-gw0")
	require.Len(t, chains, 2)
	require.Len(t, rules, 3)
	assert.Equal(t, "ip saddr { 10.244.1.0/24 } ip daddr != { 10.244.0.0/16 } masquerade", rules[0].Rule)
	assert.Equal(t, `iifname "srcip-gw0" accept`, rules[1].Rule)
	_, again := nftObjects(knftables.IPv4Family, pod, cluster, nil, "srcip-gw0")
	assert.Equal(t, *rules[0].Comment, *again[0].Comment)
	_, other := nftObjects(knftables.IPv4Family, pod, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, nil, "srcip-gw0")
	assert.NotEqual(t, *rules[0].Comment, *other[0].Comment)
	_, other = nftObjects(knftables.IPv4Family, pod, cluster, nil, "gw1")
	assert.NotEqual(t, *rules[1].Comment, *other[1].Comment)
	// The IPv4 table is the IPv4-only releases' (a node upgraded in place finds it unchanged).
	assert.Equal(t, "pods to outside the cluster: masquerade #7b739fbdd9e6", *rules[0].Comment)
}

// Routed pods: the non-masquerade CIDRs are a second daddr set, without the ones inside another
// (nftables refuses overlapping intervals); the rule and its hash change only when they are set.
func TestNFTObjectsNonMasquerade(t *testing.T) {
	pod := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}
	cluster := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	nm := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("198.51.100.11/32"),
		netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("198.51.100.7/24")}
	_, rules := nftObjects(knftables.IPv4Family, pod, cluster, nm, "srcip-gw0")
	assert.Equal(t, "ip saddr { 10.244.1.0/24 } ip daddr != { 10.244.0.0/16 } ip daddr != { 198.51.100.0/24, 169.254.0.0/16 } masquerade", rules[0].Rule)
	_, plain := nftObjects(knftables.IPv4Family, pod, cluster, nil, "srcip-gw0")
	assert.NotEqual(t, *plain[0].Comment, *rules[0].Comment)
	assert.Equal(t, "pods to outside the cluster: masquerade #7b739fbdd9e6", *plain[0].Comment)
}

// The ip6 twin: the same chains and forward rules, the masquerade with ip6 matches, its own hash.
func TestNFTObjectsIPv6(t *testing.T) {
	pod := []netip.Prefix{netip.MustParsePrefix("fd00:10:244:1::/64")}
	cluster := []netip.Prefix{netip.MustParsePrefix("fd00:10:244::/56")}
	chains, rules := nftObjects(knftables.IPv6Family, pod, cluster, nil, "srcip-gw0")
	require.Len(t, chains, 2)
	require.Len(t, rules, 3)
	assert.Equal(t, "ip6 saddr { fd00:10:244:1::/64 } ip6 daddr != { fd00:10:244::/56 } masquerade", rules[0].Rule)
	assert.Equal(t, `iifname "srcip-gw0" accept`, rules[1].Rule)
	assert.Equal(t, `oifname "srcip-gw0" accept`, rules[2].Rule)
	mixed := append(slices.Clone(pod), netip.MustParsePrefix("10.244.1.0/24"))
	assert.Equal(t, pod, ofFamily(mixed, knftables.IPv6Family))
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}, ofFamily(mixed, knftables.IPv4Family))
}

// Pod CIDRs: IPv4 at most /30, IPv6 at most /126, one IPv6 per node.
func TestCheckPodCIDRFamilies(t *testing.T) {
	pp := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	assert.NoError(t, checkPodCIDRFamilies(pp("10.244.1.0/24")))
	assert.NoError(t, checkPodCIDRFamilies(pp("10.244.1.0/24", "10.245.0.0/25", "fd00:10:244:1::/64")))
	assert.ErrorContains(t, checkPodCIDRFamilies(pp("10.244.1.0/31")), "IPv4 network of at most /30")
	assert.ErrorContains(t, checkPodCIDRFamilies(pp("10.244.1.0/24", "fd00::/127")), "IPv6 network of at most /126")
	assert.ErrorContains(t, checkPodCIDRFamilies(pp("10.244.1.0/24", "fd00:1::/64", "fd00:2::/64")), "at most one IPv6 pod CIDR")
}

// A pod CIDR outside the cluster CIDRs is refused before anything is touched (not even OVSDB:
// the endpoint here does not exist).
func TestSetupRefusesPodCIDROutsideCluster(t *testing.T) {
	_, err := Setup(t.Context(), Config{OVSDB: "unix:/nonexistent/db.sock",
		PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("192.168.1.0/24")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}})
	require.ErrorContains(t, err, "pod CIDR 192.168.1.0/24 is not inside the cluster CIDRs [10.244.0.0/16]")
	assert.NoError(t, checkPodCIDRsInCluster([]netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")},
		[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.244.0.0/16")}))
	assert.Error(t, checkPodCIDRsInCluster([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		[]netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}), "a pod CIDR wider than the cluster CIDR")
}

// node-teardown checks its flags and reaches OVSDB before it removes anything: a bad --ovsdb or
// an OVSDB that does not answer leaves the CNI files in place.
func TestTeardownRemovesNothingWithoutOVSDB(t *testing.T) {
	confDir, binDir := t.TempDir(), t.TempDir()
	conflist := filepath.Join(confDir, ConflistName)
	require.NoError(t, os.WriteFile(conflist, []byte("{}"), 0o644))
	plugin := filepath.Join(binDir, "srcip-cni")
	require.NoError(t, os.WriteFile(plugin, []byte("x"), 0o755))
	snapshot := filepath.Join(t.TempDir(), "flows.snapshot")
	require.NoError(t, os.WriteFile(snapshot, []byte("x"), 0o600))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for ep, want := range map[string]string{
		"db.sock":                          "want unix:PATH",
		t.TempDir() + "/db.sock":           "nothing was removed",
		"unix:" + t.TempDir() + "/db.sock": "nothing was removed",
	} {
		_, err := Teardown(ctx, Config{OVSDB: ep, CNIConfDir: confDir, CNIBinDir: binDir, StateDir: t.TempDir(), FlowSnapshot: snapshot})
		require.ErrorContains(t, err, want, ep)
		assert.FileExists(t, conflist, ep)
		assert.FileExists(t, plugin, ep)
		assert.FileExists(t, snapshot, ep)
	}
}

// Teardown's flow snapshot step removes the snapshot and the temporary files of an interrupted
// write (flowsnap.WriteFile's .flows.snapshot.*), nothing else in the directory, and the
// directory stays; a second run and a missing directory change nothing; "" leaves the file alone.
func TestTeardownRemovesFlowSnapshot(t *testing.T) {
	dir := t.TempDir()
	snapshot := filepath.Join(dir, "flows.snapshot")
	for _, f := range []string{snapshot, filepath.Join(dir, ".flows.snapshot.123456"), filepath.Join(dir, "other"), filepath.Join(dir, ".other.1")} {
		require.NoError(t, os.WriteFile(f, []byte("x"), 0o600))
	}
	var log []string
	r := &run{cfg: &Config{FlowSnapshot: snapshot, Logf: func(format string, args ...any) { log = append(log, fmt.Sprintf(format, args...)) }}}
	require.NoError(t, r.removeFlowSnapshot())
	assert.Equal(t, 2, r.res.Changes)
	assert.Equal(t, []string{"changed: removed the flow snapshot " + snapshot, "changed: removed the flow snapshot " + filepath.Join(dir, ".flows.snapshot.123456")}, log)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"other", ".other.1"}, names)

	log = nil
	require.NoError(t, r.removeFlowSnapshot())
	assert.Equal(t, 2, r.res.Changes, "a second run changes nothing")
	assert.Equal(t, []string{"unchanged: no flow snapshot " + snapshot}, log)

	r.cfg.FlowSnapshot = filepath.Join(dir, "missing", "flows.snapshot")
	require.NoError(t, r.removeFlowSnapshot())
	assert.Equal(t, 2, r.res.Changes)

	require.NoError(t, os.WriteFile(snapshot, []byte("x"), 0o600))
	r.cfg.FlowSnapshot = ""
	require.NoError(t, r.removeFlowSnapshot())
	assert.FileExists(t, snapshot)
}

// The boot script puts back what the state file records, on the bridge, with the NIC's flags.
func TestRenderBootScript(t *testing.T) {
	s := RenderBootScript(&State{NIC: "ens3", BridgeEx: "br-ex", ARPOffSet: true, RPFilter: "2",
		Addrs:  []SavedAddr{{CIDR: "192.0.2.10/24", Broadcast: "192.0.2.255"}},
		Routes: []SavedRoute{{Dst: "0.0.0.0/0", Gw: "192.0.2.1", Metric: 100, Protocol: 4}, {Dst: "198.51.100.0/24", Gw: "192.0.2.1", Src: "192.0.2.10", Protocol: 4, MTU: 1400}}},
		"/var/lib/ovs-srcip/node-setup.json")
	for _, want := range []string{
		"#!/bin/sh\n", "set -eu\n", "ovs-vsctl --timeout=120 wait-until Bridge br-ex\n",
		"if ! ovs-ofctl dump-flows br-ex table=0 | grep -q 'actions='; then\n\tovs-ofctl add-flow br-ex 'table=0,priority=0,actions=NORMAL'\nfi\n",
		"ip -4 addr flush dev ens3\n", "ip link set dev ens3 arp off\n", "sysctl -q -w net.ipv4.conf.ens3.rp_filter=1\n",
		"ip addr replace 192.0.2.10/24 broadcast 192.0.2.255 dev br-ex scope 0\n",
		"ip route replace default via 192.0.2.1 dev br-ex metric 100 proto 4 scope 0\n",
		"ip route replace 198.51.100.0/24 via 192.0.2.1 dev br-ex src 192.0.2.10 metric 0 proto 4 scope 0 mtu 1400\n",
	} {
		assert.Contains(t, s, want)
	}
	assert.Equal(t, `'a b'\''c'`, shellQuote("a b'c"))

	// IPv6: the NIC's global IPv6 addresses flushed, IPv6 off on it (userspace datapath), the
	// addresses nodad, the routes with ip -6.
	s = RenderBootScript(&State{NIC: "ens3", BridgeEx: "br-ex", IPv6Disabled: "0",
		Addrs:  []SavedAddr{{CIDR: "192.0.2.10/24"}, {CIDR: "2001:db8:1::10/64"}},
		Routes: []SavedRoute{{Dst: "::/0", Gw: "fe80::1", Metric: 1024, Protocol: 4}, {Dst: "2001:db8:99::/48", Gw: "2001:db8:1::1", Protocol: 4}}},
		"/var/lib/ovs-srcip/node-setup.json")
	for _, want := range []string{
		"sysctl -q -w net.ipv6.conf.br-ex.disable_ipv6=0\n", "ip -6 addr flush dev ens3 scope global\n", "sysctl -q -w net.ipv6.conf.ens3.disable_ipv6=1\n",
		"ip addr replace 2001:db8:1::10/64 dev br-ex scope 0 nodad\n",
		"ip -6 route replace default via fe80::1 dev br-ex metric 1024 proto 4 scope 0\n",
		"ip -6 route replace 2001:db8:99::/48 via 2001:db8:1::1 dev br-ex metric 0 proto 4 scope 0\n",
	} {
		assert.Contains(t, s, want)
	}
	assert.NotContains(t, s, "192.0.2.10/24 dev br-ex scope 0 nodad")
}

// The CNI install records what it puts in CNIBinDir, and teardown removes only that: a plugin
// that was on the node with the same content stays (the distribution's host-local), one with
// other content is kept aside and put back (an older loopback), one that was missing goes
// (portmap), srcip-cni always goes; a second setup changes nothing, a second teardown neither.
func TestCNIPluginsTeardownKeepsTheNodesOwn(t *testing.T) {
	src, bin, conf, data := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	for _, name := range CNIPlugins {
		require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte("ours "+name), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(bin, "host-local"), []byte("ours host-local"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "loopback"), []byte("the node's loopback"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "bridge"), []byte("the node's bridge"), 0o755))
	var log []string
	cfg := &Config{CNISourceDir: src, CNIBinDir: bin, CNIConfDir: conf, CNIDataDir: data, BridgeInt: "br-int",
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}, MTU: 1400,
		Logf: func(format string, args ...any) { log = append(log, fmt.Sprintf(format, args...)) }}
	r := &run{cfg: cfg}
	require.NoError(t, r.installCNI())
	for _, name := range CNIPlugins {
		b, err := os.ReadFile(filepath.Join(bin, name))
		require.NoError(t, err)
		assert.Equal(t, "ours "+name, string(b))
	}
	rec, err := readCNIRecord(bin)
	require.NoError(t, err)
	assert.Equal(t, CNIRecord{Installed: []string{"srcip-cni", "portmap"}, Replaced: []string{"loopback"}}, rec)

	changes := r.res.Changes
	require.NoError(t, (&run{cfg: cfg}).installCNI())
	again := &run{cfg: cfg}
	require.NoError(t, again.installCNI())
	assert.Zero(t, again.res.Changes, "a second setup changes nothing")
	assert.NotZero(t, changes)

	log = nil
	r = &run{cfg: cfg}
	require.NoError(t, r.removeCNI())
	t.Log(strings.Join(log, "\n"))
	entries, err := os.ReadDir(bin)
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(bin, e.Name()))
		require.NoError(t, err)
		got[e.Name()] = string(b)
	}
	assert.Equal(t, map[string]string{"host-local": "ours host-local", "loopback": "the node's loopback", "bridge": "the node's bridge"}, got)
	assert.Contains(t, log, "unchanged: kept "+filepath.Join(bin, "host-local")+": it was on the node before node-setup")
	assert.NoFileExists(t, filepath.Join(conf, ConflistName))

	r = &run{cfg: cfg}
	require.NoError(t, r.removeCNI())
	assert.Zero(t, r.res.Changes, "a second teardown changes nothing")
}

// The MTU rule per underlay family: Geneve adds 50 bytes over an IPv4 underlay, 70 over an IPv6
// one (a node whose InternalIP is IPv6); a node with an IPv6 pod CIDR needs a pod MTU of at least
// 1280, and the error names the least underlay MTU of its family (1330, 1350).
func TestMTURulePerUnderlayFamily(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8:0:2::11")
	assert.Equal(t, 50, UnderlayOverhead(v4))
	assert.Equal(t, 50, UnderlayOverhead(netip.Addr{}), "unknown node IP: br-ex's IPv4 address")
	assert.Equal(t, 70, UnderlayOverhead(v6))
	assert.Equal(t, 1430, 1500-UnderlayOverhead(v6), "the pod MTU on a 1500-byte IPv6 underlay")
	pods := []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:10:244:1::/64")}
	assert.NoError(t, checkIPv6MTU(1280, pods, v6))
	assert.NoError(t, checkIPv6MTU(1200, pods[:1], v6), "no IPv6 pod CIDR: no IPv6 minimum")
	assert.EqualError(t, checkIPv6MTU(1279, pods, v4), "pod MTU 1279 is below IPv6's minimum link MTU 1280 and the node has the IPv6 pod CIDR [fd00:10:244:1::/64]: give the underlay (br-ex) an MTU of at least 1330 (Geneve over IPv4 adds 50 bytes), or --mtu")
	assert.EqualError(t, checkIPv6MTU(1279, pods, v6), "pod MTU 1279 is below IPv6's minimum link MTU 1280 and the node has the IPv6 pod CIDR [fd00:10:244:1::/64]: give the underlay (br-ex) an MTU of at least 1350 (Geneve over IPv6 adds 70 bytes), or --mtu")
	assert.Equal(t, netip.MustParseAddr("10.244.1.1"), routeSourceV4Gateway(&Config{PodCIDRs: pods}))
	assert.False(t, routeSourceV4Gateway(&Config{PodCIDRs: pods[1:]}).IsValid())
}
