package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

var (
	podStarts = flag.Int("pods", 50, "pods started at once on node1 by CNI ADD at the largest size (0: no pod-start phase)")
	cniBin    = flag.String("cni", "bin/srcip-cni", "srcip-cni binary; its directory also holds host-local (CNI_PATH)")
)

// PodStartResult is the pod-start phase: -pods pods created at once on one node by CNI ADD with
// the agent running at the size's Services.
type PodStartResult struct {
	Pods int
	// Add is the CNI ADD call -> return of each pod (the plugin's process, run in the node's
	// network namespace with `ip netns exec` as the runtime would run it in the host's).
	Add latencyStats
	// Wait is, per pod, the time from its port's ofport in OVSDB (AttachPort returns) to the
	// agent's acknowledgement (external_ids:srcip-agent-flows): what ADD spends waiting for its
	// flows; WaitShare is its sum over the sum of the ADD times.
	Wait      latencyStats
	WaitShare float64
	// Del is the CNI DEL of each pod, all at once too.
	Del latencyStats
	// FullSyncs and PartialSyncs are the agent's syncs from the first ADD to the last return.
	FullSyncs, PartialSyncs int
	// CPU is where the CPU went from the first ADD to the last return (seconds, user+system):
	// ADDs is the sum over the ADD processes (srcip-cni with the IPAM plugin it ran, from each
	// process's rusage; ADDsSys the system part of it); the others are the node's daemons' /proc
	// counters.
	CPU struct{ ADDs, ADDsSys, Ovsdb, Vswitchd, Agent, WallS float64 }
}

// podStartPhase creates -pods Pod objects on node1, waits until the agent has them, then runs
// srcip-cni ADD for all of them at once (one network namespace each) and measures each call,
// and the part of it spent waiting for the agent (seen in OVSDB: ofport -> acknowledgement).
// It removes the pods (CNI DEL, also measured), their namespaces and objects at the end.
func (b *bench) podStartPhase(ctx context.Context, r *Result, tmp string) error {
	n := *podStarts
	cni, err := filepath.Abs(*cniBin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(cni), "host-local")); err != nil {
		return fmt.Errorf("-cni: host-local beside %s: %w (make build)", cni, err)
	}
	ipamDir := filepath.Join(tmp, "podstart-ipam")
	if err := os.MkdirAll(ipamDir, 0o755); err != nil {
		return err
	}
	type podRun struct {
		name, uid, netns, cid string
		start, end            time.Time
		cpu, sys              time.Duration
		attached, acked       time.Time
		err                   error
		out                   string
	}
	pods := make([]*podRun, n)
	defer func() {
		for _, p := range pods {
			if p == nil {
				continue
			}
			if p.netns != "" {
				_ = exec.Command("ip", "netns", "del", p.netns).Run()
			}
			_ = b.cl.c.CoreV1().Pods(perfNS).Delete(context.WithoutCancel(ctx), p.name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
	}()
	for i := range pods {
		name := fmt.Sprintf("start-%02d", i)
		pod, err := b.cl.c.CoreV1().Pods(perfNS).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: perfNS},
			Spec:       corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "none"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create pod %s: %w", name, err)
		}
		p := &podRun{name: name, uid: string(pod.UID), cid: fmt.Sprintf("%032x", i+1), netns: b.lab.Prefix + "-ps" + fmt.Sprint(i)}
		pods[i] = p
		if out, err := exec.Command("ip", "netns", "add", p.netns).CombinedOutput(); err != nil {
			p.netns = ""
			return fmt.Errorf("ip netns add: %v: %s", err, out)
		}
		_ = exec.Command("ip", "netns", "exec", p.netns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1").Run()
	}
	// The agent has the Pod objects once its informer delivered them; a port without its Pod
	// object is not programmed (that wait is the API's, not the CNI's).
	time.Sleep(2 * time.Second)
	waitQuiet()

	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.1.0", "name": "ovs-srcip", "type": "srcip-cni",
		"bridge": "br-int", "ovsdb": "unix:" + b.node.DBSock(), "ovsRunDir": b.node.Dir, "mtu": 1450, "flowWait": "20s",
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": "10.244.1.0/24", "rangeStart": "10.244.1.180", "rangeEnd": "10.244.1.250", "gateway": "10.244.1.1"}}},
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"dataDir": ipamDir,
		},
	})
	if err != nil {
		return err
	}
	runCPU := func(command string, p *podRun) (time.Time, time.Time, string, [2]time.Duration, error) {
		cmd := exec.Command("ip", "netns", "exec", b.node.Netns, cni)
		cmd.Env = append(os.Environ(),
			"CNI_COMMAND="+command, "CNI_CONTAINERID="+p.cid, "CNI_IFNAME=eth0", "CNI_NETNS=/var/run/netns/"+p.netns,
			"CNI_PATH="+filepath.Dir(cni),
			fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=%s;K8S_POD_UID=%s", perfNS, p.name, p.cid, p.uid))
		cmd.Stdin = bytes.NewReader(conf)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		end := time.Now()
		var cpu [2]time.Duration // user+system, system
		if ps := cmd.ProcessState; ps != nil {
			// The process and the children it waited for.
			cpu = [2]time.Duration{ps.UserTime() + ps.SystemTime(), ps.SystemTime()}
		}
		return start, end, out.String(), cpu, err
	}
	run := func(command string, p *podRun) (time.Time, time.Time, string, error) {
		start, end, out, _, err := runCPU(command, p)
		return start, end, out, err
	}

	// The watcher: the ofport and the acknowledgement of each pod's port, as OVSDB shows them.
	db, err := ofctl.Connect(ctx, "unix:"+b.node.DBSock())
	if err != nil {
		return err
	}
	defer db.Close()
	byCID := map[string]*podRun{}
	for _, p := range pods {
		byCID[p.cid] = p
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		left := n
		for left > 0 {
			wake := db.Wakeup()
			ports, _ := db.ContainerPorts(wctx, "br-int")
			now := time.Now()
			for _, cp := range ports {
				p := byCID[cp.ContainerID]
				if p == nil {
					continue
				}
				if p.attached.IsZero() && cp.OFPort > 0 {
					p.attached = now
				}
				if p.acked.IsZero() && cp.ExternalIDs[ofctl.ExtIDAgentFlows] != "" {
					p.acked = now
					left--
				}
			}
			select {
			case <-wctx.Done():
				return
			case <-wake:
			}
		}
	}()

	before := map[string]stepTotals{}
	for _, k := range []string{"full", "partial"} {
		if before[k], err = b.syncSteps(k); err != nil {
			return err
		}
	}
	daemons := func() (cpu [3]float64) {
		for i, pid := range []int{b.node.OvsdbPid, b.node.VswitchdPid, b.lab.AgentPid("node1")} {
			if u, err := procUsage(pid); err == nil {
				cpu[i] = u.CPUSeconds
			}
		}
		return cpu
	}
	cpu0 := daemons()
	burst := time.Now()
	logf("pod start: %d CNI ADDs at once on node1 (%d Services)", n, len(b.cl.svcs))
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			var cpu [2]time.Duration
			p.start, p.end, p.out, cpu, p.err = runCPU("ADD", p)
			p.cpu, p.sys = cpu[0], cpu[1]
		}()
	}
	close(gate)
	wg.Wait()
	cpu1, burstWall := daemons(), time.Since(burst)
	select {
	case <-watched:
	case <-time.After(2 * time.Second):
	}
	stopWatch()
	<-watched

	ps := &PodStartResult{Pods: n}
	r.PodStart = ps
	ps.CPU.Ovsdb, ps.CPU.Vswitchd, ps.CPU.Agent = cpu1[0]-cpu0[0], cpu1[1]-cpu0[1], cpu1[2]-cpu0[2]
	ps.CPU.WallS = burstWall.Seconds()
	for _, p := range pods {
		ps.CPU.ADDs += p.cpu.Seconds()
		ps.CPU.ADDsSys += p.sys.Seconds()
	}
	for _, k := range []string{"full", "partial"} {
		after, err := b.syncSteps(k)
		if err != nil {
			return err
		}
		d := int(after.count["sync"] - before[k].count["sync"])
		if k == "full" {
			ps.FullSyncs = d
		} else {
			ps.PartialSyncs = d
		}
		if d > 0 {
			prev := before[k]
			logf("pod start: %d %s syncs, mean per sync: %s", d, k, formatSteps(after.means(&prev)))
		}
	}
	var adds, waits []time.Duration
	var addSum, waitSum time.Duration
	var failed []string
	for _, p := range pods {
		if p.err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v: %s", p.name, p.err, strings.TrimSpace(p.out)))
			continue
		}
		d := p.end.Sub(p.start)
		adds = append(adds, d)
		addSum += d
		if !p.attached.IsZero() && !p.acked.IsZero() {
			w := max(p.acked.Sub(p.attached), 0)
			waits = append(waits, w)
			waitSum += w
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d ADDs failed; first: %s", len(failed), n, failed[0])
	}
	ps.Add, ps.Wait = stats(adds), stats(waits)
	if addSum > 0 {
		ps.WaitShare = float64(waitSum) / float64(addSum)
	}
	logf("pod start: CPU from the first ADD to the last return (%.2f s wall): ADD processes %.2f s (%.1f ms each, %.0f%% system), ovsdb-server %.2f s, ovs-vswitchd %.2f s, agent %.2f s",
		ps.CPU.WallS, ps.CPU.ADDs, 1000*ps.CPU.ADDs/float64(n), 100*ps.CPU.ADDsSys/max(ps.CPU.ADDs, 1e-9), ps.CPU.Ovsdb, ps.CPU.Vswitchd, ps.CPU.Agent)
	logf("pod start: ADD -> return p50 %.1f ms, p99 %.1f ms; waiting for flows p50 %.1f ms, p99 %.1f ms (%.0f%% of the ADD time); agent syncs meanwhile: %d full, %d partial",
		ps.Add.P50ms, ps.Add.P99ms, ps.Wait.P50ms, ps.Wait.P99ms, 100*ps.WaitShare, ps.FullSyncs, ps.PartialSyncs)

	var dels []time.Duration
	var mu sync.Mutex
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start, end, out, err := run("DEL", p)
			if err != nil {
				logf("pod start: DEL %s: %v: %s", p.name, err, strings.TrimSpace(out))
				return
			}
			mu.Lock()
			dels = append(dels, end.Sub(start))
			mu.Unlock()
		}()
	}
	wg.Wait()
	ps.Del = stats(dels)
	logf("pod start: DEL p50 %.1f ms, p99 %.1f ms", ps.Del.P50ms, ps.Del.P99ms)
	return nil
}

// podStartRows adds the pod-start phase's rows to a table ("-" at the sizes without it).
func podStartRows(row func(string, func(*Result) string)) {
	cell := func(f func(p *PodStartResult) string) func(*Result) string {
		return func(r *Result) string {
			if r.PodStart == nil {
				return "-"
			}
			return f(r.PodStart)
		}
	}
	row("agent: pod start, CNI ADD -> return p50/p99 (ms) [pods]", cell(func(p *PodStartResult) string {
		return fmt.Sprintf("%.0f/%.0f [%d]", p.Add.P50ms, p.Add.P99ms, p.Pods)
	}))
	row("agent: pod start, waiting for flows p50/p99 (ms), share", cell(func(p *PodStartResult) string {
		return fmt.Sprintf("%.0f/%.0f %.0f%%", p.Wait.P50ms, p.Wait.P99ms, 100*p.WaitShare)
	}))
	row("agent: pod start, syncs full/partial; DEL p50/p99 (ms)", cell(func(p *PodStartResult) string {
		return fmt.Sprintf("%d/%d; %.0f/%.0f", p.FullSyncs, p.PartialSyncs, p.Del.P50ms, p.Del.P99ms)
	}))
	row("agent: pod start, CPU s: ADDs/ovsdb/vswitchd/agent (wall)", cell(func(p *PodStartResult) string {
		return fmt.Sprintf("%.2f/%.2f/%.2f/%.2f (%.2f)", p.CPU.ADDs, p.CPU.Ovsdb, p.CPU.Vswitchd, p.CPU.Agent, p.CPU.WallS)
	}))
	row("agent: pod start, CPU per ADD ms (system part)", cell(func(p *PodStartResult) string {
		return fmt.Sprintf("%.1f (%.1f)", 1000*p.CPU.ADDs/float64(p.Pods), 1000*p.CPU.ADDsSys/float64(p.Pods))
	}))
}

// printPodStart prints the pod-start phase alone (-only=podstart).
func printPodStart(r *Result) {
	fmt.Printf("\nsrcip-agent: pod start at %d Services x %d endpoints; one emulated node, live API server\n\n", r.Services, r.Endpoints)
	row := func(name string, f func(*Result) string) { fmt.Printf("%-58s %16s\n", name, f(r)) }
	row("agent: cold start -> all flows in OVS (s)", func(r *Result) string { return f2(r.AgentReadyS) })
	podStartRows(row)
}
