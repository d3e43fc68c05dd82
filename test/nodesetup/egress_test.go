package nodesetup_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/nodesetup"
)

// --egress-interface (C38, docs/egress.md "Secondary NICs"): the real binary makes eth1
// (203.0.113.13/24, its own route 10.60.0.0/16 via 203.0.113.254) a secondary uplink of br-ex
// with source routing; a second run changes nothing; node-teardown puts eth1 back as it was.
func TestNodeSetupEgressInterface(t *testing.T) {
	bin := agentBinary(t)
	n := startNode(t)
	peer2 := n.peer + "2"
	must(t, nil, "ip", "netns", "add", peer2)
	t.Cleanup(func() { _, _ = run(t, nil, "ip", "netns", "del", peer2) })
	must(t, nil, "ip", "link", "add", "name", "eth1", "netns", n.netns, "type", "veth", "peer", "name", "p1", "netns", peer2)
	must(t, nil, "ip", "-n", peer2, "addr", "add", "203.0.113.1/24", "dev", "p1")
	must(t, nil, "ip", "-n", peer2, "link", "set", "p1", "up")
	must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "-q", "-w", "net.ipv6.conf.eth1.disable_ipv6=1")
	must(t, nil, "ip", "-n", n.netns, "addr", "add", "203.0.113.13/24", "dev", "eth1")
	must(t, nil, "ip", "-n", n.netns, "link", "set", "eth1", "up")
	must(t, nil, "ip", "-n", n.netns, "route", "add", "10.60.0.0/16", "via", "203.0.113.254", "dev", "eth1")

	src := filepath.Join(n.dir, "cni-src")
	require.NoError(t, os.MkdirAll(src, 0o755))
	for _, p := range nodesetup.CNIPlugins {
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte("#!/bin/sh\n"), 0o755))
	}
	common := []string{"--ovsdb=unix:" + n.dir + "/db.sock", "--ovs-rundir=" + n.dir, "--state-dir=" + filepath.Join(n.dir, "state"),
		"--cni-bin-dir=" + filepath.Join(n.dir, "bin"), "--cni-conf-dir=" + filepath.Join(n.dir, "net.d"), "--cni-data-dir=" + filepath.Join(n.dir, "cni-data")}
	base := append([]string{"node-setup", "--nic=auto", "--datapath-type=netdev", "--cluster-cidrs=10.244.0.0/16",
		"--pod-cidr=10.244.1.0/24", "--cni-source-dir=" + src}, common...)
	setup := append(slices.Clone(base), "--egress-interface=eth1=203.0.113.1")

	// eth2: up, no address yet; eth3: an address in the primary NIC's subnet.
	must(t, nil, "ip", "link", "add", "name", "eth2", "netns", n.netns, "type", "veth", "peer", "name", "p2", "netns", peer2)
	must(t, nil, "ip", "link", "add", "name", "eth3", "netns", n.netns, "type", "veth", "peer", "name", "p3", "netns", peer2)
	must(t, nil, "ip", "-n", n.netns, "link", "set", "eth2", "up")
	must(t, nil, "ip", "-n", n.netns, "addr", "add", "192.0.2.20/24", "dev", "eth3", "noprefixroute")

	// Bad values are refused before anything changes (the primary NIC also when --nic=auto
	// picks it; a router that is the NIC's own, network or broadcast address; a subnet that
	// overlaps another interface's).
	bads := []struct{ arg, nic, msg string }{
		{"--egress-interface=eth1=2001:db8::1", "", "is not an IPv4 address"},
		{"--egress-interface=eth9", "", "--egress-interface eth9: Link not found"},
		{"--egress-interface=eth0", "--nic=eth0", "that is the primary NIC"},
		{"--egress-interface=eth0=192.0.2.1", "", "that is the primary NIC"},
		{"--egress-interface=eth2=203.0.113.1", "", "eth2 has no IPv4 address"},
		{"--egress-interface=eth1=203.0.113.13", "", "router 203.0.113.13 is the NIC's own address"},
		{"--egress-interface=eth1=203.0.113.255", "", "network or broadcast address of 203.0.113.0/24"},
		{"--egress-interface=eth1=198.51.100.1", "", "router 198.51.100.1 is not inside the NIC's subnets"},
		{"--egress-interface=eth3=192.0.2.1", "", "its subnet 192.0.2.0/24 overlaps 192.0.2.10/24 on eth0"},
	}
	for _, b := range bads {
		args := append(slices.Clone(base), b.arg)
		if b.nic != "" {
			args = append(args, b.nic)
		}
		out, err := n.agent(t, bin, args...)
		require.ErrorContains(t, err, b.msg, b.arg)
		assert.NotContains(t, out, "changed: ", b.arg)
	}
	must(t, nil, "ip", "-n", n.netns, "addr", "flush", "dev", "eth3")

	out, err := n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: added eth1 to br-ex (tag 4094, ovs-srcip.io/egress-subnets=203.0.113.0/24)")
	assert.Contains(t, out, "changed: ip rule from 203.0.113.0/24 lookup 7100 (default via 203.0.113.1 dev br-ex)")
	n.ping(t)
	ports, err := n.vsctl(t, "list-ports", "br-ex")
	require.NoError(t, err)
	assert.Equal(t, "eth0\neth1", strings.TrimSpace(ports))
	tag, err := n.vsctl(t, "get", "Port", "eth1", "tag")
	require.NoError(t, err)
	assert.Equal(t, "4094", strings.TrimSpace(tag))
	ids, err := n.vsctl(t, "get", "Interface", "eth1", "external_ids")
	require.NoError(t, err)
	assert.Contains(t, ids, `"ovs-srcip.io/egress-subnets"="203.0.113.0/24"`)
	addrs := must(t, nil, "ip", "-n", n.netns, "-4", "-o", "addr", "show")
	assert.Contains(t, addrs, "br-ex    inet 203.0.113.13/24")
	assert.NotContains(t, addrs, "eth1    inet")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-4", "rule", "show"), "7100:\tfrom 203.0.113.0/24 lookup 7100")
	table := must(t, nil, "ip", "-n", n.netns, "-4", "route", "show", "table", "7100")
	assert.Contains(t, table, "default via 203.0.113.1 dev br-ex")
	assert.Contains(t, table, "10.60.0.0/16 via 203.0.113.254 dev br-ex")
	assert.Contains(t, table, "203.0.113.0/24 dev br-ex proto static scope link src 203.0.113.13")
	main := must(t, nil, "ip", "-n", n.netns, "-4", "route", "show")
	assert.Contains(t, main, "10.60.0.0/16 via 203.0.113.254 dev br-ex")
	assert.Contains(t, main, "default via "+peerIP+" dev br-ex", "the primary default route stays")
	// The host routes by source: the egress subnet to the second router, the rest as before.
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "route", "get", "198.51.100.20", "from", "203.0.113.50", "iif", "br-ex"), "via 203.0.113.1 dev br-ex")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "route", "get", "198.51.100.20"), "via "+peerIP+" dev br-ex")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-o", "link", "show", "eth1"), "NOARP")
	assert.Equal(t, "net.ipv4.conf.eth1.rp_filter = 1", strings.TrimSpace(must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "net.ipv4.conf.eth1.rp_filter")))
	script, err := os.ReadFile(filepath.Join(n.dir, "state", nodesetup.BootScript))
	require.NoError(t, err)
	assert.Contains(t, string(script), "ip rule add from 203.0.113.0/24 lookup 7100 priority 7100")
	assert.Regexp(t, `ip addr replace 203.0.113.13/24 (broadcast \S+ )?dev br-ex`, string(script))

	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "node-setup: nothing changed")

	// The NIC's global IPv6 addresses (they stay on the NIC) are recorded for the agent in a key
	// of their own, which declines an IPv6 egress IP inside them: no IPv6 source routing yet.
	must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "-q", "-w", "net.ipv6.conf.eth1.accept_ra=0", "net.ipv6.conf.eth1.disable_ipv6=0")
	must(t, nil, "ip", "-n", n.netns, "addr", "add", "2001:db8:0:113::13/64", "dev", "eth1", "nodad")
	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: set ovs-srcip.io/egress-subnets6=2001:db8:0:113::/64 on eth1")
	ids, err = n.vsctl(t, "get", "Interface", "eth1", "external_ids")
	require.NoError(t, err)
	assert.Contains(t, ids, `"ovs-srcip.io/egress-subnets"="203.0.113.0/24"`)
	assert.Contains(t, ids, `"ovs-srcip.io/egress-subnets6"="2001:db8:0:113::/64"`)
	state, err := os.ReadFile(filepath.Join(n.dir, "state", nodesetup.EgressStateFile))
	require.NoError(t, err)
	assert.Contains(t, string(state), `"subnets6": [`)
	assert.NotContains(t, must(t, nil, "ip", "-n", n.netns, "-6", "rule", "show"), "7100", "no IPv6 source routing")
	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "node-setup: nothing changed")
	must(t, nil, "ip", "-n", n.netns, "addr", "del", "2001:db8:0:113::13/64", "dev", "eth1")
	must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "-q", "-w", "net.ipv6.conf.eth1.disable_ipv6=1")
	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: removed ovs-srcip.io/egress-subnets6 from eth1")
	ids, err = n.vsctl(t, "get", "Interface", "eth1", "external_ids")
	require.NoError(t, err)
	assert.NotContains(t, ids, "egress-subnets6")

	// The table is kept exact, and said so: a route deleted by hand comes back, a stray one goes.
	must(t, nil, "ip", "-n", n.netns, "route", "del", "default", "table", "7100")
	must(t, nil, "ip", "-n", n.netns, "route", "add", "10.99.0.0/16", "via", "203.0.113.7", "dev", "br-ex", "table", "7100")
	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: route 0.0.0.0/0 via 203.0.113.1 dev br-ex table 7100")
	assert.Contains(t, out, "changed: deleted route 10.99.0.0/16 via 203.0.113.7 from table 7100")
	table = must(t, nil, "ip", "-n", n.netns, "-4", "route", "show", "table", "7100")
	assert.Contains(t, table, "default via 203.0.113.1 dev br-ex")
	assert.NotContains(t, table, "10.99.0.0/16")

	// Once set up: a port OVS already has (the primary uplink in br-ex, the gateway port in
	// br-int) is refused before anything changes, --nic=auto now finding br-ex.
	for _, bad := range []string{"--egress-interface=eth0=192.0.2.1", "--egress-interface=srcip-gw0=10.244.1.2"} {
		out, err := n.agent(t, bin, append(slices.Clone(base), bad)...)
		require.ErrorContains(t, err, "already a port of OVS bridge", bad)
		assert.NotContains(t, out, "changed: ", bad)
	}

	out, err = n.agent(t, bin, append([]string{"node-teardown", "--flow-snapshot="}, common...)...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: eth1 has its 1 addresses and 1 routes back, out of br-ex")
	addrs = must(t, nil, "ip", "-n", n.netns, "-4", "-o", "addr", "show")
	assert.Contains(t, addrs, "eth1    inet 203.0.113.13/24")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-4", "route", "show"), "10.60.0.0/16 via 203.0.113.254 dev eth1")
	assert.NotContains(t, must(t, nil, "ip", "-n", n.netns, "-4", "rule", "show"), "7100")
	assert.Empty(t, strings.TrimSpace(must(t, nil, "ip", "-n", n.netns, "-4", "route", "show", "table", "7100")))
	assert.NotContains(t, must(t, nil, "ip", "-n", n.netns, "-o", "link", "show", "eth1"), "NOARP")
	assert.Equal(t, "net.ipv4.conf.eth1.rp_filter = 0", strings.TrimSpace(must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "net.ipv4.conf.eth1.rp_filter")))
	must(t, nil, "ip", "netns", "exec", n.netns, "ping", "-c", "1", "-W", "2", "203.0.113.1")
	n.ping(t)

	// A secondary NIC that is gone by teardown time (unplugged) does not stall node-teardown:
	// its addresses leave br-ex, the state file goes, a second run changes nothing.
	_, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	must(t, nil, "ip", "-n", n.netns, "link", "del", "eth1")
	out, err = n.agent(t, bin, append([]string{"node-teardown", "--flow-snapshot="}, common...)...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: eth1 is gone: its 1 addresses taken off br-ex, nothing to put back")
	assert.NoFileExists(t, filepath.Join(n.dir, "state", nodesetup.EgressStateFile))
	assert.NotContains(t, must(t, nil, "ip", "-n", n.netns, "-4", "rule", "show"), "7100")
	out, err = n.agent(t, bin, append([]string{"node-teardown", "--flow-snapshot="}, common...)...)
	require.NoError(t, err)
	assert.Contains(t, out, "node-teardown: nothing changed")
}
