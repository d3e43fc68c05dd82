// Package chained runs the real-kubelet lab with srcip-cni in chained mode (issue 9 point 4,
// docs/egress.md#chained-mode): on every node the main CNI is the reference bridge + host-local
// (pods on cni0, 10.88.N.0/24, masqueraded by the bridge plugin), then srcip-cni adds the
// egress interface on br-int. A pod an EgressGateway selects reaches the outside server in the
// client netns from the egress IP; an unselected pod keeps the node IP.
package chained

import (
	"context"
	"fmt"
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
	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	clientIP = "198.51.100.10"
	egressIP = "10.89.0.50"
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
	})
	if err != nil {
		if theCluster != nil {
			fmt.Fprint(os.Stderr, theCluster.LogTails(25))
			_ = theCluster.Close()
		}
		return fail("cluster: %v", err)
	}
	fmt.Printf("chained cluster: up in %v\n", time.Since(t0).Round(time.Millisecond))
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
func serveOutside(t *testing.T) {
	ns, err := theCluster.Lab.Netns("client")
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, echoBin, "serve", "--tcp", ":9090", "--name", "outside", "--node", "client")
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
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r, err := theCluster.PodRequest(p, "tcp", clientIP+":9090")
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
	_, err = ecs.OvsSrcipV1alpha1().EgressGateways().Create(ctx, &egressv1.EgressGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "job"},
		Spec: egressv1.EgressGatewaySpec{
			EgressIPs:           []string{egressIP},
			GatewayNodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": "node3"}},
			PodSelector:         &metav1.LabelSelector{MatchLabels: map[string]string{"app": "job"}},
			Destinations:        []string{cluster.ChainedDestinations},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

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

	flows, err := c.Lab.Ofctl("node2", "dump-flows", "br-int", "table=60")
	require.NoError(t, err)
	for _, l := range strings.Split(flows, "\n") {
		if strings.Contains(l, job.Status.PodIP) {
			t.Logf("node2 br-int: %s", strings.TrimSpace(l))
		}
	}
}
