//go:build metallb

// Package metallb runs MetalLB beside ovs-srcip on the real-kubelet lab (issue 24): MetalLB
// v0.15.2's controller (a Deployment, on srcip-cni) and speakers (a hostNetwork DaemonSet), built
// by hack/metallb/build.sh from the Go module proxy and installed from the module's own
// metallb-native.yaml, edited in memory (installMetalLB); ovs-srcip's agents run as in the other
// test/cluster packages. The router has no static route to the LoadBalancer range
// (lab.Config.Routes empty): only MetalLB's announcements bring LB traffic to a node.
//
// Behind the build tag metallb for now (make test-metallb), outside make test's ./test/cluster/...
package metallb

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/cluster/frr"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const clientIP = "198.51.100.10"

var (
	theCluster *cluster.Cluster
	mlbDir     string        // hack/metallb/build.sh's output
	installDur time.Duration // installMetalLB: apply to controller and 3 speakers Ready
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
		return 1
	}
	tmp, err := os.MkdirTemp("", "srcip-metallb")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(tmp)
	echo, pause, cni, portmap := filepath.Join(tmp, "echo"), filepath.Join(tmp, "pause"), filepath.Join(tmp, "srcip-cni"), filepath.Join(tmp, "portmap")
	build := map[string]string{echo: "../../echo", pause: "../../pause", cni: "../../../cmd/srcip-cni",
		portmap: "github.com/containernetworking/plugins/plugins/meta/portmap"}
	agent := os.Getenv("SRCIP_AGENT")
	if agent == "" {
		agent = filepath.Join(tmp, "srcip-agent")
		build[agent] = "../../../cmd/srcip-agent"
	}
	// SRCIP_METALLB_TEST_BINS: a directory with echo, pause, srcip-cni, portmap and srcip-agent built
	// already (CGO off), so that a run under the shared lab lock compiles nothing.
	if d := os.Getenv("SRCIP_METALLB_TEST_BINS"); d != "" {
		echo, pause, cni, portmap = filepath.Join(d, "echo"), filepath.Join(d, "pause"), filepath.Join(d, "srcip-cni"), filepath.Join(d, "portmap")
		if agent == filepath.Join(tmp, "srcip-agent") {
			agent = filepath.Join(d, "srcip-agent")
		}
		build = nil
	}
	for out, pkg := range build {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fail("build %s: %v\n%s", pkg, err, b)
		}
	}
	t0 := time.Now()
	if mlbDir, err = buildMetalLB(); err != nil {
		return fail("%v", err)
	}
	fmt.Printf("metallb: binaries and images in %s (hack/metallb/build.sh %v)\n", mlbDir, time.Since(t0).Round(time.Millisecond))
	if _, err := frr.CleanupStale("", func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
		return fail("cleanup of stale FRR pathspaces: %v", err)
	}
	if err := cluster.CleanupStale("", func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }); err != nil {
		return fail("cleanup of stale labs: %v", err)
	}
	logf := func(f string, a ...any) {
		if os.Getenv("SRCIP_CLUSTER_VERBOSE") != "" {
			fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+f+"\n", a...)
		}
	}
	t1 := time.Now()
	theCluster, err = cluster.Start(context.Background(), cluster.Config{
		// Routes empty: no static route to 203.0.113.0/24; MetalLB announces the LB IPs.
		Lab:      lab.Config{ManifestsDir: "../testdata/nodes", NoGateway: true, EchoBin: echo, Routes: map[string]string{}},
		AgentBin: agent, EchoBin: echo, PauseBin: pause, CNIBin: cni, PortmapBin: portmap,
		CRDs:            []string{"../../../deploy/crds/crd-egressgateway.yaml"},
		ServiceAccounts: true,
		Images:          []string{filepath.Join(mlbDir, "metallb-controller.tar"), filepath.Join(mlbDir, "metallb-speaker.tar")},
		Logf:            logf,
	})
	if err != nil {
		if theCluster != nil {
			fmt.Fprint(os.Stderr, theCluster.LogTails(25))
			_ = theCluster.Close()
		}
		return fail("cluster: %v", err)
	}
	fmt.Printf("metallb cluster: up in %v\n", time.Since(t1).Round(time.Millisecond))
	t2 := time.Now()
	err = installMetalLB(context.Background(), theCluster, mlbDir)
	installDur = time.Since(t2)
	code := 0
	if err != nil {
		code = fail("install MetalLB: %v", err)
	} else {
		fmt.Printf("metallb: installed, controller and 3 speakers Ready %v after the apply\n", installDur.Round(time.Millisecond))
		code = m.Run()
	}
	if code != 0 {
		fmt.Fprint(os.Stderr, theCluster.LogTails(40))
		fmt.Fprint(os.Stderr, metalLBLogs(theCluster))
		keep := filepath.Join(os.TempDir(), "srcip-metallb-logs-"+theCluster.Lab.Prefix)
		if err := theCluster.SaveLogs(keep); err == nil {
			fmt.Fprintf(os.Stderr, "cluster logs kept in %s\n", keep)
		}
	}
	if d, err := time.ParseDuration(os.Getenv("SRCIP_CLUSTER_HOLD")); err == nil {
		fmt.Fprintf(os.Stderr, "holding the cluster %s for %v (KUBECONFIG=%s)\n", theCluster.Lab.Prefix, d, theCluster.Kubeconfig)
		time.Sleep(d)
	}
	if err := theCluster.Close(); err != nil && code == 0 {
		code = fail("cluster close: %v", err)
	}
	return code
}

// buildMetalLB returns $SRCIP_METALLB_BIN, else runs hack/metallb/build.sh (a cache hit after
// `make metallb`) and returns its directory.
func buildMetalLB() (string, error) {
	if d := os.Getenv("SRCIP_METALLB_BIN"); d != "" {
		return d, nil
	}
	cmd := exec.Command("../../../hack/metallb/build.sh")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/metallb/build.sh: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}
