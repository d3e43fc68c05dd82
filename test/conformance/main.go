// Command conformance runs Kubernetes' own e2e tests (e2e.test and ginkgo of the control plane's
// version, built by hack/conformance/build.sh) against the real-kubelet lab (test/cluster in
// Conformance mode: real kubelets, containerd, kube-proxy, CoreDNS, the e2e images imported on
// every node) and prints pass/fail per test and the totals, per mode:
//
//	plain   srcip-cni is the pod network, no Service is annotated: kube-proxy serves Services;
//	all     the agents run with --preserve-source-ip=all: every eligible Service (ETP=Cluster
//	        with an external entry point) is on the preserved-source path, so the upstream Service
//	        tests exercise it;
//	bridge  the reference bridge + host-local CNI instead of ovs-srcip, kube-proxy alone: the
//	        baseline of this lab.
//
// plain and all run on one lab (the agents restart with the new flag between them, the control
// plane and kubelets stay); bridge gets its own. The focus is [sig-network]; skips.go lists what
// is skipped and why (docs/conformance.md shows the same list). The exit status is non-zero when a
// mode has a failure that is not a known one, when the pass sets of plain and all differ by
// more than knownDiffs, or when a mode ran no test at all. The shared lab is closed before a
// bridge lab starts (two labs cannot route the same prefixes from the root netns).
//
//	make conformance                                   # plain and all, every [sig-network] test
//	go run ./test/conformance -e2e DIR -modes plain,all -focus '\[sig-network\].*\[Conformance\]'
//
// Reports (ginkgo JSON, e2e logs, the cluster's logs of a failed mode) go to -out.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

type options struct {
	e2eDir, out, focus, skip, modes, agent, echo, pause, cni string
	procs                                                    int
	timeout                                                  time.Duration
	verbose, dualStack                                       bool
	hold                                                     time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.e2eDir, "e2e", "", "hack/conformance/build.sh's output: e2e.test, ginkgo, kubectl, images/")
	flag.StringVar(&o.out, "out", "bin/conformance", "directory for the reports")
	flag.StringVar(&o.focus, "focus", `\[sig-network\]`, "ginkgo --focus")
	flag.StringVar(&o.skip, "skip", "", "extra ginkgo --skip, added to the skip list of skips.go")
	flag.StringVar(&o.modes, "modes", "plain,all", "comma-separated modes: plain, all, bridge")
	flag.StringVar(&o.agent, "agent", "bin/srcip-agent", "srcip-agent binary")
	flag.StringVar(&o.echo, "echo", "", "static test/echo binary (default: built)")
	flag.StringVar(&o.pause, "pause", "", "static test/pause binary (default: built)")
	flag.StringVar(&o.cni, "cni", "", "static srcip-cni binary (default: built)")
	flag.IntVar(&o.procs, "procs", 4, "ginkgo parallel processes")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Hour, "ginkgo --timeout per mode")
	flag.BoolVar(&o.verbose, "v", false, "log every lab command")
	flag.BoolVar(&o.dualStack, "dual-stack", false, "dual-stack labs (cluster.Config.DualStack): the IPv6 and dual-stack tests run instead of being skipped")
	flag.DurationVar(&o.hold, "hold", 0, "keep each lab up this long after its mode (debugging)")
	flag.Parse()
	// SIGINT (Ctrl-C) and SIGTERM cancel the run: ginkgo gets SIGINT (it stops its processes),
	// the lab is closed (netns, routes, OVS, kubelets, containers, cgroups), the temporary
	// binaries removed; then the exit status is 130.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	interrupted := ctx.Err() != nil
	stop()
	if interrupted {
		fmt.Fprintln(os.Stderr, "conformance: interrupted; the lab is closed")
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

// modeNames are the modes -modes accepts.
var modeNames = []string{"plain", "all", "bridge"}

// validate checks the flags before anything is built or started: the modes and both regular
// expressions.
func validate(o options) error {
	if o.e2eDir == "" {
		return errors.New("-e2e is required (hack/conformance/build.sh's last line)")
	}
	for _, m := range strings.Split(o.modes, ",") {
		if !slices.Contains(modeNames, m) {
			return fmt.Errorf("unknown mode %q in -modes %q (plain, all, bridge; comma-separated, no spaces)", m, o.modes)
		}
	}
	if _, err := regexp.Compile(o.focus); err != nil {
		return fmt.Errorf("-focus: %w", err)
	}
	if _, err := regexp.Compile(o.skip); err != nil {
		return fmt.Errorf("-skip: %w", err)
	}
	if o.procs < 1 {
		return fmt.Errorf("-procs %d: want at least 1", o.procs)
	}
	return nil
}

// result is one spec's outcome.
type result struct {
	Name    string
	State   string // passed, failed, skipped, pending, panicked, timedout, interrupted, aborted
	RunTime time.Duration
	Failure string
}

// modeRun is one mode's outcome.
type modeRun struct {
	Mode    string
	Results []result
	Wall    time.Duration
}

func (m modeRun) count(state string) int {
	n := 0
	for _, r := range m.Results {
		if r.State == state {
			n++
		}
	}
	return n
}

func (m modeRun) set(state string) map[string]bool {
	s := map[string]bool{}
	for _, r := range m.Results {
		if r.State == state {
			s[r.Name] = true
		}
	}
	return s
}

func run(ctx context.Context, o options) error {
	if err := validate(o); err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	out, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	o.out = out
	var portmap string
	bins, cleanup, err := staticBinaries(o)
	if err != nil {
		return err
	}
	defer cleanup()
	o.echo, o.pause, o.cni, portmap = bins[0], bins[1], bins[2], bins[3]
	if o.agent, err = filepath.Abs(o.agent); err != nil {
		return err
	}
	images, coredns, err := e2eImages(o.e2eDir)
	if err != nil {
		return err
	}
	logf := func(string, ...any) {}
	if o.verbose {
		logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+f+"\n", a...) }
	}
	if err := cluster.CleanupStale("", logf); err != nil {
		return fmt.Errorf("cleanup of stale labs: %w", err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var runs []modeRun
	modes := strings.Split(o.modes, ",")
	var shared *cluster.Cluster
	defer func() {
		if shared != nil {
			_ = shared.Close()
		}
	}()
	for _, mode := range modes {
		var c *cluster.Cluster
		switch mode {
		case "plain", "all":
			if shared == nil {
				if shared, err = startLab(ctx, o, portmap, cluster.CNISrcip, images, coredns, logf); err != nil {
					return fmt.Errorf("mode %s: %w", mode, err)
				}
			}
			c = shared
			var args []string
			if mode == "all" {
				args = []string{"--preserve-source-ip=all"}
			}
			if err := restartAgents(c, args); err != nil {
				return fmt.Errorf("mode %s: %w", mode, err)
			}
		case "bridge":
			// Two labs cannot run at once: both route the node underlay and the cluster CIDR
			// from the root netns, and the second's lab.CheckRoutesFree refuses the first's
			// routes. A later plain or all starts a new shared lab.
			if shared != nil {
				_ = shared.Close()
				shared = nil
			}
			if c, err = startLab(ctx, o, portmap, cluster.CNIBridge, images, coredns, logf); err != nil {
				return fmt.Errorf("mode %s: %w", mode, err)
			}
		default: // validate refused it
			return fmt.Errorf("unknown mode %q", mode)
		}
		r, err := runMode(ctx, o, c, mode)
		if ctx.Err() != nil {
			if mode == "bridge" {
				_ = c.Close()
			}
			return ctx.Err()
		}
		if o.hold > 0 {
			fmt.Fprintf(os.Stderr, "holding the %s lab %s for %v (KUBECONFIG=%s)\n", mode, c.Lab.Prefix, o.hold, c.Kubeconfig)
			time.Sleep(o.hold)
		}
		if err != nil || r.count("failed") > 0 {
			dir := filepath.Join(o.out, mode+"-logs")
			_ = os.RemoveAll(dir)
			if serr := c.SaveLogs(dir); serr == nil {
				fmt.Printf("mode %s: the lab's logs are in %s\n", mode, dir)
			}
		}
		if mode == "bridge" {
			_ = c.Close()
		}
		if err != nil {
			return fmt.Errorf("mode %s: %w", mode, err)
		}
		runs = append(runs, r)
		printMode(r)
	}
	return verdict(runs)
}

// staticBinaries builds test/echo, test/pause, srcip-cni and portmap static (they go into images and onto
// the nodes' root filesystems) unless given.
func staticBinaries(o options) ([]string, func(), error) {
	tmp, err := os.MkdirTemp("", "srcip-conformance")
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	var out []string
	for _, b := range []struct{ given, pkg, name string }{
		{o.echo, "./test/echo", "echo"}, {o.pause, "./test/pause", "pause"}, {o.cni, "./cmd/srcip-cni", "srcip-cni"},
		{"", "github.com/containernetworking/plugins/plugins/meta/portmap", "portmap"},
	} {
		if b.given != "" {
			p, err := filepath.Abs(b.given)
			if err != nil {
				cleanup()
				return nil, nil, err
			}
			out = append(out, p)
			continue
		}
		p := filepath.Join(tmp, b.name)
		cmd := exec.Command("go", "build", "-o", p, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if bs, err := cmd.CombinedOutput(); err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("build %s: %v\n%s", b.pkg, err, bs)
		}
		out = append(out, p)
	}
	return out, cleanup, nil
}

// e2eImages lists the image tarballs of build.sh's images/ and finds the CoreDNS reference in
// images/images.txt ("REF FILE" per line).
func e2eImages(dir string) (tars []string, coredns string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "images", "images.txt"))
	if err != nil {
		return nil, "", err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		tars = append(tars, filepath.Join(dir, "images", f[1]))
		if strings.Contains(f[0], "/coredns/coredns:") {
			coredns = f[0]
		}
	}
	if coredns == "" {
		return nil, "", fmt.Errorf("%s/images/images.txt names no coredns image", dir)
	}
	return tars, coredns, nil
}

func startLab(ctx context.Context, o options, portmap, cni string, images []string, coredns string, logf func(string, ...any)) (*cluster.Cluster, error) {
	t := time.Now()
	nodes, err := nodesDir()
	if err != nil {
		return nil, err
	}
	c, err := cluster.Start(ctx, cluster.Config{
		Lab:         lab.Config{ManifestsDir: nodes, NoGateway: true, EchoBin: o.echo},
		AgentBin:    o.agent,
		EchoBin:     o.echo,
		PauseBin:    o.pause,
		CNIBin:      o.cni,
		PortmapBin:  portmap,
		CNI:         cni,
		Conformance: true,
		DualStack:   o.dualStack,
		Images:      images,
		Logf:        logf,
	})
	if err != nil {
		return nil, err
	}
	if err := c.DeployCoreDNS(ctx, coredns, 3*time.Minute); err != nil {
		_ = c.Close()
		return nil, err
	}
	fmt.Printf("lab %s (%s CNI): up with CoreDNS in %v\n", c.Lab.Prefix, cni, time.Since(t).Round(time.Second))
	return c, nil
}

// nodesDir finds test/cluster/testdata/nodes above the working directory.
func nodesDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "test", "cluster", "testdata", "nodes")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("test/cluster/testdata/nodes not found above %s", wd)
		}
	}
}

// restartAgents gives every agent args and restarts it when they differ from its current ones,
// then waits until each has logged its first full sync since the start.
func restartAgents(c *cluster.Cluster, args []string) error {
	if slices.Equal(c.AgentArgsExtra(), args) {
		return nil
	}
	c.SetAgentArgs(args...)
	for _, kn := range c.KNodes {
		if err := kn.RestartAgent(); err != nil {
			return err
		}
	}
	return lab.WaitFor(func() error {
		for name, kn := range c.KNodes {
			b, err := os.ReadFile(kn.AgentLog())
			if err != nil {
				return err
			}
			s := string(b)
			last := strings.LastIndex(s, "=== agent")
			if last < 0 || !strings.Contains(s[last:], "First full sync done") {
				return fmt.Errorf("agent of %s has not synced yet", name)
			}
		}
		return nil
	}, 2*time.Minute)
}

func runMode(ctx context.Context, o options, c *cluster.Cluster, mode string) (modeRun, error) {
	t := time.Now()
	dir := filepath.Join(o.out, mode)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return modeRun{}, err
	}
	var skipRE []string
	for _, s := range skipList(o.dualStack) {
		skipRE = append(skipRE, s.Pattern)
	}
	if o.skip != "" {
		skipRE = append(skipRE, o.skip)
	}
	argv := []string{filepath.Join(o.e2eDir, "ginkgo"),
		"--procs=" + fmt.Sprint(o.procs), "--timeout=" + o.timeout.String(), "--no-color",
		"--focus=" + o.focus, "--skip=" + strings.Join(skipRE, "|"),
		"--json-report=report.json", "--output-dir=" + dir, "--silence-skips",
		filepath.Join(o.e2eDir, "e2e.test"), "--",
		"--kubeconfig=" + c.Kubeconfig,
		"--kubectl-path=" + filepath.Join(o.e2eDir, "kubectl"),
		"--provider=skeleton",
		"--num-nodes=3",
		"--report-dir=" + dir,
		"--disable-log-dump",
		"--dump-logs-on-failure=false",
	}
	fmt.Printf("mode %s: %s\n", mode, strings.Join(argv, " "))
	logFile, err := os.Create(filepath.Join(dir, "e2e.log"))
	if err != nil {
		return modeRun{}, err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// On cancel ginkgo gets SIGINT, which it forwards to its parallel processes; SIGKILL after 30 s.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
	var samp *sampler
	if mode != "bridge" {
		samp = startSampler(c)
	}
	runErr := cmd.Run()
	if samp != nil {
		r0 := samp.stop()
		fmt.Printf("mode %s: %d service-port flow sets were on the preserved-source path during the run (distinct "+
			"service-port cookies in the nodes' br-ex, sampled every %v), %d of them matched packets\n",
			mode, r0.ports, sampleEvery, r0.hit)
	}
	var extra *regexp.Regexp
	if o.skip != "" {
		extra = regexp.MustCompile(o.skip)
	}
	r, err := readReport(filepath.Join(dir, "report.json"), regexp.MustCompile(o.focus), extra, skipList(o.dualStack))
	r.Mode, r.Wall = mode, time.Since(t)
	if err != nil {
		return r, fmt.Errorf("ginkgo: %v; report: %w (log %s)", runErr, err, logFile.Name())
	}
	if runErr != nil && r.count("failed")+r.count("panicked")+r.count("timedout") == 0 {
		return r, fmt.Errorf("ginkgo: %v with no failed test (log %s)", runErr, logFile.Name())
	}
	return r, nil
}

// The parts of ginkgo's JSON report (github.com/onsi/ginkgo/v2/types.Report) that are read.
type ginkgoReport struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeType            string
		LeafNodeText            string
		State                   string
		RunTime                 time.Duration
		Failure                 struct{ Message string }
	}
}

// readReport reads ginkgo's JSON report, keeping the specs whose name matches focus (ginkgo lists
// every spec of the suite, the unfocused ones as skipped). A focused spec that the skip list
// names (list: skipList of the lab), or the extra -skip pattern (nil: none) matches, gets state "listed"; one that skipped
// itself (a provider or zone count the lab lacks) stays "skipped".
func readReport(path string, focus, extra *regexp.Regexp, list []listed) (modeRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return modeRun{}, err
	}
	var reps []ginkgoReport
	if err := json.Unmarshal(b, &reps); err != nil {
		return modeRun{}, err
	}
	var r modeRun
	for _, rep := range reps {
		for _, s := range rep.SpecReports {
			if s.LeafNodeType != "It" {
				continue // suite set-up nodes
			}
			name := strings.TrimSpace(strings.Join(append(slices.Clone(s.ContainerHierarchyTexts), s.LeafNodeText), " "))
			if !focus.MatchString(name) {
				continue
			}
			state := s.State
			if _, ok := matches(list, name); (ok || extra != nil && extra.MatchString(name)) && state == "skipped" {
				state = "listed"
			}
			switch state {
			case "panicked", "timedout", "interrupted", "aborted":
				state = "failed"
			}
			msg := s.Failure.Message
			if len(msg) > 300 {
				msg = msg[:300] + "..."
			}
			r.Results = append(r.Results, result{Name: name, State: state, RunTime: s.RunTime, Failure: msg})
		}
	}
	sort.Slice(r.Results, func(i, j int) bool { return r.Results[i].Name < r.Results[j].Name })
	return r, nil
}

func printMode(r modeRun) {
	fmt.Printf("\n=== mode %s\n", r.Mode)
	for _, x := range r.Results {
		switch x.State {
		case "passed":
			fmt.Printf("PASS  %s (%.1fs)\n", x.Name, x.RunTime.Seconds())
		case "failed":
			fmt.Printf("FAIL  %s (%.1fs)\n      %s\n", x.Name, x.RunTime.Seconds(), strings.ReplaceAll(firstLine(x.Failure), "\n", " "))
		case "skipped", "pending":
			fmt.Printf("SKIP  %s (skipped itself)\n", x.Name)
		}
	}
	fmt.Printf("mode %s: %d passed, %d failed, %d skipped by the skip list, %d skipped by themselves, in %v\n", r.Mode,
		r.count("passed"), r.count("failed"), r.count("listed"), r.count("skipped")+r.count("pending"), r.Wall.Round(time.Second))
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func matches(list []listed, name string) (string, bool) {
	for _, l := range list {
		if regexp.MustCompile(l.Pattern).MatchString(name) {
			return l.Reason, true
		}
	}
	return "", false
}

// verdict compares the modes: plain and all must pass the same tests (knownDiffs excepted), and
// no mode but bridge may fail a test.
func verdict(runs []modeRun) error {
	by := map[string]modeRun{}
	var errs []error
	fmt.Println("\n=== totals")
	for _, r := range runs {
		by[r.Mode] = r
		fmt.Printf("%-6s %3d passed %3d failed %3d skipped (list) %3d skipped (by themselves)  wall %v\n", r.Mode,
			r.count("passed"), r.count("failed"), r.count("listed"), r.count("skipped")+r.count("pending"), r.Wall.Round(time.Second))
	}
	plain, okP := by["plain"]
	all, okA := by["all"]
	if okP && okA {
		pp, pa := plain.set("passed"), all.set("passed")
		var onlyPlain, onlyAll []string
		for n := range pp {
			if !pa[n] {
				onlyPlain = append(onlyPlain, n)
			}
		}
		for n := range pa {
			if !pp[n] {
				onlyAll = append(onlyAll, n)
			}
		}
		sort.Strings(onlyPlain)
		sort.Strings(onlyAll)
		unexpected := 0
		for _, n := range onlyPlain {
			if why, ok := matches(knownDiffs, n); ok {
				fmt.Printf("known: passes in plain, not in all: %s\n       (%s)\n", n, why)
				continue
			}
			unexpected++
			fmt.Printf("DIFF: passes in plain, not in all: %s\n", n)
		}
		for _, n := range onlyAll {
			fmt.Printf("DIFF: passes in all, not in plain: %s\n", n)
			unexpected++
		}
		if unexpected == 0 {
			fmt.Printf("pass sets of plain and all: equal (%d tests)%s\n", len(pp),
				map[bool]string{true: "", false: fmt.Sprintf(", but for %d known", len(onlyPlain))}[len(onlyPlain) == 0])
		} else {
			errs = append(errs, fmt.Errorf("pass sets of plain and all differ by %d tests", unexpected))
		}
	}
	for _, r := range runs {
		// A focus that matches nothing (a renamed test, a typo) runs nothing: that is no pass.
		if r.count("passed")+r.count("failed") == 0 {
			errs = append(errs, fmt.Errorf("mode %s ran no test (does -focus match any spec that is not skipped?)", r.Mode))
		}
		if r.Mode == "bridge" {
			continue
		}
		n := 0
		for _, x := range r.Results {
			if x.State != "failed" {
				continue
			}
			if _, ok := matches(knownDiffs, x.Name); ok && r.Mode == "all" {
				continue
			}
			n++
		}
		if n > 0 {
			errs = append(errs, fmt.Errorf("mode %s: %d tests failed", r.Mode, n))
		}
	}
	if b, ok := by["bridge"]; ok && okP {
		pb, pp := b.set("passed"), plain.set("passed")
		for n := range pb {
			if !pp[n] {
				fmt.Printf("DIFF: passes with the bridge CNI, not in plain: %s\n", n)
				errs = append(errs, fmt.Errorf("plain fails %q, which the bridge CNI passes", n))
			}
		}
	}
	return errors.Join(errs...)
}

// sampleEvery is how often the sampler reads the nodes' br-ex flows.
const sampleEvery = 5 * time.Second

// serviceCookie matches the agent's service-port flows (owner 0x5c, kind 0x10: flows.KindServicePort).
const serviceCookie = "cookie=0x5c10000000000000/0xffff000000000000"

// sampler records, while the e2e tests run, which Service ports the agents programmed into br-ex
// (by cookie) and whether their flows matched packets: in mode all it shows that the upstream
// Service tests went through the preserved-source path, in mode plain that none did.
type sampler struct {
	done    chan struct{}
	stopped chan struct{}
	seen    map[string]int64 // cookie -> most packets of one of its flows on one node
}

type sampled struct{ ports, hit int }

func startSampler(c *cluster.Cluster) *sampler {
	s := &sampler{done: make(chan struct{}), stopped: make(chan struct{}), seen: map[string]int64{}}
	go func() {
		defer close(s.stopped)
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			for _, n := range c.Lab.Nodes {
				out, err := c.Lab.Ofctl(n.Name, "-O", "OpenFlow15", "dump-flows", "br-ex", serviceCookie)
				if err != nil {
					continue
				}
				for _, line := range strings.Split(out, "\n") {
					cookie, pk, ok := cookieAndPackets(line)
					if !ok {
						continue
					}
					if old, ok := s.seen[cookie]; !ok || pk > old {
						s.seen[cookie] = pk
					}
				}
			}
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() sampled {
	close(s.done)
	<-s.stopped
	var r sampled
	for _, pk := range s.seen {
		r.ports++
		if pk > 0 {
			r.hit++
		}
	}
	return r
}

// cookieAndPackets reads the cookie and n_packets of one dump-flows line.
func cookieAndPackets(line string) (cookie string, packets int64, ok bool) {
	for _, f := range strings.Fields(strings.ReplaceAll(line, ",", " ")) {
		if v, found := strings.CutPrefix(f, "cookie="); found {
			cookie = v
		}
		if v, found := strings.CutPrefix(f, "n_packets="); found {
			fmt.Sscan(v, &packets)
		}
	}
	return cookie, packets, cookie != ""
}
