// Package chained runs the real-kubelet lab with srcip-cni in chained mode (issue 9 point 4,
// docs/egress.md#chained-mode): on every node the main CNI is the reference bridge + host-local
// (pods on cni0, 10.88.N.0/24, masqueraded by the bridge plugin), then srcip-cni adds the
// egress interface on br-int. A pod an EgressGateway selects reaches the outside server in the
// client netns from the egress IP; an unselected pod keeps the node IP. With
// SRCIP_LAB_DUAL_STACK=1 the cluster is dual-stack (issue 22): the main CNI gives each pod an
// IPv6 address too (ChainedSubnet6), srcip-cni routes the client's IPv6 subnet through the egress
// interface as well, and the EgressGateway has an IPv6 egress IP.
package chained

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	egressclient "github.com/ovs-srcip/ovs-srcip/client/clientset/versioned"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	clientIP = "198.51.100.10"
	egressIP = "10.89.0.50"
	// egressIP6 is the IPv6 egress IP of the dual-stack run, on the nodes' IPv6 segment
	// (cluster.NodeSubnet6: the router solicits it there).
	egressIP6 = "2001:db8:0:2::50"
)

var (
	theCluster *cluster.Cluster
	echoBin    string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return 1
	}
	tmp, err := os.MkdirTemp("", "srcip-chained")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(tmp)
	echoBin = filepath.Join(tmp, "echo")
	pause, cni, portmap := filepath.Join(tmp, "pause"), filepath.Join(tmp, "srcip-cni"), filepath.Join(tmp, "portmap")
	build := map[string]string{echoBin: "../../echo", pause: "../../pause", cni: "../../../cmd/srcip-cni",
		portmap: "github.com/containernetworking/plugins/plugins/meta/portmap"}
	agentBin := os.Getenv("SRCIP_AGENT")
	if agentBin == "" {
		agentBin = filepath.Join(tmp, "srcip-agent")
		build[agentBin] = "../../../cmd/srcip-agent"
	}
	for out, pkg := range build {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fail("build %s: %v\n%s", pkg, err, b)
		}
	}
	if err := cluster.CleanupStale("", func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
		return fail("cleanup of stale labs: %v", err)
	}
	logf := func(f string, a ...any) {
		if os.Getenv("SRCIP_CLUSTER_VERBOSE") != "" {
			fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+f+"\n", a...)
		}
	}
	t0 := time.Now()
	theCluster, err = cluster.Start(context.Background(), cluster.Config{
		Lab:      lab.Config{ManifestsDir: "../testdata/nodes", NoGateway: true, EchoBin: echoBin},
		AgentBin: agentBin, EchoBin: echoBin, PauseBin: pause, CNIBin: cni, PortmapBin: portmap,
		CNI:  cluster.CNIChained,
		CRDs: []string{"../../../deploy/crds/crd-egressgateway.yaml"},
		AgentArgs: []string{"--lease-namespace=default", "--egress-lease-duration=3s",
			"--egress-renew-deadline=2s", "--egress-retry-period=500ms"},
		Logf: logf,
		// Dual-stack (issue 22): SRCIP_LAB_DUAL_STACK=1; default IPv4 only.
		DualStack: os.Getenv("SRCIP_LAB_DUAL_STACK") == "1",
	})
	if err != nil {
		if theCluster != nil {
			fmt.Fprint(os.Stderr, theCluster.LogTails(25))
			_ = theCluster.Close()
		}
		return fail("cluster: %v", err)
	}
	fmt.Printf("chained cluster: up in %v (dual-stack %v)\n", time.Since(t0).Round(time.Millisecond), theCluster.DualStack())
	code := m.Run()
	if code != 0 {
		fmt.Fprint(os.Stderr, theCluster.LogTails(40))
	}
	if err := theCluster.Close(); err != nil && code == 0 {
		code = fail("cluster close: %v", err)
	}
	return code
}

// serveOutside runs the echo server (TCP 9090) in the client netns; it logs the source it sees
// in every reply.
func serveOutside(t *testing.T) { serveIn(t, "client", ":9090") }

// serveIn runs the echo server on addr in the netns of the lab node or client name.
func serveIn(t *testing.T, name, addr string) {
	ns, err := theCluster.Lab.Netns(name)
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, echoBin, "serve", "--tcp", addr, "--name", "outside", "--node", name)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGTERM); _ = cmd.Wait() })
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "ready") }, 5*time.Second, 20*time.Millisecond)
}

func deployOn(t *testing.T, name, node string) corev1.Pod {
	ctx := context.Background()
	d := cluster.EchoDeployment("default", name, 1)
	d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	_, err := theCluster.Client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)
	pods, err := theCluster.WaitPodsReady(ctx, "default", "app="+name, 1, 2*time.Minute)
	require.NoError(t, err)
	return pods[0]
}

// sourceSeen asks the outside server from pod p until the source it sees is want (or 30 s).
func sourceSeen(t *testing.T, p *corev1.Pod, want string) string {
	return sourceSeenAt(t, p, clientIP+":9090", want)
}

// sourceSeenAt is sourceSeen for the server at target.
func sourceSeenAt(t *testing.T, p *corev1.Pod, target, want string) string {
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r, err := theCluster.PodRequest(p, "tcp", target)
		if err == nil {
			last = r.ClientIP()
			if last == want {
				return last
			}
		} else {
			last = err.Error()
		}
		time.Sleep(300 * time.Millisecond)
	}
	return last
}

func TestChainedEgress(t *testing.T) {
	ctx := context.Background()
	c := theCluster
	serveOutside(t)
	ecs, err := egressclient.NewForConfig(c.CP.RESTConfig)
	require.NoError(t, err)
	// One EgressGateway per family (the CRD wants the egress IPs and destinations of a policy in
	// one family): job's IPv4 through "job", its IPv6 through "job6".
	policies := []egressv1.EgressGatewaySpec{{EgressIPs: []string{egressIP}, Destinations: []string{cluster.ChainedDestinations}}}
	if c.DualStack() {
		policies = append(policies, egressv1.EgressGatewaySpec{EgressIPs: []string{egressIP6}, Destinations: []string{cluster.ChainedDestinations6}})
	}
	for i, spec := range policies {
		name := "job"
		if i > 0 {
			name = "job6"
		}
		spec.GatewayNodeSelector = metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "node3"}}
		spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "job"}}
		_, err = ecs.OvsSrcipV1alpha1().EgressGateways().Create(ctx, &egressv1.EgressGateway{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{})
		require.NoError(t, err, name)
	}

	job := deployOn(t, "job", "node2")
	plain := deployOn(t, "plain", "node2")
	kn := c.KNodes["node2"]
	for _, p := range []corev1.Pod{job, plain} {
		ip := netip.MustParseAddr(p.Status.PodIP)
		assert.True(t, cluster.ChainedSubnet(kn.PodCIDR).Contains(ip), "%s has %s: the main CNI's address", p.Name, ip)
		out, err := c.PodExec(&p, "ip", "route", "show", cluster.ChainedDestinations)
		t.Logf("%s (%s): route %s", p.Name, ip, strings.TrimSpace(out))
		assert.NoError(t, err)
	}
	ports, err := c.Lab.Vsctl("node2", "--columns=name,external_ids", "find", "Interface", "external_ids:srcip-cni-mode=chained")
	require.NoError(t, err)
	t.Logf("node2 chained ports:\n%s", ports)
	assert.Contains(t, ports, job.Status.PodIP)
	assert.Contains(t, ports, plain.Status.PodIP)

	got := sourceSeen(t, &job, egressIP)
	t.Logf("job (%s on node2, selected; gateway node3) -> %s:9090: the outside server saw %s", job.Status.PodIP, clientIP, got)
	assert.Equal(t, egressIP, got)
	node2 := c.Lab.Node("node2").IP.String()
	got = sourceSeen(t, &plain, node2)
	t.Logf("plain (%s on node2, not selected) -> %s:9090: the outside server saw %s", plain.Status.PodIP, clientIP, got)
	assert.Equal(t, node2, got)

	if c.DualStack() {
		chainedIPv6(t, job, plain)
	}

	flows, err := c.Lab.Ofctl("node2", "dump-flows", "br-int", "table=60")
	require.NoError(t, err)
	for _, l := range strings.Split(flows, "\n") {
		if strings.Contains(l, job.Status.PodIP) {
			t.Logf("node2 br-int: %s", strings.TrimSpace(l))
		}
	}
}

// podIP6 is p's IPv6 address (status.podIPs, by family).
func podIP6(t *testing.T, p corev1.Pod) netip.Addr {
	t.Helper()
	for _, s := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(s.IP); err == nil && a.Is6() {
			return a
		}
	}
	t.Fatalf("pod %s has no IPv6 address in status.podIPs %v", p.Name, p.Status.PodIPs)
	return netip.Addr{}
}

// chainedIPv6 is TestChainedEgress's dual-stack part: job's IPv6 traffic to the client's IPv6
// subnet (listed) leaves as the IPv6 egress IP through node3, plain's (not selected) as node2's
// IPv6 address through the host path; an unlisted IPv6 destination (node3's IPv6 InternalIP) is
// routed through the main CNI's interface, not srcip0; and what job sends on srcip0 to it anyway
// (an injected route: a pod with NET_ADMIN) does not leave as the egress IP.
func chainedIPv6(t *testing.T, job, plain corev1.Pod) {
	c := theCluster
	kn := c.KNodes["node2"]
	for _, p := range []corev1.Pod{job, plain} {
		ip6 := podIP6(t, p)
		assert.True(t, cluster.ChainedSubnet6(kn.PodCIDR).Contains(ip6), "%s has %s: the main CNI's IPv6 address", p.Name, ip6)
		out, err := c.PodExec(&p, "ip", "-6", "route", "show", cluster.ChainedDestinations6)
		t.Logf("%s (%s): route %s", p.Name, ip6, strings.TrimSpace(out))
		require.NoError(t, err)
		assert.Contains(t, out, "via "+flows.ChainedGatewayIP6.String()+" dev srcip0")
		assert.Contains(t, out, "src "+ip6.String())
		out, err = c.PodExec(&p, "ip", "-6", "neigh", "show", "dev", "srcip0")
		require.NoError(t, err)
		assert.Contains(t, out, flows.ChainedGatewayIP6.String()+" lladdr "+flows.ChainedGatewayMAC.String()+" PERMANENT")
	}
	ports, err := c.Lab.Vsctl("node2", "--columns=external_ids", "find", "Interface", "external_ids:srcip-cni-mode=chained")
	require.NoError(t, err)
	assert.Contains(t, ports, podIP6(t, job).String(), "ip_addresses carries the IPv6 address")

	target6 := net.JoinHostPort(c.ClientIP6("client").String(), "9090")
	got := sourceSeenAt(t, &job, target6, egressIP6)
	t.Logf("job (%s on node2, selected; gateway node3) -> %s: the outside server saw %s", podIP6(t, job), target6, got)
	assert.Equal(t, egressIP6, got)
	node2v6 := kn.IP6.String()
	got = sourceSeenAt(t, &plain, target6, node2v6)
	t.Logf("plain (%s on node2, not selected) -> %s: the outside server saw %s", podIP6(t, plain), target6, got)
	assert.Equal(t, node2v6, got)

	// An unlisted IPv6 destination: node3's IPv6 InternalIP, with a server on it.
	node3v6 := c.KNodes["node3"].IP6
	serveIn(t, "node3", net.JoinHostPort(node3v6.String(), "9091"))
	unlisted := net.JoinHostPort(node3v6.String(), "9091")
	out, err := c.PodExec(&job, "ip", "-6", "route", "get", node3v6.String())
	require.NoError(t, err)
	t.Logf("job: route get %s: %s", node3v6, strings.TrimSpace(out))
	assert.NotContains(t, out, "srcip0", "an unlisted destination is not routed through the egress interface")
	tx0 := srcip0TX(t, &job)
	got = sourceSeenAt(t, &job, unlisted, node2v6)
	t.Logf("job -> %s (unlisted, through eth0): the server saw %s; srcip0 tx_packets %d -> %d", unlisted, got, tx0, srcip0TX(t, &job))
	assert.NotEqual(t, egressIP6, got)
	assert.Equal(t, tx0, srcip0TX(t, &job), "nothing for an unlisted destination went out srcip0")

	// The injector: job routes the unlisted destination through srcip0 itself. br-int does not
	// give it the egress IP (not a destination of the policy): it takes the host path, where the
	// main CNI's masquerade gives it node2's address, or goes nowhere.
	ip6 := podIP6(t, job).String()
	_, err = c.PodExec(&job, "ip", "-6", "route", "add", node3v6.String()+"/128", "via", flows.ChainedGatewayIP6.String(), "dev", "srcip0", "src", ip6)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = c.PodExec(&job, "ip", "-6", "route", "del", node3v6.String()+"/128", "dev", "srcip0") })
	got = sourceSeenAt(t, &job, unlisted, node2v6)
	t.Logf("job -> %s injected on srcip0: the server saw %s; srcip0 tx_packets now %d", unlisted, got, srcip0TX(t, &job))
	assert.NotEqual(t, egressIP6, got, "an unlisted destination never leaves as the egress IP")
	assert.Greater(t, srcip0TX(t, &job), tx0, "the injected packets did go out srcip0")
}

// srcip0TX is the tx_packets counter of the egress interface in pod p (ip -j -s link).
func srcip0TX(t *testing.T, p *corev1.Pod) uint64 {
	t.Helper()
	out, err := theCluster.PodExec(p, "ip", "-j", "-s", "link", "show", "dev", "srcip0")
	require.NoError(t, err)
	var links []struct {
		Stats64 struct {
			TX struct {
				Packets uint64 `json:"packets"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &links), out)
	require.Len(t, links, 1, out)
	return links[0].Stats64.TX.Packets
}
