package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/nodesetup"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// C38 (docs/egress.md "Secondary NICs"): an egress IP on a secondary NIC. node3 gets eth1
// 203.0.113.13/24 on a second segment whose router (netns <prefix>r38, 203.0.113.1) also
// reaches 198.51.100.0/24 (the server netns <prefix>s38, 198.51.100.20, which logs the source it
// sees) and drops every source outside 203.0.113.0/24. The real node-setup code
// (nodesetup.SetupEgressInterfaces, --egress-interface eth1=203.0.113.1) runs in node3's netns;
// then echo-a (node2) is selected with egress IP 203.0.113.50 on gateway node3.

const (
	c38EgressIP = "203.0.113.50"
	c38Router   = "203.0.113.1"
	c38Server   = "198.51.100.20"
)

// nsRun runs argv in netns ns (a plain netns name, not a lab name).
func nsRun(t *testing.T, ns string, argv ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...).CombinedOutput()
	require.NoError(t, err, "%s in %s: %s", strings.Join(argv, " "), ns, out)
	return string(out)
}

// pcapture is a tcpdump running in a netns until stop.
type pcapture struct {
	cmd  *exec.Cmd
	file string
}

func startCapture(t *testing.T, ns, iface, file, filter string) *pcapture {
	t.Helper()
	// --immediate-mode: without it libpcap hands packets over a buffer block at a time (when
	// full or after its 1 s timeout), and tcpdump stopped by SIGINT drops the block not yet
	// handed over ("0 packets captured, 49 packets received by filter" in 4 of 12 runs).
	args := []string{"netns", "exec", ns, "tcpdump", "-n", "-U", "--immediate-mode", "-i", iface, "-w", file}
	if filter != "" {
		args = append(args, filter)
	}
	cmd := exec.Command("ip", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	c := &pcapture{cmd: cmd, file: file}
	t.Cleanup(func() { c.stop() })
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "listening on") }, 10*time.Second, 20*time.Millisecond,
		"tcpdump on %s in %s: %s", iface, ns, stderr.String())
	return c
}

func (c *pcapture) stop() {
	if c.cmd.Process != nil && c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		_ = c.cmd.Wait()
	}
}

// lines returns the capture as tcpdump -e prints it, one packet a line.
func (c *pcapture) lines(t *testing.T) []string {
	t.Helper()
	c.stop()
	out, err := exec.Command("tcpdump", "-n", "-e", "-r", c.file).Output()
	require.NoError(t, err)
	var ls []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			ls = append(ls, l)
		}
	}
	return ls
}

// arpProbe sends one broadcast ARP request "who-has target" from iface in netns ns (sender
// address sender, iface's MAC), by a packet socket.
func arpProbe(t *testing.T, ns, iface, sender, target string) {
	t.Helper()
	script := `import socket, sys
iface, spa, tpa = sys.argv[1], socket.inet_aton(sys.argv[2]), socket.inet_aton(sys.argv[3])
mac = bytes.fromhex(open("/sys/class/net/%s/address" % iface).read().strip().replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((iface, 0))
arp = bytes.fromhex("0001080006040001") + mac + spa + b"\0" * 6 + tpa
s.send(b"\xff" * 6 + mac + b"\x08\x06" + arp)
`
	nsRun(t, ns, "python3", "-c", script, iface, sender, target)
}

func TestEgressSecondaryNIC(t *testing.T) {
	n3 := theLab.Node("node3")
	require.NotNil(t, n3)
	node3NS, err := theLab.Netns("node3")
	require.NoError(t, err)
	routerNS, rtr, srvNS := theLab.RouterNetns, theLab.Prefix+"r38", theLab.Prefix+"s38"
	tmp := t.TempDir()

	// The second segment: node3 eth1 <-> router2 "n3" (203.0.113.1/24); router2 "srv"
	// (198.51.100.1/24) <-> server eth0 198.51.100.20/24. Router2 forwards only sources of
	// 203.0.113.0/24 from node3's segment (anti-spoofing), counting what it drops.
	for _, ns := range []string{rtr, srvNS} {
		out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput()
		require.NoError(t, err, "%s", out)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
		nsRun(t, ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
			"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
		nsRun(t, ns, "ip", "link", "set", "lo", "up")
	}
	nsRun(t, rtr, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	out, err := exec.Command("ip", "link", "add", "n3", "netns", rtr, "type", "veth", "peer", "name", "eth1", "netns", node3NS).CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "exec", node3NS, "ip", "link", "del", "eth1").Run() })
	out, err = exec.Command("ip", "link", "add", "srv", "netns", rtr, "type", "veth", "peer", "name", "eth0", "netns", srvNS).CombinedOutput()
	require.NoError(t, err, "%s", out)
	nsRun(t, node3NS, "sysctl", "-q", "-w", "net.ipv6.conf.eth1.disable_ipv6=1")
	for _, c := range [][]string{
		{rtr, "ip addr add " + c38Router + "/24 dev n3"}, {rtr, "ip link set n3 up"},
		{rtr, "ip addr add 198.51.100.1/24 dev srv"}, {rtr, "ip link set srv up"},
		{srvNS, "ip addr add " + c38Server + "/24 dev eth0"}, {srvNS, "ip link set eth0 up"},
		{srvNS, "ip route add default via 198.51.100.1"},
		{node3NS, "ip addr add 203.0.113.13/24 dev eth1"}, {node3NS, "ip link set eth1 up"},
		{rtr, "ethtool -K n3 tx off"}, {rtr, "ethtool -K srv tx off"}, {srvNS, "ethtool -K eth0 tx off"},
		{node3NS, "ethtool -K eth1 tx off"},
	} {
		nsRun(t, c[0], strings.Fields(c[1])...)
	}
	nft := `table ip c38 {
	chain guard {
		type filter hook forward priority 0; policy accept;
		iifname "n3" ip saddr != 203.0.113.0/24 counter drop
	}
}
`
	nftFile := filepath.Join(tmp, "c38.nft")
	require.NoError(t, os.WriteFile(nftFile, []byte(nft), 0o644))
	nsRun(t, rtr, "nft", "-f", nftFile)
	routerMAC := strings.TrimSpace(nsRun(t, rtr, "cat", "/sys/class/net/n3/address"))

	// node-setup --egress-interface eth1=203.0.113.1, in node3's netns (the real code).
	cfg := nodesetup.Config{OVSDB: "unix:" + n3.DBSock(), OVSRunDir: n3.Dir, StateDir: filepath.Join(tmp, "state"),
		EgressInterfaces: []nodesetup.EgressInterface{{NIC: "eth1"}}, Logf: t.Logf}
	cfg.EgressInterfaces[0], err = nodesetup.ParseEgressInterface("eth1=" + c38Router)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, inNetns(t, "node3", func() error { _, err := nodesetup.SetupEgressInterfaces(ctx, cfg); return err }))
	torndown := false
	teardown := func() error {
		torndown = true
		return inNetns(t, "node3", func() error { _, err := nodesetup.TeardownEgressInterfaces(ctx, cfg); return err })
	}
	t.Cleanup(func() {
		if !torndown {
			assert.NoError(t, teardown())
		}
	})
	// Idempotent: a second run changes nothing.
	require.NoError(t, inNetns(t, "node3", func() error {
		res, err := nodesetup.SetupEgressInterfaces(ctx, cfg)
		if err == nil && res.Changes != 0 {
			err = fmt.Errorf("second run made %d changes", res.Changes)
		}
		return err
	}))
	t.Logf("node3: %s", strings.TrimSpace(nsRun(t, node3NS, "ip", "-4", "rule", "show", "table", "7100")))
	// The agent found the secondary uplink: LOCAL's packets of 203.0.113.0/24 go to eth1 (its
	// ofport is "[]" until ovs-vswitchd has added it).
	var ofport string
	require.NoError(t, lab.WaitFor(func() error {
		ofport = strings.TrimSpace(must2(theLab.Vsctl("node3", "get", "Interface", "eth1", "ofport")))
		secFlow := regexp.MustCompile(`in_port=LOCAL,nw_src=203\.0\.113\.0/24 actions=output:(eth1|` + regexp.QuoteMeta(ofport) + `)\b`)
		if fl := egressFlows(t, "node3"); !secFlow.MatchString(fl) {
			return fmt.Errorf("node3's br-ex has no flow for the secondary uplink (ofport %s) yet:\n%s", ofport, fl)
		}
		return nil
	}, 20*time.Second))
	// The host reaches the second router through eth1 (its address moved to br-ex).
	nsRun(t, node3NS, "ping", "-c", "1", "-W", "2", c38Router)

	// The server logs every source it sees.
	echoLog := filepath.Join(tmp, "server.log")
	srv := exec.Command("ip", "netns", "exec", srvNS, theLab.EchoBin(), "serve", "--name", "server", "--node", "outside",
		"--tcp", ":"+hostPort, "--udp", ":"+hostPort, "--log", echoLog)
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Signal(syscall.SIGTERM); _ = srv.Wait() })
	require.Eventually(t, func() bool { return strings.Contains(srvErr.String(), "ready") }, 5*time.Second, 20*time.Millisecond, srvErr.String())

	// Captures on node3's two NICs from before the policy exists: first packets included.
	cap0 := startCapture(t, node3NS, "eth0", filepath.Join(tmp, "eth0.pcap"),
		"(ip and (src net 10.244.0.0/16 or host "+c38EgressIP+" or host "+c38Server+")) or (arp and host "+c38EgressIP+")")
	cap1 := startCapture(t, node3NS, "eth1", filepath.Join(tmp, "eth1.pcap"), "")

	writeManifest(t, "egress-c38.yaml", egressPolicy("c38", c38EgressIP, "node3", "  destinations: [198.51.100.0/24]\n"))
	t.Cleanup(func() { writeManifest(t, "egress-c38.yaml", "") })
	require.NoError(t, lab.WaitFor(func() error {
		if !strings.Contains(egressFlows(t, "node3"), "arp_tpa="+c38EgressIP) {
			return fmt.Errorf("node3 does not answer ARP for %s yet", c38EgressIP)
		}
		return nil
	}, 20*time.Second))

	target := c38Server + ":" + hostPort
	for _, proto := range []string{"tcp", "udp"} {
		r := waitSeenAs(t, "echo-a", proto, target, c38EgressIP)
		// The answer came back to the pod, from the server.
		assert.Equal(t, target, r.From)
		t.Logf("%s from echo-a to %s: server saw %s, answer from %s", proto, target, r.Client, r.From)
	}
	for range 3 {
		r, err := theLab.Request("echo-a", "tcp", target)
		require.NoError(t, err)
		assert.Equal(t, c38EgressIP, r.ClientIP())
	}
	ct, err := theLab.Appctl("node3", "dpctl/dump-conntrack", "zone=64258")
	require.NoError(t, err)
	assert.Contains(t, ct, "dst="+c38EgressIP, "node3's ZoneEgress SNATs to the egress IP")

	// ARP probes for the egress IP on both segments: from the lab router (node3's eth0 segment)
	// and from the second router.
	arpProbe(t, routerNS, "br0", "192.0.2.1", c38EgressIP)
	arpProbe(t, rtr, "n3", c38Router, c38EgressIP)
	time.Sleep(500 * time.Millisecond)

	// The server saw only the egress IP.
	logged, err := os.ReadFile(echoLog)
	require.NoError(t, err)
	var seen []string
	for _, l := range strings.Split(strings.TrimSpace(string(logged)), "\n") {
		var r lab.Reply
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		seen = append(seen, r.ClientIP())
	}
	require.NotEmpty(t, seen)
	for _, s := range seen {
		assert.Equal(t, c38EgressIP, s, "the server's log: %v", seen)
	}
	t.Logf("server log: %d connections/datagrams, sources %v", len(seen), uniq(seen))
	// The second router dropped nothing (no other source ever came from node3's segment).
	counters := nsRun(t, rtr, "nft", "list", "chain", "ip", "c38", "guard")
	assert.Regexp(t, `counter packets 0 bytes 0 drop`, counters)

	// node3's eth0 carried none of it: no pod source, nothing to or from the server or the
	// egress IP, no ARP answer for the egress IP (the probe's request is there).
	l0 := cap0.lines(t)
	var leaked []string
	for _, l := range l0 {
		if !strings.Contains(l, "Request who-has "+c38EgressIP+" tell 192.0.2.1,") { // the probe
			leaked = append(leaked, l)
		}
	}
	assert.Empty(t, leaked, "node3 eth0 carried egress traffic or answered ARP for the egress IP")
	assert.NotEmpty(t, l0, "the ARP probe on node3's eth0 segment was not captured")
	t.Logf("node3 eth0: %d frames of interest, all ARP requests nobody answered: %q", len(l0), l0)

	// node3's eth1: the egress packets with source 203.0.113.50 to the second router's MAC; the
	// replies; ARP answers for the egress IP from br-ex's MAC; never a pod address.
	l1 := cap1.lines(t)
	out1, in1, arpAns, garp := 0, 0, 0, 0
	toServer := regexp.MustCompile(`> ` + regexp.QuoteMeta(routerMAC) + `, .* ` + regexp.QuoteMeta(c38EgressIP) + `\.\d+ > ` + regexp.QuoteMeta(c38Server) + `\.` + hostPort)
	for _, l := range l1 {
		assert.NotContains(t, l, " 10.244.", "a pod address on node3's eth1: %s", l)
		switch {
		case toServer.MatchString(l):
			out1++
			assert.True(t, strings.HasPrefix(strings.Fields(l)[1], n3.MAC), "egress frame not from br-ex's MAC: %s", l)
		case strings.Contains(l, c38Server+"."+hostPort+" > "+c38EgressIP+"."):
			in1++
		case strings.Contains(l, "Reply "+c38EgressIP+" is-at "+n3.MAC):
			arpAns++
		case strings.Contains(l, "Request who-has "+c38EgressIP+" tell "+c38EgressIP+","):
			garp++
			assert.True(t, strings.HasPrefix(strings.Fields(l)[1], n3.MAC), "gratuitous ARP not from br-ex's MAC: %s", l)
		case strings.Contains(l, c38Server):
			t.Errorf("unexpected frame to/from the server on eth1: %s", l)
		}
	}
	assert.Positive(t, out1, "no egress packet 203.0.113.50 -> server on eth1")
	assert.Positive(t, in1, "no reply on eth1")
	assert.Positive(t, arpAns, "no ARP answer for the egress IP on eth1")
	assert.Positive(t, garp, "no gratuitous ARP for the egress IP on eth1 (the takeover's)")
	t.Logf("node3 eth1: %d frames; %d egress packets %s -> %s to the router's MAC %s, %d replies, %d ARP answers and %d gratuitous ARPs for %s",
		len(l1), out1, c38EgressIP, c38Server, routerMAC, in1, arpAns, garp, c38EgressIP)
	flowsNow := egressFlows(t, "node3")
	for _, l := range strings.Split(flowsNow, "\n") {
		if strings.Contains(l, "arp_tpa="+c38EgressIP) {
			assert.Regexp(t, `in_port=(eth1|`+ofport+`)\b`, l, "the ARP answer is bound to eth1")
		}
	}

	// Teardown puts eth1 back as it was.
	require.NoError(t, teardown())
	addr := nsRun(t, node3NS, "ip", "-4", "-o", "addr", "show", "dev", "eth1")
	assert.Contains(t, addr, "203.0.113.13/24")
	assert.Empty(t, strings.TrimSpace(nsRun(t, node3NS, "ip", "-4", "rule", "show", "table", "7100")))
	assert.NotContains(t, nsRun(t, node3NS, "ip", "-4", "-o", "addr", "show", "dev", "br-ex"), "203.0.113.13")
	_, err = theLab.Vsctl("node3", "get", "Interface", "eth1", "ofport")
	assert.Error(t, err, "eth1 is still an OVS interface after the teardown")

	// C38's move to the VLAN subinterface eth1.100 is not tested: this machine's kernel has no
	// 8021q support ("ip link add ... type vlan": Unknown device type) and modules cannot be
	// loaded.
	writeManifest(t, "egress-c38.yaml", "")
}

func must2(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

func uniq(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}
