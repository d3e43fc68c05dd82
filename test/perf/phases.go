package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const ownedCookies = "cookie=0x5c00000000000000/0xff00000000000000"

var bridges = []string{"br-int", "br-ex"}

func (b *bench) ofctl(args ...string) (string, error) {
	return run(b.env, append([]string{"ovs-ofctl", "-O", "OpenFlow15", "--no-names"}, args...)...)
}

func (b *bench) target(br string) string { return "unix:" + filepath.Join(b.node.Dir, br+".mgmt") }

// clearAgentFlows removes the agent's flows and every group from both bridges: a cold start.
func (b *bench) clearAgentFlows() error {
	for _, br := range bridges {
		if _, err := b.ofctl("del-groups", b.target(br)); err != nil {
			return err
		}
		if _, err := b.ofctl("del-flows", b.target(br), ownedCookies); err != nil {
			return err
		}
	}
	return nil
}

var flowCountRE = regexp.MustCompile(`flow_count=(\d+)`)

// counts returns the agent's flows and the groups on both bridges, as OVS holds them.
func (b *bench) counts() (flows, groups int, err error) {
	for _, br := range bridges {
		out, err := b.ofctl("dump-aggregate", b.target(br), ownedCookies)
		if err != nil {
			return 0, 0, err
		}
		m := flowCountRE.FindStringSubmatch(out)
		if m == nil {
			return 0, 0, fmt.Errorf("dump-aggregate: %q", out)
		}
		n, _ := strconv.Atoi(m[1])
		flows += n
		out, err = b.ofctl("dump-group-stats", b.target(br))
		if err != nil {
			return 0, 0, err
		}
		groups += strings.Count(out, "group_id=")
	}
	return flows, groups, nil
}

// startAgent clears the agent's flows (a cold start) and starts the agent of node1, with
// -agent-env set for its start only (the lab passes the environment on); it returns the start.
func (b *bench) startAgent() (time.Time, error) {
	if err := b.clearAgentFlows(); err != nil {
		return time.Time{}, err
	}
	var envSet []string
	for _, kv := range strings.Fields(*agentEnv) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			_ = os.Setenv(k, v)
			envSet = append(envSet, k)
		}
	}
	start := time.Now()
	err := b.lab.StartAgent("node1")
	for _, k := range envSet {
		_ = os.Unsetenv(k)
	}
	return start, err
}

// coldStarts runs -cold-runs cold starts of node1's agent and measures them into c: the median
// start -> /readyz, the last run's usage, flows and groups in OVS, messages and step times, its
// usage 3 s later. The last run is left running (the caller stops it; coldStarts does on
// error); onLast, when set, runs right after its start (the profiler).
func (b *bench) coldStarts(c *coldFigures, onLast func()) (err error) {
	var colds []float64
	for range *coldRuns - 1 {
		start, err := b.startAgent()
		if err != nil {
			return err
		}
		ready, err := httpOK("http://"+b.metrics+"/readyz", 5*time.Millisecond, 10*time.Minute)
		_ = b.lab.StopAgent("node1")
		if err != nil {
			return err
		}
		colds = append(colds, ready.Sub(start).Seconds())
		waitQuiet()
	}
	start, err := b.startAgent()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = b.lab.StopAgent("node1")
		}
	}()
	if onLast != nil {
		onLast()
	}
	ready, err := httpOK("http://"+b.metrics+"/readyz", 5*time.Millisecond, 10*time.Minute)
	if err != nil {
		return err
	}
	colds = append(colds, ready.Sub(start).Seconds())
	c.ReadyRunsS = slices.Clone(colds)
	slices.Sort(colds)
	c.ReadyS = colds[len(colds)/2]
	if len(colds) > 1 {
		logf("srcip-agent: cold starts %v s: median %.2f s", c.ReadyRunsS, c.ReadyS)
	}
	pid := b.lab.AgentPid("node1")
	if c.AtReady, err = procUsage(pid); err != nil {
		return err
	}
	if c.Flows, c.Groups, err = b.counts(); err != nil {
		return err
	}
	if c.Messages, err = b.metricSum("srcip_agent_bundle_lines_total"); err != nil {
		return err
	}
	logf("srcip-agent: cold start -> all flows in OVS %.2f s: %d flows, %d groups (%.0f messages), RSS %.0f MB, CPU %.2f s",
		c.ReadyS, c.Flows, c.Groups, c.Messages, c.AtReady.RSSMB, c.AtReady.CPUSeconds)
	if st, err := b.syncSteps("full"); err != nil {
		logf("agent metrics: %v", err)
	} else {
		c.Steps = st.means(nil)
		logf("srcip-agent: its first full sync, ms by step: %s", formatSteps(c.Steps))
	}
	time.Sleep(3 * time.Second)
	if c.Settled, err = procUsage(pid); err != nil {
		return err
	}
	logf("srcip-agent: RSS 3 s after the cold start %.0f MB", c.Settled.RSSMB)
	if c.FlowsLater, _, err = b.counts(); err != nil {
		return err
	}
	if c.FlowsLater != c.Flows {
		logf("WARNING: %d agent flows at /readyz, %d three seconds later", c.Flows, c.FlowsLater)
	}
	return nil
}

func (b *bench) agentPhase(ctx context.Context, r *Result, largest bool) error {
	// -cold-runs: the cold start is measured that many times; the figure is the median. The
	// last run is profiled and goes on to the changes.
	var profDone chan struct{}
	var onLast func()
	if *profileDir != "" {
		onLast = func() {
			profDone = make(chan struct{})
			go func() {
				defer close(profDone)
				if _, err := httpOK("http://"+b.metrics+"/healthz", 2*time.Millisecond, time.Minute); err != nil {
					logf("profile: %v", err)
					return
				}
				secs := 3 + len(b.cl.svcs)/2000
				if err := fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.metrics, secs),
					filepath.Join(*profileDir, fmt.Sprintf("cpu-%d.pprof", len(b.cl.svcs)))); err != nil {
					logf("profile: %v", err)
				}
			}()
		}
	}
	var c coldFigures
	if err := b.coldStarts(&c, onLast); err != nil {
		return err
	}
	defer func() {
		_ = b.lab.StopAgent("node1")
		if *profileDir != "" {
			if log, err := os.ReadFile(b.lab.AgentLog("node1")); err == nil {
				_ = os.WriteFile(filepath.Join(*profileDir, fmt.Sprintf("agent-%d.log", len(b.cl.svcs))), log, 0o644)
			}
		}
	}()
	r.AgentReadyS, r.AgentReadyRunsS, r.AgentFlows, r.AgentGroups, r.AgentFlowsLater = c.ReadyS, c.ReadyRunsS, c.Flows, c.Groups, c.FlowsLater
	r.AgentMessages, r.AgentAtReady, r.AgentSettled, r.ColdSteps = c.Messages, c.AtReady, c.Settled, c.Steps
	pid := b.lab.AgentPid("node1")
	if profDone != nil {
		<-profDone
		if err := fetch("http://"+b.metrics+"/debug/pprof/heap?gc=1", filepath.Join(*profileDir, fmt.Sprintf("heap-%d.pprof", len(b.cl.svcs)))); err != nil {
			logf("profile: %v", err)
		}
	}

	n := *smallChanges
	if largest {
		n = *changes
	}
	if n > 0 {
		if err := b.agentChanges(ctx, r, n); err != nil {
			return err
		}
	}
	if largest && *burst > 0 {
		if err := b.agentBurst(ctx, r, *burst); err != nil {
			return err
		}
	}
	if largest && *podStarts > 0 {
		waitQuiet()
		if err := b.podStartPhase(ctx, r, b.tmp); err != nil {
			return fmt.Errorf("pod start: %w", err)
		}
	}
	var err error
	r.AgentAfter, err = procUsage(pid)
	return err
}

// ofMonitor watches br-ex's flow table; it keeps the lines that carry a NodePort match.
func (b *bench) ofMonitor() (<-chan event, func(), error) {
	return monitor([]string{"stdbuf", "-oL", "ovs-ofctl", "-O", "OpenFlow15", "--no-names", "monitor", b.target("br-ex"), "watch:!initial"}, b.env, true,
		func(l string) bool { return strings.Contains(l, "tp_dst=") })
}

var tpDstRE = regexp.MustCompile(`tp_dst=(\d+)`)

func nodePortOf(l string) int32 {
	m := tpDstRE.FindStringSubmatch(l)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return int32(n)
}

func (b *bench) port() int32 {
	b.nextPort++
	if b.nextPort > 65000 {
		b.nextPort = 40001
	}
	return b.nextPort
}

// agentChanges writes n EndpointSlice changes one at a time and measures API write -> flows of
// that Service changed in br-ex (one bundle changes the group and the flows that point to it).
func (b *bench) agentChanges(ctx context.Context, r *Result, n int) error {
	ch, stop, err := b.ofMonitor()
	if err != nil {
		return err
	}
	defer stop()
	time.Sleep(200 * time.Millisecond)
	size := len(b.cl.svcs)
	if *profileDir != "" {
		secs := int((time.Duration(n) * (*spacing + 20*time.Millisecond)).Seconds())
		prof := filepath.Join(*profileDir, fmt.Sprintf("cpu-changes-%d.pprof", size))
		go func() {
			if err := fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.metrics, max(secs, 1)), prof); err != nil {
				logf("profile: %v", err)
			}
		}()
	}
	lat := make([]time.Duration, 0, n)
	writes := make([]time.Duration, 0, n)
	before, err := b.syncSteps("partial")
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		time.Sleep(*spacing)
		idx := (i * 7919) % size
		np := b.cl.svcs[idx].nodePort
		p := b.port()
		drain(ch)
		t0 := time.Now()
		if err := b.cl.setPort(ctx, idx, p); err != nil {
			return err
		}
		writes = append(writes, time.Since(t0))
		timeout := time.After(30 * time.Second)
	wait:
		for {
			select {
			case e := <-ch:
				if nodePortOf(e.line) == np {
					lat = append(lat, e.at.Sub(t0))
					break wait
				}
			case <-timeout:
				return fmt.Errorf("change %d (Service %s, NodePort %d, port %d) never reached br-ex", i, b.cl.svcs[idx].name, np, p)
			}
		}
		if i%100 == 0 {
			// The change itself (not only some flow of the Service) is in OVS: the new port is in
			// the group's buckets.
			out, err := b.ofctl("dump-groups", b.target("br-ex"))
			if err != nil {
				return err
			}
			if !strings.Contains(out, fmt.Sprintf(":%d)", p)) {
				return fmt.Errorf("change %d: flows of NodePort %d changed but port %d is in no group", i, np, p)
			}
		}
	}
	r.Change, r.ChangeWrite = stats(lat), stats(writes)
	logf("srcip-agent: one EndpointSlice change, API write -> flows in OVS over %d changes at %d Services: p50 %.1f ms, p99 %.1f ms, max %.3f s; the API write's round trip alone p50 %.1f ms, p99 %.1f ms",
		n, size, r.Change.P50ms, r.Change.P99ms, r.Change.Maxs, r.ChangeWrite.P50ms, r.ChangeWrite.P99ms)
	if after, err := b.syncSteps("partial"); err != nil {
		logf("agent metrics: %v", err)
	} else {
		r.ChangeSteps = after.means(&before)
		logf("srcip-agent: its partial syncs meanwhile, mean ms by step: %s", formatSteps(r.ChangeSteps))
	}
	return nil
}

// agentBurst writes n changes to n different Services as fast as 16 writers can and measures
// the time from the first write until every one of them changed br-ex.
func (b *bench) agentBurst(ctx context.Context, r *Result, n int) error {
	size := len(b.cl.svcs)
	n = min(n, size)
	ch, stop, err := b.ofMonitor()
	if err != nil {
		return err
	}
	defer stop()
	time.Sleep(time.Second)
	drain(ch)
	pending := map[int32]bool{}
	idxs := make([]int, n)
	ports := make([]int32, n)
	for i := range idxs {
		idxs[i] = (i * size) / n
		pending[b.cl.svcs[idxs[i]].nodePort] = true
		ports[i] = b.port()
	}
	work := make(chan int)
	var wg sync.WaitGroup
	var werr error
	var mu sync.Mutex
	start := time.Now()
	var writesDone time.Time
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := b.cl.setPort(ctx, idxs[i], ports[i]); err != nil {
					mu.Lock()
					werr = err
					mu.Unlock()
				}
			}
		}()
	}
	go func() {
		for i := range idxs {
			work <- i
		}
		close(work)
		wg.Wait()
		mu.Lock()
		writesDone = time.Now()
		mu.Unlock()
	}()
	var last time.Time
	timeout := time.After(5 * time.Minute)
	for len(pending) > 0 {
		select {
		case e := <-ch:
			if np := nodePortOf(e.line); pending[np] {
				delete(pending, np)
				last = e.at
			}
		case <-timeout:
			return fmt.Errorf("burst: %d of %d changes never reached br-ex", len(pending), n)
		}
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if werr != nil {
		return werr
	}
	out, err := b.ofctl("dump-groups", b.target("br-ex"))
	if err != nil {
		return err
	}
	missing := 0
	for _, p := range ports {
		if !strings.Contains(out, fmt.Sprintf(":%d)", p)) {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("burst: %d of %d new ports are in no group", missing, n)
	}
	r.BurstN, r.BurstS, r.BurstWritesS = n, last.Sub(start).Seconds(), writesDone.Sub(start).Seconds()
	logf("srcip-agent: burst of %d changes at %d Services: all in OVS %.2f s after the first write (last write returned at %.2f s)",
		n, size, r.BurstS, r.BurstWritesS)
	return nil
}

// floorPhase (the agent stopped, its flows in OVS): the same flows and groups, dumped, as one
// pre-encoded bundle per bridge, and through ovs-ofctl as OVN-Kubernetes writes its bridges.
func (b *bench) floorPhase(ctx context.Context, r *Result, tmp string) error {
	type dump struct{ groups, flows, allFlows string }
	dumps := map[string]dump{}
	streams := map[string][]byte{}
	for _, br := range bridges {
		var d dump
		var err error
		if d.groups, err = b.ofctl("dump-groups", b.target(br)); err != nil {
			return err
		}
		if d.flows, err = b.ofctl("dump-flows", "--no-stats", b.target(br), ownedCookies); err != nil {
			return err
		}
		if d.allFlows, err = b.ofctl("dump-flows", "--no-stats", b.target(br)); err != nil {
			return err
		}
		dumps[br] = d
		text, _, _ := bundleFromDumps(d.groups, d.flows)
		f := filepath.Join(tmp, br+".bundle")
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			return err
		}
		s, nmsg, err := capture(ctx, tmp, f)
		if err != nil {
			return fmt.Errorf("%s: %w", br, err)
		}
		streams[br] = s
		r.FloorMessages += nmsg
	}
	if err := b.smallBundles(ctx, r, tmp, dumps["br-ex"].groups, dumps["br-ex"].flows); err != nil {
		return err
	}
	// Pre-encoded bundles into empty bridges.
	if err := b.clearAgentFlows(); err != nil {
		return err
	}
	for _, br := range bridges {
		d, err := replay(filepath.Join(b.node.Dir, br+".mgmt"), streams[br])
		if err != nil {
			return fmt.Errorf("replay %s: %w", br, err)
		}
		r.FloorBundleS += d.Seconds()
	}
	if f, g, err := b.counts(); err != nil {
		return err
	} else if f != r.AgentFlowsLater || g != r.AgentGroups {
		return fmt.Errorf("floor: %d flows and %d groups after the pre-encoded bundles, the agent had %d and %d", f, g, r.AgentFlowsLater, r.AgentGroups)
	}
	// ovs-ofctl, whole bridge: groups, then replace-flows, into empty bridges.
	if err := b.clearAgentFlows(); err != nil {
		return err
	}
	var oneChanged []string
	start := time.Now()
	for _, br := range bridges {
		d := dumps[br]
		gtext, _, _ := bundleFromDumps(d.groups, "")
		gf, ff := filepath.Join(tmp, br+".groups"), filepath.Join(tmp, br+".flows")
		if err := os.WriteFile(gf, []byte(strings.ReplaceAll(gtext, "group add ", "")), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(ff, []byte(d.allFlows), 0o644); err != nil {
			return err
		}
		if _, err := b.ofctl("--bundle", "add-groups", b.target(br), gf); err != nil {
			return err
		}
		if _, err := b.ofctl("--bundle", "replace-flows", b.target(br), ff); err != nil {
			return err
		}
		// The same file with its last flow left out: one flow differs from the bridge.
		lines := strings.Split(strings.TrimRight(d.allFlows, "\n"), "\n")
		one := filepath.Join(tmp, br+".flows-1")
		if err := os.WriteFile(one, []byte(strings.Join(lines[:len(lines)-1], "\n")+"\n"), 0o644); err != nil {
			return err
		}
		oneChanged = append(oneChanged, one)
	}
	r.OfctlReplaceColdS = time.Since(start).Seconds()
	start = time.Now()
	for i, br := range bridges {
		if _, err := b.ofctl("--bundle", "replace-flows", b.target(br), oneChanged[i]); err != nil {
			return err
		}
	}
	r.OfctlReplaceOneS = time.Since(start).Seconds()
	logf("floor: pre-encoded bundles %.2f s (%d messages); ovs-ofctl add-groups + replace-flows %.2f s; replace-flows with one flow changed %.2f s",
		r.FloorBundleS, r.FloorMessages, r.OfctlReplaceColdS, r.OfctlReplaceOneS)
	return b.clearAgentFlows()
}

// kubeProxyPhase runs kube-proxy in nftables mode in its namespace against the same API server.
func (b *bench) kubeProxyPhase(ctx context.Context, r *Result, nChanges int, tmp string) error {
	nsEnv := os.Environ()
	nft := func(args ...string) (string, error) {
		return run(nsEnv, append([]string{"ip", "netns", "exec", b.kpNS, "nft"}, args...)...)
	}
	_, _ = nft("flush", "ruleset")
	logPath := filepath.Join(tmp, "kube-proxy.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer lf.Close()
	metricsAddr := b.kpIP + ":10249"
	cmd := exec.Command("ip", "netns", "exec", b.kpNS, *kubeProxyBin,
		"--kubeconfig="+b.cp.Kubeconfig, "--proxy-mode=nftables", "--hostname-override=node1",
		"--cluster-cidr=10.244.0.0/16", "--metrics-bind-address="+metricsAddr,
		"--healthz-bind-address="+b.kpIP+":10256", "--conntrack-max-per-core=0", "--v=0")
	cmd.Stdout, cmd.Stderr = lf, lf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_, _ = nft("flush", "ruleset")
	}
	defer stop()
	// The first sync of all rules: kube-proxy syncs only once its Service and EndpointSlice
	// informers have synced; the metric counts completed syncs.
	syncedAt, metricDur, err := waitKubeProxySync(ctx, metricsAddr, 10*time.Minute)
	if err != nil {
		out, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w\n%s", err, tailLines(string(out), 20))
	}
	r.KubeProxySyncS = syncedAt.Sub(start).Seconds()
	r.KubeProxySyncMetS = metricDur
	if r.KubeProxyAtSync, err = procUsage(cmd.Process.Pid); err != nil {
		return err
	}
	out, err := nft("list", "chains", "ip")
	if err != nil {
		return err
	}
	r.KubeProxyRules = strings.Count(out, "chain service-")
	logf("kube-proxy (nftables): initial sync %.2f s (its own sync metric %.2f s), %d service chains, RSS %.0f MB, CPU %.2f s",
		r.KubeProxySyncS, metricDur, r.KubeProxyRules, r.KubeProxyAtSync.RSSMB, r.KubeProxyAtSync.CPUSeconds)

	// One change at a time. The end is kube-proxy's own kubeproxy_sync_proxy_rules_last_timestamp_seconds
	// (set when a sync has written its rules), polled over HTTP: looking into nftables is no
	// option at 10k Services (`nft list chain` takes ~5 s of kernel time, and `nft monitor` loses
	// events when kube-proxy's transactions overflow its netlink socket). Changes are spaced
	// beyond kube-proxy's 1 s minimum sync period; every 20th change is checked in the Service's
	// chain (untimed), which holds the endpoints in its dnat map ("... map { 0 : IP . PORT, ... }").
	chains := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if name, ok := strings.CutPrefix(l, "chain service-"); ok {
			name = strings.TrimSuffix(name, " {")
			if _, rest, ok := strings.Cut(name, "-"+perfNS+"/"); ok {
				svc, _, _ := strings.Cut(rest, "/")
				chains[svc] = "service-" + name
			}
		}
	}
	size := len(b.cl.svcs)
	lat := make([]time.Duration, 0, nChanges)
	hc := &http.Client{Timeout: 2 * time.Second}
	for i := 0; i < nChanges; i++ {
		time.Sleep(*kpSpacing)
		idx := (i*7919 + 13) % size
		p := b.port()
		t0 := time.Now()
		if err := b.cl.setPort(ctx, idx, p); err != nil {
			return err
		}
		for {
			ts, err := kubeProxyLastSync(hc, metricsAddr)
			if err == nil && ts.After(t0) {
				lat = append(lat, ts.Sub(t0))
				break
			}
			if time.Since(t0) > time.Minute {
				lg, _ := os.ReadFile(logPath)
				return fmt.Errorf("kube-proxy change %d (port %d): no sync after a minute (%v)\n%s", i, p, err, tailLines(string(lg), 15))
			}
			time.Sleep(2 * time.Millisecond)
		}
		if i%20 == 0 {
			chain := chains[b.cl.svcs[idx].name]
			rs, err := nft("list", "chain", "ip", "kube-proxy", chain)
			if err != nil || !strings.Contains(rs, fmt.Sprintf(" . %d", p)) {
				return fmt.Errorf("kube-proxy change %d: synced, but port %d is not in chain %q (%v)", i, p, chain, err)
			}
		}
	}
	r.KubeProxyChange = stats(lat)
	logf("kube-proxy (nftables): one EndpointSlice change, API write -> rule over %d changes at %d Services: p50 %.1f ms, p99 %.1f ms",
		nChanges, size, r.KubeProxyChange.P50ms, r.KubeProxyChange.P99ms)
	return nil
}

var (
	syncCountRE = regexp.MustCompile(`(?m)^kubeproxy_sync_proxy_rules_duration_seconds_count(?:\{[^}]*\})? (\S+)`)
	syncSumRE   = regexp.MustCompile(`(?m)^kubeproxy_sync_proxy_rules_duration_seconds_sum(?:\{[^}]*\})? (\S+)`)
)

var lastSyncRE = regexp.MustCompile(`(?m)^kubeproxy_sync_proxy_rules_last_timestamp_seconds(?:\{[^}]*\})? (\S+)`)

// kubeProxyLastSync reads the time kube-proxy last finished writing its rules.
func kubeProxyLastSync(c *http.Client, addr string) (time.Time, error) {
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return time.Time{}, err
	}
	m := lastSyncRE.FindSubmatch(body)
	if m == nil {
		return time.Time{}, fmt.Errorf("no kubeproxy_sync_proxy_rules_last_timestamp_seconds")
	}
	f, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, int64(f*1e9)), nil
}

func waitKubeProxySync(ctx context.Context, addr string, timeout time.Duration) (time.Time, float64, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return time.Time{}, 0, fmt.Errorf("interrupted while waiting for kube-proxy's first sync: %w", err)
		}
		out, err := run(nil, "curl", "-s", "-m", "2", "http://"+addr+"/metrics")
		if err == nil {
			if m := syncCountRE.FindStringSubmatch(out); m != nil && m[1] != "0" {
				at := time.Now()
				var sum float64
				if s := syncSumRE.FindStringSubmatch(out); s != nil {
					sum, _ = strconv.ParseFloat(s[1], 64)
				}
				return at, sum, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Time{}, 0, fmt.Errorf("kube-proxy did not sync within %v", timeout)
}

func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func printTable(rs []*Result) {
	w := os.Stdout
	fmt.Fprintf(w, "\nsrcip-agent vs the OVS floor vs kube-proxy (nftables); one emulated node, live API server\n")
	fmt.Fprintf(w, "(shared 2-core machine: compare ratios within this run, not with other machines)\n\n")
	row := tableRow(w, rs)
	row("Services x endpoints (nodes)", func(r *Result) string { return fmt.Sprintf("%dx%d (%d)", r.Services, r.Endpoints, r.Nodes) })
	coldRows(row)
	if slices.ContainsFunc(rs, func(r *Result) bool { return r.DualStack != nil }) {
		dualStackRows(row)
	}
	row("floor: pre-encoded bundles (s)", func(r *Result) string { return f2(r.FloorBundleS) })
	row("floor: ovs-ofctl add-groups + replace-flows (s)", func(r *Result) string { return f2(r.OfctlReplaceColdS) })
	row("ovs-ofctl replace-flows, one flow changed (s)", func(r *Result) string { return f2(r.OfctlReplaceOneS) })
	row("one Service bundle: ovs-ofctl process p50/p99 (ms)", func(r *Result) string {
		return fmt.Sprintf("%.2f/%.2f", r.SmallBundleOfctl.P50ms, r.SmallBundleOfctl.P99ms)
	})
	row("one Service bundle: persistent conn. p50/p99 (ms)", func(r *Result) string {
		return fmt.Sprintf("%.2f/%.2f", r.SmallBundlePersistent.P50ms, r.SmallBundlePersistent.P99ms)
	})
	row("ratio agent / pre-encoded floor", func(r *Result) string { return ratio(r.AgentReadyS, r.FloorBundleS) })
	row("ratio agent / ovs-ofctl replace-flows", func(r *Result) string { return ratio(r.AgentReadyS, r.OfctlReplaceColdS) })
	row("agent: one change, API write -> OVS p50/p99 (ms)", func(r *Result) string {
		return fmt.Sprintf("%.1f/%.1f", r.Change.P50ms, r.Change.P99ms)
	})
	row("agent: changes measured", func(r *Result) string { return strconv.Itoa(r.Change.N) })
	row("agent: burst, all in OVS (s) [changes]", func(r *Result) string {
		if r.BurstN == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f [%d]", r.BurstS, r.BurstN)
	})
	podStartRows(row)
	if rs[0].KubeProxySyncS > 0 {
		row("kube-proxy nftables: initial sync (s)", func(r *Result) string { return f2(r.KubeProxySyncS) })
		row("kube-proxy: service chains", func(r *Result) string { return strconv.Itoa(r.KubeProxyRules) })
		row("kube-proxy: RSS (MB) / CPU s at first sync", func(r *Result) string {
			return fmt.Sprintf("%.0f/%.1f", r.KubeProxyAtSync.RSSMB, r.KubeProxyAtSync.CPUSeconds)
		})
		row("kube-proxy: one change, API write -> rule p50/p99 (ms)", func(r *Result) string {
			return fmt.Sprintf("%.0f/%.0f", r.KubeProxyChange.P50ms, r.KubeProxyChange.P99ms)
		})
		row("kube-proxy: changes measured", func(r *Result) string { return strconv.Itoa(r.KubeProxyChange.N) })
		row("ratio kube-proxy / agent, initial sync", func(r *Result) string { return ratio(r.KubeProxySyncS, r.AgentReadyS) })
		row("ratio kube-proxy / agent, change p50", func(r *Result) string { return ratio(r.KubeProxyChange.P50ms, r.Change.P50ms) })
		row("ratio kube-proxy / agent, change p99", func(r *Result) string { return ratio(r.KubeProxyChange.P99ms, r.Change.P99ms) })
		row("ratio kube-proxy / agent, RSS", func(r *Result) string { return ratio(r.KubeProxyAtSync.RSSMB, r.AgentAtReady.RSSMB) })
	}
}

// tableRow returns the row printer of a table with one column per Result.
func tableRow(w io.Writer, rs []*Result) func(string, func(*Result) string) {
	return func(name string, f func(r *Result) string) {
		fmt.Fprintf(w, "%-58s", name)
		for _, r := range rs {
			fmt.Fprintf(w, " %16s", f(r))
		}
		fmt.Fprintln(w)
	}
}

// coldRows are the agent's cold-start rows (IPv4).
func coldRows(row func(string, func(*Result) string)) {
	row("agent: cold start -> all flows in OVS (s)", func(r *Result) string { return f2(r.AgentReadyS) })
	row("agent: flows / groups in OVS", func(r *Result) string { return fmt.Sprintf("%d/%d", r.AgentFlows, r.AgentGroups) })
	row("agent: messages of the first sync", func(r *Result) string { return fmt.Sprintf("%.0f", r.AgentMessages) })
	row("agent: RSS at sync / 3 s later / after changes (MB)", func(r *Result) string {
		return fmt.Sprintf("%.0f/%.0f/%.0f", r.AgentAtReady.RSSMB, r.AgentSettled.RSSMB, r.AgentAfter.RSSMB)
	})
	row("agent: peak RSS (MB)", func(r *Result) string {
		return fmt.Sprintf("%.0f", max(r.AgentAtReady.PeakRSSMB, r.AgentAfter.PeakRSSMB))
	})
	row("agent: CPU seconds to first sync", func(r *Result) string { return f2(r.AgentAtReady.CPUSeconds) })
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// smallBundles measures what one Service change costs the switch connection: the Service's group
// (add_or_mod) and flows as one bundle, 200 times through `ovs-ofctl bundle` (one process each, as
// ofctl.OpenFlow.Bundle runs it) and 200 times pre-encoded over one persistent connection.
func (b *bench) smallBundles(ctx context.Context, r *Result, tmp, groups, flows string) error {
	var gline string
	for _, l := range strings.Split(groups, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "group_id=") && strings.Contains(l, "type=select") {
			gline = l
			break
		}
	}
	if gline == "" {
		return fmt.Errorf("no select group on br-ex")
	}
	id := strings.TrimPrefix(strings.SplitN(gline, ",", 2)[0], "group_id=")
	text := "group add_or_mod " + gline + "\n"
	for _, l := range strings.Split(flows, "\n") {
		if strings.Contains(l, "group:"+id) {
			text += "flow add " + strings.TrimSpace(l) + "\n"
		}
	}
	f := filepath.Join(tmp, "small.bundle")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		return err
	}
	const n = 200
	var ofctl []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := b.ofctl("bundle", b.target("br-ex"), f); err != nil {
			return err
		}
		ofctl = append(ofctl, time.Since(start))
	}
	stream, _, err := capture(ctx, tmp, f)
	if err != nil {
		return err
	}
	persistent, err := replayMany(filepath.Join(b.node.Dir, "br-ex.mgmt"), stream, n)
	if err != nil {
		return err
	}
	r.SmallBundleOfctl, r.SmallBundlePersistent = stats(ofctl), stats(persistent)
	logf("one Service's bundle (%d lines): ovs-ofctl process p50 %.2f ms p99 %.2f ms; pre-encoded over a persistent connection p50 %.2f ms p99 %.2f ms",
		strings.Count(text, "\n"), r.SmallBundleOfctl.P50ms, r.SmallBundleOfctl.P99ms, r.SmallBundlePersistent.P50ms, r.SmallBundlePersistent.P99ms)
	return nil
}

// stepTotals are the agent's srcip_agent_sync_step_duration_seconds sums and counts of one
// kind of sync, by step, plus "sync" (srcip_agent_sync_duration_seconds).
type stepTotals struct{ sum, count map[string]float64 }

var stepLineRE = regexp.MustCompile(`^srcip_agent_sync(?:_step)?_duration_seconds_(sum|count)\{kind="(\w+)"(?:,step="(\w+)")?\} (\S+)$`)

// syncSteps reads the agent's sync step totals of kind (full, partial) from its /metrics.
func (b *bench) syncSteps(kind string) (stepTotals, error) {
	t := stepTotals{sum: map[string]float64{}, count: map[string]float64{}}
	resp, err := http.Get("http://" + b.metrics + "/metrics")
	if err != nil {
		return t, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return t, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		// The watch event -> flows time of the agent (no kind label): with the partial syncs.
		if kind == "partial" {
			if v, ok := strings.CutPrefix(l, "srcip_agent_change_to_flows_seconds_sum "); ok {
				t.sum["event"], _ = strconv.ParseFloat(v, 64)
			} else if v, ok := strings.CutPrefix(l, "srcip_agent_change_to_flows_seconds_count "); ok {
				t.count["event"], _ = strconv.ParseFloat(v, 64)
			}
		}
		m := stepLineRE.FindStringSubmatch(l)
		if m == nil || m[2] != kind {
			continue
		}
		step := m[3]
		if step == "" {
			step = "sync"
		}
		v, _ := strconv.ParseFloat(m[4], 64)
		if m[1] == "sum" {
			t.sum[step] = v
		} else {
			t.count[step] = v
		}
	}
	return t, nil
}

// metricSum is the sum over its label sets of the agent's metric name (a gauge or counter).
func (b *bench) metricSum(name string) (float64, error) {
	resp, err := http.Get("http://" + b.metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var sum float64
	found := false
	for _, l := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %v", name, l, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("no %s in the agent's metrics", name)
	}
	return sum, nil
}

// means returns each step's mean in ms since before (nil: since the start).
func (t stepTotals) means(before *stepTotals) map[string]float64 {
	out := map[string]float64{}
	for step, n := range t.count {
		sum := t.sum[step]
		if before != nil {
			n -= before.count[step]
			sum -= before.sum[step]
		}
		if n > 0 {
			out[step] = sum / n * 1000
		}
	}
	return out
}

// formatSteps prints step means in the order of a sync.
func formatSteps(m map[string]float64) string {
	var parts []string
	for _, step := range []string{"event", "sync", "model", "build", "resolve", "inventory", "drain", "plan", "apply", "zones"} {
		if v, ok := m[step]; ok {
			name := step
			if step == "event" {
				name = "watch event -> flows"
			}
			parts = append(parts, fmt.Sprintf("%s %.2f", name, v))
		}
	}
	return strings.Join(parts, ", ")
}
