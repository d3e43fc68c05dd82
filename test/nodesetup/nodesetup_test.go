// Package nodesetup_test runs `srcip-agent node-setup` and `node-teardown` (the real binary) in
// a "node" network namespace with its own ovsdb-server and ovs-vswitchd (userspace datapath): a
// veth eth0 with 192.0.2.10/24 and a default route via a peer namespace's 192.0.2.1.
package nodesetup_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/nodesetup"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	nodeIP = "192.0.2.10"
	peerIP = "192.0.2.1"
)

func run(t *testing.T, env []string, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("$ %s\n%s", strings.Join(argv, " "), strings.TrimRight(string(out), "\n"))
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
	}
	return string(out), nil
}

func must(t *testing.T, env []string, argv ...string) string {
	t.Helper()
	out, err := run(t, env, argv...)
	require.NoError(t, err)
	return out
}

// agentBinary is $SRCIP_AGENT (make test-e2e) or a fresh build.
func agentBinary(t *testing.T) string {
	if p := os.Getenv("SRCIP_AGENT"); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "srcip-agent")
	must(t, nil, "go", "build", "-o", bin, "../../cmd/srcip-agent")
	return bin
}

type node struct {
	netns, peer, dir string
}

func (n *node) ovsEnv() []string {
	return []string{"OVS_RUNDIR=" + n.dir, "OVS_DBDIR=" + n.dir, "OVS_LOGDIR=" + n.dir}
}

func (n *node) vsctl(t *testing.T, args ...string) (string, error) {
	return run(t, nil, append([]string{"ovs-vsctl", "--db=unix:" + n.dir + "/db.sock", "--timeout=10"}, args...)...)
}

func (n *node) ns(t *testing.T, argv ...string) (string, error) {
	return run(t, nil, append([]string{"ip", "netns", "exec", n.netns}, argv...)...)
}

func pidOf(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// startNode builds the two namespaces and the node's OVS; everything goes in t.Cleanup.
func startNode(t *testing.T) *node { return startNodeFamilies(t, false) }

// The dual-stack uplink of startNodeFamilies(t, true): eth0 also has nodeIP6/64 and a default
// route via the peer's link-local peerLL, and a static route to route6 via peerIP6.
const (
	nodeIP6 = "2001:db8:1::10"
	peerIP6 = "2001:db8:1::1"
	peerLL  = "fe80::1"
	route6  = "2001:db8:99::/48"
)

// startNodeFamilies is startNode; with dual the namespaces have IPv6 on and eth0 the IPv6
// addresses and routes above besides the IPv4 ones.
func startNodeFamilies(t *testing.T, dual bool) *node {
	require.NoError(t, lab.CheckPrograms(lab.LabPrograms))
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	prefix := "nsu" + hex.EncodeToString(b)
	// Not t.TempDir(): unix socket paths must stay under 108 bytes.
	dir, err := os.MkdirTemp("", prefix)
	require.NoError(t, err)
	n := &node{netns: prefix + "n", peer: prefix + "p", dir: dir}
	t.Cleanup(func() {
		for _, d := range []string{"ovs-vswitchd", "ovsdb-server"} {
			pid := pidOf(t, filepath.Join(dir, d+".pid"))
			if pid == 0 {
				continue
			}
			args := []string{"ovs-appctl", "-t", filepath.Join(dir, fmt.Sprintf("%s.%d.ctl", d, pid)), "exit"}
			if d == "ovs-vswitchd" {
				args = append(args, "--cleanup")
			}
			_, _ = run(t, nil, args...)
			for i := 0; i < 50 && lab.PidAlive(pid); i++ {
				time.Sleep(100 * time.Millisecond)
			}
			if lab.PidAlive(pid) {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
		}
		_, _ = run(t, nil, "ip", "netns", "del", n.netns)
		_, _ = run(t, nil, "ip", "netns", "del", n.peer)
		os.RemoveAll(dir)
	})
	v6off := "1"
	if dual {
		v6off = "0"
	}
	for _, ns := range []string{n.netns, n.peer} {
		must(t, nil, "ip", "netns", "add", ns)
		must(t, nil, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6="+v6off, "net.ipv6.conf.default.disable_ipv6="+v6off)
		must(t, nil, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	must(t, nil, "ip", "link", "add", "name", "eth0", "netns", n.netns, "type", "veth", "peer", "name", "p0", "netns", n.peer)
	must(t, nil, "ip", "-n", n.peer, "addr", "add", peerIP+"/24", "dev", "p0")
	must(t, nil, "ip", "-n", n.peer, "link", "set", "p0", "up")
	must(t, nil, "ip", "-n", n.netns, "addr", "add", nodeIP+"/24", "dev", "eth0")
	must(t, nil, "ip", "-n", n.netns, "link", "set", "eth0", "up")
	must(t, nil, "ip", "-n", n.netns, "route", "add", "default", "via", peerIP, "metric", "50")
	// A second, static route through eth0 (with its own src), moved and restored like the default.
	must(t, nil, "ip", "-n", n.netns, "route", "add", "198.51.100.0/24", "via", peerIP, "src", nodeIP, "metric", "7")
	if dual {
		must(t, nil, "ip", "-n", n.peer, "addr", "add", peerIP6+"/64", "dev", "p0", "nodad")
		must(t, nil, "ip", "-n", n.peer, "addr", "add", peerLL+"/64", "dev", "p0", "nodad")
		must(t, nil, "ip", "-n", n.netns, "addr", "add", nodeIP6+"/64", "dev", "eth0", "nodad")
		must(t, nil, "ip", "-n", n.netns, "-6", "route", "add", "default", "via", peerLL, "dev", "eth0", "metric", "50")
		must(t, nil, "ip", "-n", n.netns, "-6", "route", "add", route6, "via", peerIP6, "metric", "7")
	}

	db := filepath.Join(dir, "conf.db")
	must(t, nil, "ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema")
	must(t, n.ovsEnv(), "ip", "netns", "exec", n.netns, "ovsdb-server", db, "--remote=punix:"+dir+"/db.sock",
		"--pidfile", "--detach", "--no-chdir", "--log-file", "-vconsole:off")
	_, err = n.vsctl(t, "--no-wait", "init")
	require.NoError(t, err)
	must(t, n.ovsEnv(), "ip", "netns", "exec", n.netns, "ovs-vswitchd", "unix:"+dir+"/db.sock",
		"--pidfile", "--detach", "--no-chdir", "--log-file", "-vconsole:off")
	return n
}

func (n *node) agent(t *testing.T, bin string, args ...string) (string, error) {
	return run(t, nil, append([]string{"nsenter", "--net=/run/netns/" + n.netns, bin}, args...)...)
}

func (n *node) ping(t *testing.T) {
	t.Helper()
	out, err := n.ns(t, "ping", "-c", "3", "-i", "0.2", "-W", "2", peerIP)
	require.NoError(t, err, "ping %s from the node", peerIP)
	assert.Contains(t, out, " 0% packet loss")
	assert.NotContains(t, out, "DUP!", "duplicate replies")
}

func TestNodeSetupAndTeardown(t *testing.T) {
	bin := agentBinary(t)
	n := startNode(t)
	n.ping(t)

	// Whatever files are in the source directory are installed (srcip-cni is another branch's).
	src := filepath.Join(n.dir, "cni-src")
	require.NoError(t, os.MkdirAll(src, 0o755))
	for _, p := range nodesetup.CNIPlugins {
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte("#!/bin/sh\necho "+p+"\n"), 0o755))
	}
	binDir, confDir, dataDir := filepath.Join(n.dir, "bin"), filepath.Join(n.dir, "net.d"), filepath.Join(n.dir, "cni-data")
	common := []string{"--ovsdb=unix:" + n.dir + "/db.sock", "--ovs-rundir=" + n.dir, "--state-dir=" + filepath.Join(n.dir, "state"),
		"--cni-bin-dir=" + binDir, "--cni-conf-dir=" + confDir, "--cni-data-dir=" + dataDir}
	setup := append([]string{"node-setup", "--nic=auto", "--datapath-type=netdev", "--cluster-cidrs=10.244.0.0/16",
		"--pod-cidr=10.244.1.0/24", "--cni-source-dir=" + src}, common...)
	// The agent's flow snapshot (the DaemonSet's /run/ovs-srcip), which node-teardown removes.
	snapshot := filepath.Join(n.dir, "run-ovs-srcip", "flows.snapshot")
	teardown := append([]string{"node-teardown", "--flow-snapshot=" + snapshot}, common...)

	start := time.Now()
	out, err := n.agent(t, bin, setup...)
	require.NoError(t, err)
	t.Logf("first node-setup took %s", time.Since(start).Round(time.Millisecond))
	assert.Contains(t, out, "changed: moved eth0 into br-ex")

	n.ping(t)
	addrs := must(t, nil, "ip", "-n", n.netns, "-4", "-o", "addr", "show")
	assert.Contains(t, addrs, "br-ex    inet "+nodeIP+"/24")
	assert.NotContains(t, addrs, "eth0    inet")
	assert.Regexp(t, `srcip-gw0\s+inet 10\.244\.1\.1/24 .*scope link`, addrs, "the gateway address is link-scoped: never a masquerade's source")
	assert.Regexp(t, `srcip-gw0\s+inet `+regexp.QuoteMeta(nodeIP)+`/32 scope global noprefixroute`, addrs,
		"the node IP on srcip-gw0: what a masquerade out of it takes")
	routes := must(t, nil, "ip", "-n", n.netns, "-4", "route", "show")
	assert.Contains(t, routes, "default via "+peerIP+" dev br-ex")
	assert.Contains(t, routes, "metric 50")
	assert.Contains(t, routes, "198.51.100.0/24 via "+peerIP+" dev br-ex")
	assert.Contains(t, routes, "10.244.0.0/16 dev srcip-gw0 proto static scope link src "+nodeIP, "the host reaches pods on other nodes from the node IP")
	assert.NotContains(t, routes, "dev eth0")
	link := must(t, nil, "ip", "-n", n.netns, "-o", "link", "show", "srcip-gw0")
	assert.Contains(t, link, "mtu 1450")
	assert.Contains(t, link, ",UP")
	nodeEth0 := must(t, nil, "ip", "-n", n.netns, "-o", "link", "show", "eth0")
	brEx := must(t, nil, "ip", "-n", n.netns, "-o", "link", "show", "br-ex")
	assert.Equal(t, macOf(nodeEth0), macOf(brEx), "br-ex has the NIC's MAC")
	ports, err := n.vsctl(t, "list-ports", "br-ex")
	require.NoError(t, err)
	assert.Equal(t, "eth0", strings.TrimSpace(ports))
	ports, err = n.vsctl(t, "list-ports", "br-int")
	require.NoError(t, err)
	assert.Equal(t, "srcip-gw0", strings.TrimSpace(ports))
	dp, err := n.vsctl(t, "get", "bridge", "br-int", "datapath_type")
	require.NoError(t, err)
	assert.Equal(t, "netdev", strings.TrimSpace(dp))

	nft, err := n.ns(t, "nft", "list", "table", "ip", "ovs-srcip")
	require.NoError(t, err)
	assert.Contains(t, nft, "ip saddr 10.244.1.0/24 ip daddr != 10.244.0.0/16 masquerade")
	assert.Contains(t, nft, `iifname "srcip-gw0" accept`)
	assert.Contains(t, nft, `oifname "srcip-gw0" accept`)
	assert.Equal(t, "net.ipv4.ip_forward = 1", strings.TrimSpace(must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "net.ipv4.ip_forward")))
	_, err = n.ns(t, "nft", "list", "table", "ip6", "ovs-srcip")
	assert.Error(t, err, "a v4-only node gets no ip6 table")

	conf, err := os.ReadFile(filepath.Join(confDir, nodesetup.ConflistName))
	require.NoError(t, err)
	var cl map[string]any
	require.NoError(t, json.Unmarshal(conf, &cl))
	plugin := cl["plugins"].([]any)[0].(map[string]any)
	assert.Equal(t, "srcip-cni", plugin["type"])
	assert.Equal(t, "br-int", plugin["bridge"])
	assert.Equal(t, "unix:"+n.dir+"/db.sock", plugin["ovsdb"])
	assert.Equal(t, n.dir, plugin["ovsRunDir"])
	assert.EqualValues(t, 1450, plugin["mtu"])
	assert.Equal(t, "20s", plugin["flowWait"])
	assert.JSONEq(t, `{"type": "host-local", "ranges": [[{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}]],
		"routes": [{"dst": "0.0.0.0/0"}], "dataDir": "`+dataDir+`"}`, mustJSON(t, plugin["ipam"]))
	for _, p := range nodesetup.CNIPlugins {
		st, err := os.Stat(filepath.Join(binDir, p))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o755), st.Mode().Perm(), p)
	}
	confIno := inode(t, filepath.Join(confDir, nodesetup.ConflistName))

	// Again: nothing changes, and it says so.
	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "node-setup: nothing changed")
	assert.NotRegexp(t, `(?m)^changed: `, out)
	n.ping(t)

	// A bare socket path as --ovsdb is unix:PATH (the conflist keeps the unix: form: unchanged).
	bare := append(slices.Clone(setup), "--ovsdb="+n.dir+"/db.sock")
	out, err = n.agent(t, bin, bare...)
	require.NoError(t, err)
	assert.Contains(t, out, "node-setup: nothing changed")

	// Changed cluster CIDRs: the new route is added, the old one on srcip-gw0 removed.
	other := func(cidrs string) []string {
		return slices.DeleteFunc(append(slices.Clone(setup), "--cluster-cidrs="+cidrs), func(s string) bool { return s == "--cluster-cidrs=10.244.0.0/16" })
	}
	out, err = n.agent(t, bin, other("10.244.0.0/15")...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: removed stale route 10.244.0.0/16 dev srcip-gw0")
	routes = must(t, nil, "ip", "-n", n.netns, "-4", "route", "show")
	assert.Contains(t, routes, "10.244.0.0/15 dev srcip-gw0 proto static scope link src "+nodeIP)
	assert.NotContains(t, routes, "10.244.0.0/16")
	assert.Contains(t, routes, "10.244.1.0/24 dev srcip-gw0 proto kernel", "the gateway address's own route stays")
	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: removed stale route 10.244.0.0/15 dev srcip-gw0")

	// A cluster CIDR routed through another device, and a pod CIDR outside the cluster CIDRs,
	// are refused before anything changes.
	must(t, nil, "ip", "-n", n.netns, "route", "add", "10.250.0.0/16", "via", peerIP, "dev", "br-ex")
	out, err = n.agent(t, bin, other("10.244.0.0/16,10.250.0.0/16")...)
	require.ErrorContains(t, err, "cluster CIDR 10.250.0.0/16 is already routed via "+peerIP+" dev br-ex")
	assert.NotContains(t, out, "changed: ")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-4", "route", "show"), "10.250.0.0/16 via "+peerIP+" dev br-ex")
	must(t, nil, "ip", "-n", n.netns, "route", "del", "10.250.0.0/16")
	out, err = n.agent(t, bin, other("10.96.0.0/16")...)
	require.ErrorContains(t, err, "pod CIDR 10.244.1.0/24 is not inside the cluster CIDRs [10.96.0.0/16]")
	assert.NotContains(t, out, "changed: ")
	// A bad --ovsdb makes node-teardown remove nothing.
	_, err = n.agent(t, bin, append(slices.Clone(teardown), "--ovsdb=db.sock")...)
	require.ErrorContains(t, err, "want unix:PATH")
	_, err = os.Stat(filepath.Join(confDir, nodesetup.ConflistName))
	require.NoError(t, err, "conflist still there")

	// A changed MTU is written into the same conflist file (in place, same inode).
	out, err = n.agent(t, bin, append(setup, "--mtu=1400")...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: wrote "+filepath.Join(confDir, nodesetup.ConflistName))
	assert.Equal(t, confIno, inode(t, filepath.Join(confDir, nodesetup.ConflistName)), "conflist rewritten in place")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-o", "link", "show", "srcip-gw0"), "mtu 1400")

	// A reboot: ovs-vswitchd restarts without flows (br-ex is fail_mode=secure) and with its
	// internal ports new, the distribution's network configuration has put the address and the
	// default route on eth0 again. The boot script node-setup wrote puts br-ex back; node-setup
	// (the DaemonSet's init container) then finds br-ex in place.
	script := filepath.Join(n.dir, "state", nodesetup.BootScript)
	require.FileExists(t, script)
	vsd := pidOf(t, filepath.Join(n.dir, "ovs-vswitchd.pid"))
	must(t, nil, "ovs-appctl", "-t", filepath.Join(n.dir, fmt.Sprintf("ovs-vswitchd.%d.ctl", vsd)), "exit", "--cleanup")
	for i := 0; i < 50 && lab.PidAlive(vsd); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	require.False(t, lab.PidAlive(vsd))
	must(t, nil, "ip", "-n", n.netns, "addr", "add", nodeIP+"/24", "dev", "eth0")
	must(t, nil, "ip", "-n", n.netns, "route", "replace", "default", "via", peerIP, "dev", "eth0", "metric", "50")
	must(t, n.ovsEnv(), "ip", "netns", "exec", n.netns, "ovs-vswitchd", "unix:"+n.dir+"/db.sock",
		"--pidfile", "--detach", "--no-chdir", "--log-file", "-vconsole:off")
	_, err = n.ns(t, "ping", "-c", "1", "-W", "1", peerIP)
	require.Error(t, err, "no network after the reboot, before the boot script")
	must(t, append(n.ovsEnv(), "OVS_RUNDIR="+n.dir), "ip", "netns", "exec", n.netns, "sh", "-x", script)
	n.ping(t)
	addrs = must(t, nil, "ip", "-n", n.netns, "-4", "-o", "addr", "show")
	assert.Contains(t, addrs, "br-ex    inet "+nodeIP+"/24")
	assert.NotContains(t, addrs, "eth0    inet")
	must(t, append(n.ovsEnv(), "OVS_RUNDIR="+n.dir), "ip", "netns", "exec", n.netns, "sh", script) // twice: no error
	out, err = n.agent(t, bin, append(setup, "--mtu=1400")...)
	require.NoError(t, err)
	assert.Contains(t, out, "unchanged: br-ex exists (no NIC to move)")
	assert.Contains(t, out, "unchanged: boot script "+script)
	n.ping(t)

	// Teardown: everything back, twice.
	require.NoError(t, os.MkdirAll(filepath.Join(dataDir, nodesetup.NetworkName), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Dir(snapshot), 0o755))
	snapshotTmp := filepath.Join(filepath.Dir(snapshot), ".flows.snapshot.42") // an interrupted write's
	for _, p := range []string{snapshot, snapshotTmp} {
		require.NoError(t, os.WriteFile(p, []byte("snapshot"), 0o600))
	}
	out, err = n.agent(t, bin, teardown...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: eth0 has its 1 addresses and 2 routes back")
	assert.Contains(t, out, "changed: removed the flow snapshot "+snapshot)
	n.ping(t)
	addrs = must(t, nil, "ip", "-n", n.netns, "-4", "-o", "addr", "show")
	assert.Contains(t, addrs, "eth0    inet "+nodeIP+"/24")
	routes = must(t, nil, "ip", "-n", n.netns, "-4", "route", "show")
	assert.Contains(t, routes, "default via "+peerIP+" dev eth0")
	assert.Contains(t, routes, "metric 50")
	assert.Contains(t, routes, "198.51.100.0/24 via "+peerIP+" dev eth0")
	assert.Contains(t, routes, "src "+nodeIP+" metric 7")
	assert.NotContains(t, routes, "br-ex")
	assert.NotContains(t, routes, "srcip-gw0")
	assert.NotContains(t, must(t, nil, "ip", "-n", n.netns, "-o", "link", "show", "eth0"), "NOARP")
	assert.Equal(t, "net.ipv4.conf.eth0.rp_filter = 0", strings.TrimSpace(must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "net.ipv4.conf.eth0.rp_filter")))
	bridges, err := n.vsctl(t, "list-br")
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(bridges))
	links := must(t, nil, "ip", "-n", n.netns, "-o", "link", "show")
	assert.NotContains(t, links, "br-ex")
	assert.NotContains(t, links, "srcip-gw0")
	_, err = n.ns(t, "nft", "list", "table", "ip", "ovs-srcip")
	assert.Error(t, err, "nft table left")
	for _, p := range append([]string{filepath.Join(confDir, nodesetup.ConflistName), filepath.Join(n.dir, "state", nodesetup.StateFile), script,
		filepath.Join(dataDir, nodesetup.NetworkName), snapshot, snapshotTmp}, pluginPaths(binDir)...) {
		_, err := os.Stat(p)
		assert.ErrorIs(t, err, os.ErrNotExist, p)
	}
	assert.DirExists(t, filepath.Dir(snapshot), "the snapshot's directory (the DaemonSet's hostPath) stays")
	out, err = n.agent(t, bin, teardown...)
	require.NoError(t, err)
	assert.Contains(t, out, "node-teardown: nothing changed")
	n.ping(t)
}

func (n *node) ping6(t *testing.T) {
	t.Helper()
	out, err := n.ns(t, "ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", peerIP6)
	require.NoError(t, err, "ping %s from the node", peerIP6)
	assert.Contains(t, out, " 0% packet loss")
	assert.NotContains(t, out, "DUP!", "duplicate replies")
}

// Dual-stack: the uplink's global IPv6 address and IPv6 routes (a default route via the peer's
// link-local address, a static one) move into br-ex with the IPv4 ones and come back at teardown;
// srcip-gw0 holds both gateways, the IPv6 cluster CIDR is routed to it from the node's IPv6 pod gateway
// address; table ip6 ovs-srcip masquerades the IPv6 pod CIDR; IPv6 forwarding is on; the
// conflist has a range set per family. A later v4-only run removes what was IPv6.
func TestNodeSetupDualStack(t *testing.T) {
	bin := agentBinary(t)
	n := startNodeFamilies(t, true)
	n.ping(t)
	n.ping6(t)
	// New devices (br-ex's, srcip-gw0) start with IPv6 off, as on a host whose default is off
	// while the uplink has it on: node-setup turns it on where it puts IPv6 addresses.
	must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1")
	src := filepath.Join(n.dir, "cni-src")
	require.NoError(t, os.MkdirAll(src, 0o755))
	for _, p := range nodesetup.CNIPlugins {
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte("#!/bin/sh\necho "+p+"\n"), 0o755))
	}
	binDir, confDir, dataDir := filepath.Join(n.dir, "bin"), filepath.Join(n.dir, "net.d"), filepath.Join(n.dir, "cni-data")
	common := []string{"--ovsdb=unix:" + n.dir + "/db.sock", "--ovs-rundir=" + n.dir, "--state-dir=" + filepath.Join(n.dir, "state"),
		"--cni-bin-dir=" + binDir, "--cni-conf-dir=" + confDir, "--cni-data-dir=" + dataDir}
	setup := append([]string{"node-setup", "--nic=auto", "--datapath-type=netdev", "--cluster-cidrs=10.244.0.0/16,2001:db8:244::/56",
		"--pod-cidr=2001:db8:244:1::/64,10.244.1.0/24", "--cni-source-dir=" + src}, common...)
	teardown := append([]string{"node-teardown", "--flow-snapshot="}, common...)

	out, err := n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: moved eth0 into br-ex with 2 addresses and 4 routes")
	assert.Contains(t, out, "changed: net.ipv6.conf.eth0.disable_ipv6=1")
	n.ping(t)
	n.ping6(t)

	addrs6 := must(t, nil, "ip", "-n", n.netns, "-6", "-o", "addr", "show")
	assert.Regexp(t, `br-ex\s+inet6 `+regexp.QuoteMeta(nodeIP6)+`/64 scope global`, addrs6)
	assert.NotContains(t, addrs6, "eth0 ", "IPv6 off on the NIC (userspace datapath)")
	assert.Regexp(t, `srcip-gw0\s+inet6 2001:db8:244:1::1/64 scope global`, addrs6, "the IPv6 gateway")
	assert.NotRegexp(t, `inet6 2001:db8:\S+ .*tentative`, addrs6, "the global addresses are usable at once (nodad)")
	assert.Regexp(t, `srcip-gw0\s+inet 10\.244\.1\.1/24 .*scope link`, must(t, nil, "ip", "-n", n.netns, "-4", "-o", "addr", "show"), "the IPv4 gateway")
	routes6 := must(t, nil, "ip", "-n", n.netns, "-6", "route", "show")
	assert.Contains(t, routes6, "default via "+peerLL+" dev br-ex")
	assert.Contains(t, routes6, route6+" via "+peerIP6+" dev br-ex")
	assert.Contains(t, routes6, "2001:db8:244::/56 dev srcip-gw0 proto static src 2001:db8:244:1::1 metric 1024", "the host reaches pods on other nodes from its IPv6 pod gateway address")
	assert.Contains(t, routes6, "2001:db8:244:1::/64 dev srcip-gw0 proto kernel", "the node's IPv6 pod CIDR")
	assert.NotContains(t, routes6, "dev eth0")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-4", "route", "show"), "default via "+peerIP+" dev br-ex")

	nft6, err := n.ns(t, "nft", "list", "table", "ip6", "ovs-srcip")
	require.NoError(t, err)
	assert.Contains(t, nft6, "ip6 saddr 2001:db8:244:1::/64 ip6 daddr != 2001:db8:244::/56 masquerade")
	assert.Contains(t, nft6, `iifname "srcip-gw0" accept`)
	assert.Contains(t, nft6, `oifname "srcip-gw0" accept`)
	nft4, err := n.ns(t, "nft", "list", "table", "ip", "ovs-srcip")
	require.NoError(t, err)
	assert.Contains(t, nft4, "ip saddr 10.244.1.0/24 ip daddr != 10.244.0.0/16 masquerade")
	assert.NotContains(t, nft4, "2001:db8")
	assert.Equal(t, "net.ipv6.conf.all.forwarding = 1", strings.TrimSpace(must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "net.ipv6.conf.all.forwarding")))

	conf, err := os.ReadFile(filepath.Join(confDir, nodesetup.ConflistName))
	require.NoError(t, err)
	var cl map[string]any
	require.NoError(t, json.Unmarshal(conf, &cl))
	assert.JSONEq(t, `{"type": "host-local", "ranges": [[{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}], [{"subnet": "2001:db8:244:1::/64", "gateway": "2001:db8:244:1::1"}]],
		"routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}], "dataDir": "`+dataDir+`"}`, mustJSON(t, cl["plugins"].([]any)[0].(map[string]any)["ipam"]))
	script, err := os.ReadFile(filepath.Join(n.dir, "state", nodesetup.BootScript))
	require.NoError(t, err)
	assert.Contains(t, string(script), "ip addr replace "+nodeIP6+"/64 dev br-ex scope 0 nodad\n")
	assert.Contains(t, string(script), "ip -6 route replace default via "+peerLL+" dev br-ex metric 50")

	// Again: nothing changes.
	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "node-setup: nothing changed")
	assert.NotRegexp(t, `(?m)^changed: `, out)

	// A reboot (as in TestNodeSetupAndTeardown): ovs-vswitchd restarts without flows, the
	// distribution's configuration has put both families back on eth0; the boot script puts them
	// on br-ex again (ip -6 lines included).
	vsd := pidOf(t, filepath.Join(n.dir, "ovs-vswitchd.pid"))
	must(t, nil, "ovs-appctl", "-t", filepath.Join(n.dir, fmt.Sprintf("ovs-vswitchd.%d.ctl", vsd)), "exit", "--cleanup")
	for i := 0; i < 50 && lab.PidAlive(vsd); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	require.False(t, lab.PidAlive(vsd))
	must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "-q", "-w", "net.ipv6.conf.eth0.disable_ipv6=0")
	must(t, nil, "ip", "-n", n.netns, "addr", "add", nodeIP+"/24", "dev", "eth0")
	must(t, nil, "ip", "-n", n.netns, "addr", "add", nodeIP6+"/64", "dev", "eth0", "nodad")
	must(t, nil, "ip", "-n", n.netns, "route", "replace", "default", "via", peerIP, "dev", "eth0", "metric", "50")
	must(t, nil, "ip", "-n", n.netns, "-6", "route", "replace", "default", "via", peerLL, "dev", "eth0", "metric", "50")
	must(t, n.ovsEnv(), "ip", "netns", "exec", n.netns, "ovs-vswitchd", "unix:"+n.dir+"/db.sock",
		"--pidfile", "--detach", "--no-chdir", "--log-file", "-vconsole:off")
	must(t, n.ovsEnv(), "ip", "netns", "exec", n.netns, "sh", "-x", filepath.Join(n.dir, "state", nodesetup.BootScript))
	n.ping(t)
	n.ping6(t)
	addrs6 = must(t, nil, "ip", "-n", n.netns, "-6", "-o", "addr", "show")
	assert.Regexp(t, `br-ex\s+inet6 `+regexp.QuoteMeta(nodeIP6)+`/64 scope global`, addrs6)
	assert.NotContains(t, addrs6, "eth0 ")
	routes6 = must(t, nil, "ip", "-n", n.netns, "-6", "route", "show")
	assert.Contains(t, routes6, "default via "+peerLL+" dev br-ex")
	assert.Contains(t, routes6, route6+" via "+peerIP6+" dev br-ex")
	must(t, n.ovsEnv(), "ip", "netns", "exec", n.netns, "sh", filepath.Join(n.dir, "state", nodesetup.BootScript)) // twice: no error
	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "unchanged: br-ex exists (no NIC to move)")

	// Real packets through the masquerade: a pod (a netns on br-int, forwarded with NORMAL here:
	// no agent) pings the peer over each family; the peer has no route to the pod CIDRs, so a
	// reply comes back only to the node's address, i.e. only when the pod's packet was
	// masqueraded (table ip / ip6 ovs-srcip).
	n.podPing(t, true)
	// The control: without the IPv6 masquerade rule no IPv6 reply comes back; node-setup puts
	// the rule back (the table is not the one it would write).
	must(t, nil, "ip", "netns", "exec", n.netns, "nft", "flush", "chain", "ip6", "ovs-srcip", "postrouting")
	n.podPing(t, false)
	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: nftables table ip6 ovs-srcip")
	assert.Contains(t, out, "unchanged: nftables table ip ovs-srcip")
	n.podPing(t, true)

	// The node without its IPv6 pod CIDR: no IPv6 gateway, no IPv6 cluster route, no ip6 table;
	// the uplink's IPv6 stays on br-ex.
	v4only := slices.Clone(setup)
	for i, a := range v4only {
		switch {
		case strings.HasPrefix(a, "--pod-cidr="):
			v4only[i] = "--pod-cidr=10.244.1.0/24"
		case strings.HasPrefix(a, "--cluster-cidrs="):
			v4only[i] = "--cluster-cidrs=10.244.0.0/16"
		}
	}
	out, err = n.agent(t, bin, v4only...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: removed stale address 2001:db8:244:1::1/64 from srcip-gw0")
	assert.Contains(t, out, "changed: removed stale route 2001:db8:244::/56 dev srcip-gw0")
	assert.Contains(t, out, "changed: deleted nftables table ip6 ovs-srcip")
	_, err = n.ns(t, "nft", "list", "table", "ip6", "ovs-srcip")
	assert.Error(t, err, "a v4-only node has no ip6 table")
	assert.NotContains(t, must(t, nil, "ip", "-n", n.netns, "-6", "route", "show"), "srcip-gw0 proto static")
	n.ping6(t)

	// Teardown: eth0 gets its IPv6 (address, both routes, IPv6 on) back with the IPv4 ones.
	out, err = n.agent(t, bin, teardown...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: eth0 has its 2 addresses and 4 routes back")
	n.ping(t)
	n.ping6(t)
	addrs6 = must(t, nil, "ip", "-n", n.netns, "-6", "-o", "addr", "show")
	assert.Regexp(t, `eth0\s+inet6 `+regexp.QuoteMeta(nodeIP6)+`/64 scope global`, addrs6)
	assert.NotContains(t, addrs6, "br-ex")
	routes6 = must(t, nil, "ip", "-n", n.netns, "-6", "route", "show")
	assert.Contains(t, routes6, "default via "+peerLL+" dev eth0")
	assert.Contains(t, routes6, "metric 50")
	assert.Contains(t, routes6, route6+" via "+peerIP6+" dev eth0")
	assert.NotContains(t, routes6, "br-ex")
	assert.NotContains(t, routes6, "srcip-gw0")
	assert.Equal(t, "net.ipv6.conf.eth0.disable_ipv6 = 0", strings.TrimSpace(must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "net.ipv6.conf.eth0.disable_ipv6")))
	for _, fam := range []string{"ip", "ip6"} {
		_, err = n.ns(t, "nft", "list", "table", fam, "ovs-srcip")
		assert.Error(t, err, "nft table %s left", fam)
	}
	out, err = n.agent(t, bin, teardown...)
	require.NoError(t, err)
	assert.Contains(t, out, "node-teardown: nothing changed")
}

// podPing attaches a pod (netns <node>-pod: 10.244.1.5/24 and 2001:db8:244:1::5/64, default
// routes via srcip-gw0's gateways) to br-int with a NORMAL flow, pings the peer over IPv4 and
// IPv6 from it (the IPv6 ping fails unless v6ok), and removes it again.
func (n *node) podPing(t *testing.T, v6ok bool) {
	t.Helper()
	pod := n.netns + "-pod"
	must(t, nil, "ip", "netns", "add", pod)
	defer func() { _, _ = run(t, nil, "ip", "netns", "del", pod) }()
	must(t, nil, "ip", "link", "add", "name", "eth0", "netns", pod, "type", "veth", "peer", "name", "podh0", "netns", n.netns)
	// The host end as srcip-cni leaves it on the userspace datapath (hostEndQuiet).
	must(t, nil, "ip", "netns", "exec", n.netns, "sysctl", "-q", "-w", "net.ipv4.conf.podh0.forwarding=0", "net.ipv6.conf.podh0.disable_ipv6=1")
	must(t, nil, "ip", "-n", n.netns, "link", "set", "podh0", "arp", "off", "up")
	must(t, nil, "ip", "netns", "exec", pod, "sysctl", "-q", "-w", "net.ipv6.conf.eth0.accept_dad=0", "net.ipv6.conf.eth0.accept_ra=0")
	must(t, nil, "ip", "-n", pod, "addr", "add", "10.244.1.5/24", "dev", "eth0")
	must(t, nil, "ip", "-n", pod, "addr", "add", "2001:db8:244:1::5/64", "dev", "eth0")
	must(t, nil, "ip", "-n", pod, "link", "set", "eth0", "up")
	must(t, nil, "ip", "-n", pod, "route", "add", "default", "via", "10.244.1.1")
	must(t, nil, "ip", "-n", pod, "-6", "route", "add", "default", "via", "2001:db8:244:1::1")
	_, err := n.vsctl(t, "add-port", "br-int", "podh0")
	require.NoError(t, err)
	defer func() { _, _ = n.vsctl(t, "--if-exists", "del-port", "br-int", "podh0") }()
	must(t, n.ovsEnv(), "ovs-ofctl", "add-flow", "br-int", "priority=0,actions=NORMAL")
	defer func() { _, _ = run(t, n.ovsEnv(), "ovs-ofctl", "del-flows", "br-int") }()
	for _, dst := range []string{peerIP, peerIP6} {
		if dst == peerIP6 && !v6ok {
			_, err := run(t, nil, "ip", "netns", "exec", pod, "ping", "-c", "2", "-i", "0.2", "-W", "1", dst)
			require.Error(t, err, "ping %s from the pod without the IPv6 masquerade", dst)
			continue
		}
		out, err := run(t, nil, "ip", "netns", "exec", pod, "ping", "-c", "3", "-i", "0.2", "-W", "2", dst)
		require.NoError(t, err, "ping %s from the pod (masqueraded to the node's address)", dst)
		assert.Contains(t, out, " 0% packet loss")
		assert.NotContains(t, out, "DUP!")
	}
}

func pluginPaths(dir string) []string {
	var out []string
	for _, p := range nodesetup.CNIPlugins {
		out = append(out, filepath.Join(dir, p))
	}
	return out
}

func macOf(ipLinkLine string) string {
	f := strings.Fields(ipLinkLine)
	for i, w := range f {
		if w == "link/ether" && i+1 < len(f) {
			return f[i+1]
		}
	}
	return ""
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func inode(t *testing.T, path string) uint64 {
	st, err := os.Stat(path)
	require.NoError(t, err)
	return statIno(st)
}
