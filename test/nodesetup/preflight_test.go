package nodesetup_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/nodesetup"
)

// startInNode starts argv in the node's netns, in a process group of its own (stopped by
// t.Cleanup), and waits for its first line of output when ready is set.
func (n *node) startInNode(t *testing.T, ready bool, argv ...string) int {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.netns}, argv...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	if ready {
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err, "%v did not start", argv)
		t.Logf("%v (pid %d): %s", argv, pid, strings.TrimSpace(line))
	}
	return pid
}

// killGroup kills the process group of pid and waits until pid holds no file (its sockets closed).
func killGroup(t *testing.T, pid int) {
	t.Helper()
	require.NoError(t, syscall.Kill(-pid, syscall.SIGKILL))
	for i := 0; i < 100; i++ {
		if fds, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd"); err != nil || len(fds) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("pid %d still holds its files", pid)
}

// node-setup refuses, before it changes anything (no bridge, eth0 keeps its address): a TCP port
// of the agent another process listens on (named with its pid), the Geneve port bound by another
// process, and a NIC configured by DHCP (a
// dynamic address: finite valid lifetime; a DHCP client process running for the NIC). Once the
// cause is gone, node-setup goes through.
func TestNodeSetupRefusesUpFront(t *testing.T) {
	bin := agentBinary(t)
	n := startNode(t)
	src := filepath.Join(n.dir, "cni-src")
	require.NoError(t, os.MkdirAll(src, 0o755))
	for _, p := range nodesetup.CNIPlugins {
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte("#!/bin/sh\n"), 0o755))
	}
	setup := []string{"node-setup", "--nic=auto", "--datapath-type=netdev", "--cluster-cidrs=10.244.0.0/16",
		"--pod-cidr=10.244.1.0/24", "--cni-source-dir=" + src,
		"--ovsdb=unix:" + n.dir + "/db.sock", "--ovs-rundir=" + n.dir, "--state-dir=" + filepath.Join(n.dir, "state"),
		"--cni-bin-dir=" + filepath.Join(n.dir, "bin"), "--cni-conf-dir=" + filepath.Join(n.dir, "net.d"),
		"--cni-data-dir=" + filepath.Join(n.dir, "cni-data")}
	untouched := func(what string) {
		t.Helper()
		bridges, err := n.vsctl(t, "list-br")
		require.NoError(t, err)
		assert.Empty(t, strings.TrimSpace(bridges), "%s: no bridge created", what)
		assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-4", "-o", "addr", "show", "dev", "eth0"), "inet "+nodeIP+"/24", "%s: eth0 keeps its address", what)
		_, err = os.Stat(filepath.Join(n.dir, "state", nodesetup.StateFile))
		assert.ErrorIs(t, err, os.ErrNotExist, "%s: no state file", what)
	}

	// The agent's metrics port (default 127.0.0.1:9464) held by another process in the node's
	// network namespace (on every address, as node_exporter-like daemons do).
	holder := n.startInNode(t, true, "python3", "-c", `import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("0.0.0.0", 9464)); s.listen(1); print("listening", flush=True); time.sleep(120)`)
	start := time.Now()
	out, err := n.agent(t, bin, setup...)
	require.Error(t, err)
	t.Logf("refused in %s", time.Since(start).Round(time.Millisecond))
	assert.ErrorContains(t, err, "TCP port 9464 (--metrics-bind-address 127.0.0.1:9464 of srcip-agent) is in use by python3 (pid "+strconv.Itoa(holder))
	assert.ErrorContains(t, err, "give srcip-agent and node-setup another --metrics-bind-address")
	assert.NotContains(t, out, "changed: ")
	untouched("busy metrics port")
	// The same port as --debug-bind-address (the DaemonSet's 127.0.0.1:9465 moved onto it).
	_, err = n.agent(t, bin, append(setup, "--metrics-bind-address=:9470", "--debug-bind-address=127.0.0.1:9464")...)
	assert.ErrorContains(t, err, "TCP port 9464 (--debug-bind-address 127.0.0.1:9464 of srcip-agent) is in use by python3")
	untouched("busy debug port")
	killGroup(t, holder)

	// The Geneve port (UDP 6081, the agent's --geneve-port) bound by another process.
	gnv := n.startInNode(t, true, "python3", "-c", `import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 6081)); print("bound", flush=True); time.sleep(120)`)
	_, err = n.agent(t, bin, setup...)
	assert.ErrorContains(t, err, "UDP port 6081 (Geneve between the nodes, srcip-agent's --geneve-port) is in use by python3 (pid "+strconv.Itoa(gnv))
	untouched("busy Geneve port")
	killGroup(t, gnv)

	// A dynamic address on eth0, as a DHCP client leaves it (finite valid lifetime, through
	// netlink as ip-address(8) sets it).
	must(t, nil, "ip", "-n", n.netns, "addr", "change", nodeIP+"/24", "dev", "eth0", "valid_lft", "3600", "preferred_lft", "3600")
	out, err = n.agent(t, bin, setup...)
	require.Error(t, err)
	assert.Regexp(t, `NIC eth0 is configured by DHCP: its address 192\.0\.2\.10/24 is dynamic \(valid_lft 3[56]\d\ds, a DHCP lease\)`, err.Error())
	assert.ErrorContains(t, err, "Configure eth0 statically (addresses 192.0.2.10/24, default via "+peerIP+")")
	assert.NotContains(t, out, "changed: ")
	untouched("dynamic address")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-4", "addr", "show", "dev", "eth0"), "valid_lft 3", "the lease's lifetime is left as it was")
	must(t, nil, "ip", "-n", n.netns, "addr", "change", nodeIP+"/24", "dev", "eth0", "valid_lft", "forever", "preferred_lft", "forever")

	// A DHCP client for eth0 in the node's netns (a stand-in named dhclient, with dhclient's
	// arguments), the address permanent.
	dhclient := filepath.Join(n.dir, "dhclient")
	require.NoError(t, os.WriteFile(dhclient, []byte("#!/bin/sh\necho running\nsleep 120\n"), 0o755))
	client := n.startInNode(t, true, dhclient, "-4", "-v", "-pf", "/run/dhclient.eth0.pid", "eth0")
	_, err = n.agent(t, bin, setup...)
	assert.ErrorContains(t, err, "NIC eth0 is configured by DHCP: a DHCP client runs for it: dhclient (pid "+strconv.Itoa(client))
	untouched("DHCP client")
	killGroup(t, client)
	// One for another NIC is no reason to refuse.
	n.startInNode(t, true, dhclient, "-4", "eth9")

	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err, "node-setup once the port is free and eth0 static")
	assert.Contains(t, out, "changed: moved eth0 into br-ex")
	n.ping(t)
}

// On a dual-stack uplink node-setup refuses, before it changes anything: a dynamic IPv6 address
// (SLAAC or DHCPv6: finite valid lifetime), an IPv6 route learned from a router advertisement
// (proto ra), and a pod MTU below 1280 with an IPv6 pod CIDR.
func TestNodeSetupRefusesDynamicIPv6(t *testing.T) {
	bin := agentBinary(t)
	n := startNodeFamilies(t, true)
	src := filepath.Join(n.dir, "cni-src")
	require.NoError(t, os.MkdirAll(src, 0o755))
	for _, p := range nodesetup.CNIPlugins {
		require.NoError(t, os.WriteFile(filepath.Join(src, p), []byte("#!/bin/sh\n"), 0o755))
	}
	setup := []string{"node-setup", "--nic=auto", "--datapath-type=netdev", "--cluster-cidrs=10.244.0.0/16,2001:db8:244::/56",
		"--pod-cidr=10.244.1.0/24,2001:db8:244:1::/64", "--cni-source-dir=" + src,
		"--ovsdb=unix:" + n.dir + "/db.sock", "--ovs-rundir=" + n.dir, "--state-dir=" + filepath.Join(n.dir, "state"),
		"--cni-bin-dir=" + filepath.Join(n.dir, "bin"), "--cni-conf-dir=" + filepath.Join(n.dir, "net.d"),
		"--cni-data-dir=" + filepath.Join(n.dir, "cni-data")}
	untouched := func(what string) {
		t.Helper()
		bridges, err := n.vsctl(t, "list-br")
		require.NoError(t, err)
		assert.Empty(t, strings.TrimSpace(bridges), "%s: no bridge created", what)
		assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-6", "-o", "addr", "show", "dev", "eth0"), "inet6 "+nodeIP6+"/64", "%s: eth0 keeps its address", what)
	}

	must(t, nil, "ip", "-n", n.netns, "addr", "change", nodeIP6+"/64", "dev", "eth0", "valid_lft", "3600", "preferred_lft", "3600")
	out, err := n.agent(t, bin, setup...)
	require.Error(t, err)
	assert.Regexp(t, `NIC eth0 is configured by DHCP: its address 2001:db8:1::10/64 is dynamic \(valid_lft 3[56]\d\ds, SLAAC or a DHCPv6 lease\)`, err.Error())
	assert.NotContains(t, out, "changed: ")
	untouched("dynamic IPv6 address")
	// The same NIC on a node without an IPv6 pod CIDR is set up as before IPv6: its dynamic IPv6
	// address is no reason to refuse, and eth0's IPv6 (address and routes) stays on it; IPv4 moves.
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
	assert.Contains(t, out, "note: eth0's IPv6 configuration is dynamic and stays on it, not moved to br-ex (the node has no IPv6 pod CIDR")
	assert.Contains(t, out, "changed: moved eth0 into br-ex with 1 addresses and 2 routes")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-6", "route", "show"), route6+" via "+peerIP6+" dev eth0")
	assert.Contains(t, must(t, nil, "ip", "-n", n.netns, "-6", "-o", "addr", "show", "dev", "eth0"), "inet6 "+nodeIP6+"/64")
	n.ping(t)
	teardown := []string{"node-teardown", "--flow-snapshot="}
	for _, a := range setup {
		if strings.HasPrefix(a, "--ovs") || strings.HasPrefix(a, "--state-dir=") || strings.HasPrefix(a, "--cni-bin-dir=") ||
			strings.HasPrefix(a, "--cni-conf-dir=") || strings.HasPrefix(a, "--cni-data-dir=") {
			teardown = append(teardown, a)
		}
	}
	out, err = n.agent(t, bin, teardown...)
	require.NoError(t, err)
	assert.Contains(t, out, "changed: eth0 has its 1 addresses and 2 routes back")
	must(t, nil, "ip", "-n", n.netns, "addr", "change", nodeIP6+"/64", "dev", "eth0", "valid_lft", "forever", "preferred_lft", "forever")

	must(t, nil, "ip", "-n", n.netns, "-6", "route", "add", "2001:db8:98::/48", "via", peerLL, "dev", "eth0", "proto", "ra")
	out, err = n.agent(t, bin, setup...)
	require.Error(t, err)
	assert.ErrorContains(t, err, "its IPv6 route 2001:db8:98::/48 via "+peerLL+" was learned from a router advertisement (set net.ipv6.conf.eth0.accept_ra=0")
	assert.NotContains(t, out, "changed: ")
	untouched("RA route")
	must(t, nil, "ip", "-n", n.netns, "-6", "route", "del", "2001:db8:98::/48")

	_, err = n.agent(t, bin, append(setup, "--mtu=1200")...)
	assert.ErrorContains(t, err, "pod MTU 1200 is below IPv6's minimum link MTU 1280")
	untouched("MTU below 1280")

	out, err = n.agent(t, bin, setup...)
	require.NoError(t, err, "node-setup once eth0's IPv6 is static")
	assert.Contains(t, out, "changed: moved eth0 into br-ex with 2 addresses and 4 routes")
	n.ping6(t)
}
