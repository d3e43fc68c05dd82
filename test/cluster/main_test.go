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
	bins       struct{ agent, echo, pause, cni string }
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
	bins.agent, bins.echo = os.Getenv("SRCIP_AGENT"), os.Getenv("SRCIP_ECHO")
	bins.pause, bins.cni = filepath.Join(tmp, "pause"), filepath.Join(tmp, "srcip-cni")
	build := map[string]string{bins.pause: "../pause", bins.cni: "../../cmd/srcip-cni"}
	if bins.agent == "" || bins.echo == "" {
		bins.agent, bins.echo = filepath.Join(tmp, "srcip-agent"), filepath.Join(tmp, "echo")
		build[bins.agent], build[bins.echo] = "../../cmd/srcip-agent", "../echo"
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
		AgentBin: bins.agent, EchoBin: bins.echo, PauseBin: bins.pause, CNIBin: bins.cni,
		CNI: cni, Logf: logf,
	})
	if err != nil {
		return fail("cluster: %v", err)
	}
	fmt.Printf("cluster: up in %v (node binaries build/cache %v; lab %v)\n", time.Since(t0).Round(time.Millisecond),
		theCluster.BuildTime.Round(time.Millisecond), theCluster.Lab.SetupTime.Round(time.Millisecond))
	for _, n := range theCluster.Lab.Nodes {
		fmt.Printf("cluster: node %s Ready %v after its start, pod CIDR %s\n", n.Name,
			theCluster.NodeReady[n.Name].Round(time.Millisecond), theCluster.KNodes[n.Name].PodCIDR)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "cluster state kept in the logs under %s until Close\n", theCluster.Lab.Dir)
		fmt.Fprint(os.Stderr, theCluster.LogTails(25))
	}
	if err := theCluster.Close(); err != nil && code == 0 {
		code = fail("cluster close: %v", err)
	}
	return code
}
