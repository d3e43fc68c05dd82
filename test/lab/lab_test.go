package lab

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

const demoManifests = "../manifests/demo"

var echoBin string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "labtest")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		echoBin = filepath.Join(dir, "echo")
		if out, err := exec.Command("go", "build", "-o", echoBin, "github.com/ovs-srcip/ovs-srcip/test/echo").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build echo: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func needRoot(t *testing.T) {
	t.Helper()
	// These tests never skip: where they cannot run, they fail (make test installs what they need).
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces)")
	}
	if err := CheckPrograms(LabPrograms); err != nil {
		t.Fatal(err)
	}
	if removed, err := CleanupStale("", t.Logf); err != nil {
		t.Logf("cleanup of stale labs: %v", err)
	} else if len(removed) > 0 {
		t.Logf("removed stale labs %v", removed)
	}
}

func TestLoadDemoManifests(t *testing.T) {
	m, err := LoadManifests(demoManifests)
	require.NoError(t, err)
	require.Len(t, m.Nodes, 3)
	require.Len(t, m.Pods, 3)
	require.Len(t, m.Services, 2)
	require.Len(t, m.EndpointSlices, 2)
	assert.Empty(t, m.Skipped)

	for i, want := range []struct{ name, ip, cidr, ip6, cidr6 string }{
		{"node1", "192.0.2.11", "10.244.1.0/24", "2001:db8:0:2::11", "2001:db8:244:1::/64"},
		{"node2", "192.0.2.12", "10.244.2.0/24", "2001:db8:0:2::12", "2001:db8:244:2::/64"},
		{"node3", "192.0.2.13", "10.244.3.0/24", "2001:db8:0:2::13", "2001:db8:244:3::/64"},
	} {
		n := &m.Nodes[i]
		assert.Equal(t, want.name, n.Name)
		ip, c, err := nodeFacts(n)
		require.NoError(t, err)
		assert.Equal(t, want.ip, ip.String())
		assert.Equal(t, want.cidr, c.String())
		ip6, c6, err := nodeFacts6(n)
		require.NoError(t, err)
		assert.Equal(t, want.ip6, ip6.String())
		assert.Equal(t, want.cidr6, c6.String())
	}
	for _, p := range m.Pods {
		assert.Equal(t, "demo", p.Namespace)
		require.Len(t, p.Status.PodIPs, 2, "dual-stack pod %s", p.Name)
		ip, ip6, err := podIPs(&p)
		require.NoError(t, err)
		assert.True(t, ip.Is4() && ip6.Is6(), "pod %s: %s %s", p.Name, ip, ip6)
		ready := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		assert.True(t, ready, "pod %s Ready", p.Name)
	}
	web := m.Service("demo", "web")
	require.NotNil(t, web)
	assert.Equal(t, "true", web.Annotations["ovs-srcip.io/preserve-source-ip"])
	assert.Equal(t, corev1.ServiceTypeLoadBalancer, web.Spec.Type)
	assert.Equal(t, corev1.ServiceExternalTrafficPolicyCluster, web.Spec.ExternalTrafficPolicy)
	assert.Equal(t, []string{"203.0.113.101"}, web.Spec.ExternalIPs)
	require.Len(t, web.Status.LoadBalancer.Ingress, 1)
	assert.Equal(t, "203.0.113.100", web.Status.LoadBalancer.Ingress[0].IP)
	require.Len(t, web.Spec.Ports, 2)
	assert.EqualValues(t, 30080, web.Spec.Ports[0].NodePort)
	assert.EqualValues(t, 30053, web.Spec.Ports[1].NodePort)
	assert.Equal(t, corev1.ProtocolUDP, web.Spec.Ports[1].Protocol)
	plain := m.Service("demo", "plain")
	require.NotNil(t, plain)
	assert.NotContains(t, plain.Annotations, "ovs-srcip.io/preserve-source-ip")
	for _, es := range m.EndpointSlices {
		svc := es.Labels["kubernetes.io/service-name"]
		require.NotNil(t, m.Service(es.Namespace, svc), "slice %s", es.Name)
		for _, ep := range es.Endpoints {
			require.NotNil(t, ep.NodeName)
			require.NotNil(t, ep.Conditions.Ready)
			assert.True(t, *ep.Conditions.Ready)
		}
	}
}

func TestSplitYAMLDocs(t *testing.T) {
	docs := splitYAMLDocs([]byte("---\na: 1\n--- # c\nb: 2\n---\n# only a comment\n---\n"))
	assert.Len(t, docs, 2)
}

// TestLabUp builds the 3-node demo lab without agents and checks the plumbing.
func TestLabUp(t *testing.T) {
	needRoot(t)
	start := time.Now()
	l, err := New(Config{ManifestsDir: demoManifests, EchoBin: echoBin, Logf: t.Logf})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			assert.NoError(t, l.Close())
		}
	})
	t.Logf("SETUP: %s (prefix %s)", time.Since(start).Round(time.Millisecond), l.Prefix)

	// Names: prefix everywhere, interface names <= 15.
	for _, ns := range l.NetnsNames() {
		assert.True(t, strings.HasPrefix(ns, l.Prefix+"-"), ns)
	}
	for _, n := range l.Nodes {
		assert.LessOrEqual(t, len(n.RouterPort), 15)
	}
	for _, p := range l.Pods {
		assert.LessOrEqual(t, len(p.HostPort), 15)
		assert.True(t, strings.HasPrefix(p.HostPort, l.Prefix), p.HostPort)
	}
	assert.Equal(t, "node1", l.IngressNode().Name)

	// Nodes: br-ex as the installer leaves it.
	for _, n := range l.Nodes {
		out, err := l.Vsctl(n.Name, "get", "bridge", "br-ex", "datapath_type", "fail_mode", "protocols", "other_config:hwaddr")
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("netdev\nsecure\n[OpenFlow10, OpenFlow13, OpenFlow15]\n%q\n", n.MAC), out, n.Name)
		out, err = l.Vsctl(n.Name, "list-ports", "br-ex")
		require.NoError(t, err)
		assert.Equal(t, "eth0\n", out)
		out, err = l.Exec(n.Name, "ip", "-4", "-o", "addr", "show", "dev", "br-ex")
		require.NoError(t, err)
		assert.Contains(t, out, n.IP.String()+"/24")
		out, err = l.Exec(n.Name, "ip", "-o", "link", "show", "dev", "br-ex")
		require.NoError(t, err)
		assert.Contains(t, out, "link/ether "+n.MAC)
		out, err = l.Exec(n.Name, "ip", "-6", "-o", "addr", "show", "dev", "br-ex")
		require.NoError(t, err)
		assert.Contains(t, out, n.IP6.String()+"/64")
		assert.NotContains(t, out, "tentative")
		out, err = l.Exec(n.Name, "ip", "-o", "link", "show", "dev", "eth0")
		require.NoError(t, err)
		assert.Contains(t, out, "NOARP")
		// The OVS-attached uplink has no IPv6 in the node kernel (no Neighbor Advertisements).
		out, err = l.Exec(n.Name, "sysctl", "-n", "net.ipv6.conf.eth0.disable_ipv6", "net.ipv6.conf.br-ex.accept_ra")
		require.NoError(t, err)
		assert.Equal(t, "1\n0\n", out)
		out, err = l.Exec(n.Name, "ip", "route", "show", "default")
		require.NoError(t, err)
		assert.Contains(t, out, "default via 192.0.2.1 dev br-ex")
		out, err = l.Exec(n.Name, "ip", "-6", "route", "show", "default")
		require.NoError(t, err)
		assert.Contains(t, out, "default via 2001:db8:0:2::1 dev br-ex")
		out, err = l.Exec(n.Name, "ethtool", "-k", "eth0")
		require.NoError(t, err)
		assert.Contains(t, out, "tx-checksumming: off")
		out, err = l.Appctl(n.Name, "tnl/neigh/show")
		require.NoError(t, err)
		for _, peer := range l.Nodes {
			if peer != n {
				assert.Contains(t, out, peer.MAC, "%s tnl neigh of %s", n.Name, peer.Name)
			}
		}
		flows, err := l.DumpFlows(n.Name, "br-ex")
		require.NoError(t, err)
		assert.NotContains(t, flows, "actions=", "br-ex of %s must start without flows", n.Name)
	}
	out, err := l.Exec("router", "ip", "route", "show", "203.0.113.0/24")
	require.NoError(t, err)
	assert.Contains(t, out, "via 192.0.2.11")
	out, err = l.Exec("router", "ip", "-6", "route", "show", "2001:db8:0:113::/64")
	require.NoError(t, err)
	assert.Contains(t, out, "via 2001:db8:0:2::11")

	// Pods: addresses of both families, MAC, MTU, routes, br-int ports with external_ids.
	want := map[string]struct{ node, ip, ip6 string }{
		"echo-a": {"node2", "10.244.2.5", "2001:db8:244:2::5"},
		"echo-b": {"node3", "10.244.3.5", "2001:db8:244:3::5"},
		"echo-c": {"node1", "10.244.1.5", "2001:db8:244:1::5"},
	}
	require.Len(t, l.Pods, 3)
	for _, p := range l.Pods {
		w := want[p.Name]
		assert.Equal(t, w.node, p.NodeName)
		assert.Equal(t, w.ip, p.IP.String())
		out, err := l.Exec(p.Name, "ip", "-o", "addr", "show", "dev", "eth0")
		require.NoError(t, err)
		assert.Contains(t, out, "inet "+w.ip+"/24")
		assert.Contains(t, out, "inet6 "+w.ip6+"/64 scope global nodad")
		out, err = l.Exec(p.Name, "ip", "-o", "link", "show", "dev", "eth0")
		require.NoError(t, err)
		assert.Contains(t, out, "mtu 1400")
		assert.Contains(t, out, "link/ether "+p.MAC)
		out, err = l.Exec(p.Name, "ip", "route", "show", "default")
		require.NoError(t, err)
		assert.Contains(t, out, "default via "+l.Node(p.NodeName).Gateway.String()+" dev eth0")
		out, err = l.Exec(p.Name, "ip", "-6", "route", "show", "default")
		require.NoError(t, err)
		assert.Contains(t, out, "default via "+l.Node(p.NodeName).Gateway6.String()+" dev eth0")
		// The pod's veth end on the node has no IPv6 in the node kernel.
		out, err = l.Exec(p.NodeName, "sysctl", "-n", "net.ipv6.conf."+p.HostPort+".disable_ipv6")
		require.NoError(t, err)
		assert.Equal(t, "1\n", out)

		out, err = l.Vsctl(p.NodeName, "--bare", "--columns=name", "find", "Interface", "external_ids:iface-id="+p.Namespace+"_"+p.Name)
		require.NoError(t, err)
		assert.Equal(t, p.HostPort, strings.TrimSpace(out))
		out, err = l.Vsctl(p.NodeName, "get", "Interface", p.HostPort, "external_ids:attached-mac", "external_ids:ip_addresses")
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("%q\n\"%s/24,%s/64\"\n", p.MAC, w.ip, w.ip6), out)
		out, err = l.Vsctl(p.NodeName, "port-to-br", p.HostPort)
		require.NoError(t, err)
		assert.Equal(t, "br-int\n", out)
		out, err = l.Vsctl(p.NodeName, "get", "bridge", "br-int", "datapath_type", "fail_mode")
		require.NoError(t, err)
		assert.Equal(t, "netdev\nsecure\n", out)

		// The echo server answers inside its own netns (TCP and UDP, both families), and reports
		// each peer in its own family.
		for _, proto := range []string{"tcp", "udp"} {
			for _, ip := range []string{w.ip, w.ip6} {
				addr := net.JoinHostPort(ip, "8080")
				r, err := l.Request(p.Name, proto, addr)
				require.NoError(t, err)
				assert.Equal(t, p.Name, r.Pod)
				assert.Equal(t, w.node, r.Node)
				assert.Equal(t, ip, r.ClientIP())
				assert.Equal(t, addr, r.From)
			}
		}
	}

	// br-ex is fail_mode=secure without flows: nothing passes yet.
	_, err = l.Exec("client", "ping", "-c", "1", "-W", "1", "192.0.2.11")
	assert.Error(t, err, "ping must fail while br-ex has no flows")

	// With a temporary NORMAL flow (cookie 0x1) the underlay works.
	for _, n := range l.Nodes {
		_, err := l.Ofctl(n.Name, "add-flow", "br-ex", "cookie=0x1,priority=0,actions=NORMAL")
		require.NoError(t, err)
	}
	ping := func(from, to string) {
		t.Helper()
		err := WaitFor(func() error {
			_, err := l.Exec(from, "ping", "-c", "1", "-W", "1", to)
			return err
		}, 10*time.Second)
		assert.NoError(t, err, "ping %s -> %s", from, to)
	}
	ping("client", "192.0.2.11")
	ping("node1", "192.0.2.12")
	ping("node1", "192.0.2.13")
	ping("node3", "198.51.100.10")
	ping("client", "2001:db8:0:2::11")
	ping("node1", "2001:db8:0:2::12")
	ping("node3", "2001:db8:0:100::10")
	out, err = l.Exec("client", "ping", "-c", "3", "-i", "0.2", "-W", "1", "192.0.2.11")
	require.NoError(t, err)
	assert.Contains(t, out, "3 received")
	for _, n := range l.Nodes {
		_, err := l.Ofctl(n.Name, "del-flows", "br-ex", "cookie=0x1/-1")
		require.NoError(t, err)
		flows, err := l.DumpFlows(n.Name, "br-ex")
		require.NoError(t, err)
		assert.NotContains(t, flows, "actions=")
	}

	// Teardown leaves nothing behind.
	pids := l.Pids()
	require.Len(t, pids, 3*2+3, "ovsdb-server+ovs-vswitchd per node, echo per pod: %v", pids)
	for role, pid := range pids {
		assert.True(t, PidAlive(pid), "%s pid %d alive before Close", role, pid)
	}
	start = time.Now()
	require.NoError(t, l.Close())
	closed = true
	t.Logf("TEARDOWN: %s", time.Since(start).Round(time.Millisecond))
	assert.NoError(t, l.Close(), "Close is idempotent")
	for role, pid := range pids {
		assert.False(t, PidAlive(pid), "%s pid %d gone after Close", role, pid)
	}
	nss, err := listNetns()
	require.NoError(t, err)
	for ns := range nss {
		assert.False(t, strings.HasPrefix(ns, l.Prefix+"-"), "netns %s left behind", ns)
	}
	_, err = os.Stat(l.Dir)
	assert.True(t, os.IsNotExist(err), "dir %s removed", l.Dir)
}

// TestCleanup removes a crashed lab's leftovers: a netns with a process in it.
func TestCleanup(t *testing.T) {
	needRoot(t)
	prefix := fmt.Sprintf("slt%d", os.Getpid()%10000)
	ns := prefix + "-x"
	_, err := runCmd(t.Logf, 10*time.Second, runOpts{}, "ip", "netns", "add", ns)
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, "sleep", "300")
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	require.NoError(t, os.MkdirAll(filepath.Join("/tmp", prefix, "node1"), 0o755))

	require.NoError(t, Cleanup(prefix, "", t.Logf))
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("process in leftover netns not ended")
	}
	nss, err := listNetns()
	require.NoError(t, err)
	assert.False(t, nss[ns])
	_, err = os.Stat(filepath.Join("/tmp", prefix))
	assert.True(t, os.IsNotExist(err))
	assert.Error(t, Cleanup("bad prefix!", "", nil))
}

// TestAgentLifecycleWithFakeAgent drives StartAgent/StopAgent/RestartAgent
// and Request end to end with testdata/fake-agent.sh (path P2 by hand on
// node1: client IP kept, answers from the VIP). SRCIP_AGENT=<bin> runs the
// same checks against the real agent.
func TestAgentLifecycleWithFakeAgent(t *testing.T) {
	needRoot(t)
	agent, err := filepath.Abs("testdata/fake-agent.sh")
	require.NoError(t, err)
	if bin := os.Getenv("SRCIP_AGENT"); bin != "" {
		agent = bin
	}
	l, err := New(Config{ManifestsDir: demoManifests, EchoBin: echoBin, AgentBin: agent, Logf: t.Logf, AgentStopTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, l.Close()) })

	require.NoError(t, l.StartAgents())
	assert.Error(t, l.StartAgent("node1"), "second start must fail while running")
	entries := []struct{ proto, addr string }{
		{"tcp", "192.0.2.11:30080"}, {"udp", "192.0.2.11:30053"},
		{"tcp", "203.0.113.100:80"}, {"udp", "203.0.113.100:53"},
		{"tcp", "203.0.113.101:80"}, {"udp", "203.0.113.101:53"},
	}
	check := func(phase string) {
		t.Helper()
		require.NoError(t, WaitFor(func() error {
			_, err := l.RequestWith("client", "tcp", entries[0].addr, RequestOpts{Timeout: "1s"})
			return err
		}, 30*time.Second), "%s: service never answered; agent log %s", phase, l.AgentLog("node1"))
		for _, e := range entries {
			r, err := l.Request("client", e.proto, e.addr)
			require.NoError(t, err, "%s %s %s", phase, e.proto, e.addr)
			assert.Equal(t, "198.51.100.10", r.ClientIP(), "%s %s %s: backend saw", phase, e.proto, e.addr)
			assert.Equal(t, e.addr, r.From, "%s %s %s: answer from", phase, e.proto, e.addr)
		}
	}
	check("start")

	pid := l.AgentPid("node1")
	start := time.Now()
	require.NoError(t, l.StopAgent("node1"))
	t.Logf("StopAgent took %s", time.Since(start).Round(time.Millisecond))
	assert.False(t, PidAlive(pid))
	running, _ := l.AgentRunning("node1")
	assert.False(t, running)
	// Flows stay while the agent is down: the dataplane keeps working.
	r, err := l.Request("client", "tcp", "203.0.113.100:80")
	require.NoError(t, err)
	assert.Equal(t, "198.51.100.10", r.ClientIP())

	require.NoError(t, l.RestartAgent("node1"))
	assert.NotEqual(t, pid, l.AgentPid("node1"))
	check("restart")
	log, err := os.ReadFile(l.AgentLog("node1"))
	require.NoError(t, err)
	assert.Equal(t, 2, strings.Count(string(log), "=== agent node1 start"))
	assert.Contains(t, string(log), "--node-name=node1 --manifests="+l.cfg.ManifestsDir+" --ovsdb=unix:"+l.Node("node1").DBSock())
}

// A Node's IPv6 facts are read by family, both or neither; a pod's addresses by family, one each,
// the IPv4 one required.
func TestFamilyFacts(t *testing.T) {
	node := func(addrs []string, cidrs ...string) *corev1.Node {
		n := &corev1.Node{Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
		n.Name = "n"
		for _, a := range addrs {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
		}
		return n
	}
	ip6, c6, err := nodeFacts6(node([]string{"2001:db8:0:2::11", "192.0.2.11"}, "2001:db8:244:1::/64", "10.244.1.0/24"))
	require.NoError(t, err, "IPv6 first is still read by family")
	assert.Equal(t, "2001:db8:0:2::11", ip6.String())
	assert.Equal(t, "2001:db8:244:1::/64", c6.String())
	ip6, c6, err = nodeFacts6(node([]string{"192.0.2.11"}, "10.244.1.0/24"))
	require.NoError(t, err)
	assert.False(t, ip6.IsValid() || c6.IsValid(), "an IPv4-only Node has no IPv6 facts")
	_, _, err = nodeFacts6(node([]string{"192.0.2.11", "2001:db8:0:2::11"}, "10.244.1.0/24"))
	assert.ErrorContains(t, err, "give both or neither")
	_, _, err = nodeFacts6(node([]string{"192.0.2.11"}, "10.244.1.0/24", "2001:db8:244:1::/64"))
	assert.ErrorContains(t, err, "give both or neither")

	pod := func(ips ...string) *corev1.Pod {
		p := &corev1.Pod{}
		p.Namespace, p.Name = "ns", "p"
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	ip, ip6, err := podIPs(pod("2001:db8:244:1::5", "10.244.1.5"))
	require.NoError(t, err)
	assert.Equal(t, "10.244.1.5", ip.String())
	assert.Equal(t, "2001:db8:244:1::5", ip6.String())
	ip, ip6, err = podIPs(&corev1.Pod{Status: corev1.PodStatus{PodIP: "10.244.1.5"}})
	require.NoError(t, err, "status.podIP alone")
	assert.Equal(t, "10.244.1.5", ip.String())
	assert.False(t, ip6.IsValid())
	_, _, err = podIPs(pod("10.244.1.5", "10.244.1.6"))
	assert.ErrorContains(t, err, "two addresses of one family")
	_, _, err = podIPs(pod("2001:db8:244:1::5"))
	assert.ErrorContains(t, err, "no IPv4 address")
}
