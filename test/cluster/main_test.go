package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

var (
	theCluster *Cluster
	bins       struct{ agent, echo, pause, cni, portmap string }
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return 1
	}
	tmp, err := os.MkdirTemp("", "srcip-cluster")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(tmp)
	// echo, pause and srcip-cni go into images or onto nodes' root filesystems: always built here,
	// static (a `make build` echo may be dynamically linked: "exec /echo: no such file or directory").
	bins.echo, bins.pause, bins.cni = filepath.Join(tmp, "echo"), filepath.Join(tmp, "pause"), filepath.Join(tmp, "srcip-cni")
	bins.portmap = filepath.Join(tmp, "portmap")
	build := map[string]string{bins.echo: "../echo", bins.pause: "../pause", bins.cni: "../../cmd/srcip-cni",
		bins.portmap: "github.com/containernetworking/plugins/plugins/meta/portmap"}
	if bins.agent = os.Getenv("SRCIP_AGENT"); bins.agent == "" {
		bins.agent = filepath.Join(tmp, "srcip-agent")
		build[bins.agent] = "../../cmd/srcip-agent"
	}
	for out, pkg := range build {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fail("build %s: %v\n%s", pkg, err, b)
		}
	}
	if err := CleanupStale("", func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
		return fail("cleanup of stale labs: %v", err)
	}
	cni := os.Getenv("SRCIP_CLUSTER_CNI")
	// kube-proxy's mode: nftables (default) or iptables (kubeadm's default); make test runs the
	// suite in both.
	proxyMode := os.Getenv("SRCIP_CLUSTER_PROXY_MODE")
	logf := func(f string, a ...any) {
		if os.Getenv("SRCIP_CLUSTER_VERBOSE") != "" {
			fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+f+"\n", a...)
		}
	}
	t0 := time.Now()
	lc := labConfig()
	lc.EchoBin = bins.echo
	theCluster, err = Start(context.Background(), Config{
		Lab:      lc,
		AgentBin: bins.agent, EchoBin: bins.echo, PauseBin: bins.pause, CNIBin: bins.cni, PortmapBin: bins.portmap,
		CNI: cni, ProxyMode: proxyMode, Logf: logf,
		// EgressGateways served from the start; short gateway-election settings (as test/kubee2e)
		// so that TestEgressFailoverUnderLoad's failovers take seconds.
		CRDs: []string{"../../deploy/crds/crd-egressgateway.yaml"},
		AgentArgs: []string{"--lease-namespace=" + leaseNS, "--egress-lease-duration=" + leaseDuration.String(),
			"--egress-renew-deadline=" + renewDeadline.String(), "--egress-retry-period=" + retryPeriod.String()},
		// Dual-stack (issue 22): SRCIP_LAB_DUAL_STACK=1; default IPv4 only.
		DualStack: os.Getenv("SRCIP_LAB_DUAL_STACK") == "1",
	})
	if err != nil {
		return fail("cluster: %v", err)
	}
	fmt.Printf("cluster: up in %v (node binaries build/cache %v; lab %v; kube-proxy in %s mode)\n", time.Since(t0).Round(time.Millisecond),
		theCluster.BuildTime.Round(time.Millisecond), theCluster.Lab.SetupTime.Round(time.Millisecond), theCluster.ProxyMode())
	for _, n := range theCluster.Lab.Nodes {
		if kn := theCluster.KNodes[n.Name]; theCluster.DualStack() {
			fmt.Printf("cluster: node %s Ready %v after its start, pod CIDRs %s %s, InternalIPs %s %s (dual-stack)\n", n.Name,
				theCluster.NodeReady[n.Name].Round(time.Millisecond), kn.PodCIDR, kn.PodCIDR6, kn.IP, kn.IP6)
			continue
		}
		fmt.Printf("cluster: node %s Ready %v after its start, pod CIDR %s\n", n.Name,
			theCluster.NodeReady[n.Name].Round(time.Millisecond), theCluster.KNodes[n.Name].PodCIDR)
	}
	code := m.Run()
	if d, err := time.ParseDuration(os.Getenv("SRCIP_CLUSTER_HOLD")); err == nil {
		fmt.Fprintf(os.Stderr, "holding the cluster %s for %v (KUBECONFIG=%s)\n", theCluster.Lab.Prefix, d, theCluster.Kubeconfig)
		time.Sleep(d)
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "cluster state kept in the logs under %s until Close\n", theCluster.Lab.Dir)
		fmt.Fprint(os.Stderr, theCluster.LogTails(25))
		keep := filepath.Join(os.TempDir(), "srcip-cluster-logs-"+theCluster.Lab.Prefix)
		if err := theCluster.SaveLogs(keep); err != nil {
			fmt.Fprintf(os.Stderr, "save logs: %v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "cluster logs kept in %s\n", keep)
		}
	}
	if err := theCluster.Close(); err != nil && code == 0 {
		code = fail("cluster close: %v", err)
	}
	return code
}
