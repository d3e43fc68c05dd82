package main

// The data-path phase (issue 10 step 4): one lab of two nodes, dpnode1 (the ingress node) and
// dpnode2 (two backend pods running `perf dp-sink`), an external client, srcip-agent on both
// nodes and kube-proxy (nftables mode) on dpnode1, all watching the same API server. Two
// NodePort Services select the same two pods:
//
//	dp-preserve  opted in (ovs-srcip.io/preserve-source-ip), externalTrafficPolicy Cluster:
//	             served in OVS by the agents - DNAT in br-ex of dpnode1, Geneve to dpnode2 with
//	             the client's address as source, replies tunnelled back to dpnode1;
//	dp-snat      not annotated, served by kube-proxy on dpnode1's host: DNAT and masquerade in
//	             the host's netfilter (the packet leaves br-ex for the host stack), then through
//	             srcip-gw0 into br-int and over Geneve to dpnode2; the backend sees dpnode1's
//	             gateway address, replies come back over Geneve to the host, which un-NATs them.
//
// From the client's namespace `perf dp-load` measures, path after path and the order flipped in
// every other round: short connections per second (with connect+response latency), a bulk
// download (pod to client) and a bulk upload. Every answer carries the source address the sink
// saw; the phase fails unless the preserved path saw only the client's and the SNAT path only
// dpnode1's gateway address.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

var (
	dpEnabled  = flag.Bool("datapath", true, "run the data-path phase (preserved-source vs SNAT through one ingress node)")
	dpDuration = flag.Duration("dp-duration", 10*time.Second, "data path: measured window of each measurement")
	dpWarmup   = flag.Duration("dp-warmup", time.Second, "data path: load before each window, not counted")
	dpWorkers  = flag.Int("dp-workers", 16, "data path: concurrent short connections in the cps measurement")
	dpStreams  = flag.Int("dp-streams", 1, "data path: TCP streams of the bulk measurements")
	dpRounds   = flag.Int("dp-rounds", 2, "data path: rounds (each measures both paths; the order flips every round, so two cancel the order)")
	dpClientCl = flag.Bool("dp-client-closes", true, "data path: in the cps measurement the client closes first (its namespace gets net.ipv4.tcp_tw_reuse=1); false: the sink does, and the pods' TIME_WAIT sockets meet reused client ports")
	dpMeasure  = flag.String("dp-measure", "cps,down,up", "data path: measurements to run (cps, down, up)")
	dpPorts    = flag.String("dp-client-ports", "1024 65535", "data path: the client's net.ipv4.ip_local_port_range (a small range makes the cps measurement reuse ports)")
)

const (
	dpNS           = "dp"
	dpPreserve     = "dp-preserve"
	dpSNAT         = "dp-snat"
	dpPreservePort = 30080
	dpSNATPort     = 30081
)

// DatapathResult is the data-path phase's figures.
type DatapathResult struct {
	DurationS        float64 // window of each measurement
	Workers, Streams int
	Rounds           int
	Preserved, SNAT  dpPath
	// Preserved / SNAT; the goal is >= 0.95 for each.
	RatioCPS, RatioDown, RatioUp float64
	// Latency p50 and p99 of the short connections, preserved / SNAT (lower is better).
	RatioP50, RatioP99 float64
	// RoundRatios: preserved / SNAT of each round, by measurement (cps, down, up): how much the
	// shared machine moved the figures between rounds.
	RoundRatios map[string][]float64
}

type dpPath struct {
	Service   string
	Addr      string // what the client dialled
	Backend   []string
	SawSource []string // every source address the sinks reported
	Conns     int
	Errors    int
	// ErrorKinds counts the failed connections by step and error.
	ErrorKinds map[string]int `json:",omitempty"`
	CPS        float64
	P50ms      float64
	P99ms      float64
	DownMbps   float64
	UpMbps     float64
	cpsS       float64
	downB      int64
	downS      float64
	upB        int64
	upS        float64
	seen       map[string]int
	perRound   map[string][]float64 // by measurement
}

const dpNodesYAML = `apiVersion: v1
kind: Node
metadata:
  name: dpnode1
  labels: {kubernetes.io/hostname: dpnode1, kubernetes.io/os: linux}
spec: {podCIDR: 10.244.1.0/24, podCIDRs: [10.244.1.0/24]}
status:
  addresses: [{type: InternalIP, address: 192.0.2.11}, {type: Hostname, address: dpnode1}]
  conditions: [{type: Ready, status: "True", reason: KubeletReady}]
---
apiVersion: v1
kind: Node
metadata:
  name: dpnode2
  labels: {kubernetes.io/hostname: dpnode2, kubernetes.io/os: linux}
spec: {podCIDR: 10.244.2.0/24, podCIDRs: [10.244.2.0/24]}
status:
  addresses: [{type: InternalIP, address: 192.0.2.12}, {type: Hostname, address: dpnode2}]
  conditions: [{type: Ready, status: "True", reason: KubeletReady}]
`

const dpPodYAML = `---
apiVersion: v1
kind: Pod
metadata:
  name: @NAME@
  namespace: dp
  labels: {app: dp-sink}
spec:
  nodeName: dpnode2
  containers:
  - name: sink
    image: ovs-srcip/perf:lab
    ports: [{name: tcp, containerPort: 8080, protocol: TCP}]
status:
  phase: Running
  hostIP: 192.0.2.12
  hostIPs: [{ip: 192.0.2.12}]
  podIP: @IP@
  podIPs: [{ip: @IP@}]
  conditions:
  - {type: Initialized, status: "True"}
  - {type: ContainersReady, status: "True"}
  - {type: Ready, status: "True"}
`

var dpPods = [][2]string{{"dp-sink-a", "10.244.2.5"}, {"dp-sink-b", "10.244.2.6"}}

// datapathPhase builds the data-path lab, measures both paths and tears everything down again
// (lab, kube-proxy, the API objects), so that the rest of the benchmark starts from the API
// server as it found it.
func (b *bench) datapathPhase(ctx context.Context, c kubernetes.Interface, agent, tmp string, rb []byte) (_ *DatapathResult, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(tmp, "dp-manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pods := ""
	for _, p := range dpPods {
		pods += strings.NewReplacer("@NAME@", p[0], "@IP@", p[1]).Replace(dpPodYAML)
	}
	if err := os.WriteFile(filepath.Join(dir, "nodes.yaml"), []byte(dpNodesYAML), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "pods.yaml"), []byte(pods), 0o644); err != nil {
		return nil, err
	}
	mf, err := lab.LoadManifests(dir)
	if err != nil {
		return nil, err
	}

	// The API objects, as a kubelet would have written them.
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dpNS}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	defer func() {
		cleanupDatapathObjects(c, mf)
	}()
	for i := range mf.Nodes {
		n := mf.Nodes[i].DeepCopy()
		st := n.Status
		created, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", n.Name, err)
		}
		created.Status = st
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("node %s status: %w", n.Name, err)
		}
	}
	for i := range mf.Pods {
		p := mf.Pods[i].DeepCopy()
		st := p.Status
		created, err := c.CoreV1().Pods(dpNS).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		created.Status = st
		if _, err := c.CoreV1().Pods(dpNS).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return nil, fmt.Errorf("pod %s status: %w", p.Name, err)
		}
	}
	for _, s := range []struct {
		name     string
		nodePort int32
		opted    bool
	}{{dpPreserve, dpPreservePort, true}, {dpSNAT, dpSNATPort, false}} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: dpNS},
			Spec: corev1.ServiceSpec{
				Type:                  corev1.ServiceTypeNodePort,
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
				Selector:              map[string]string{"app": "dp-sink"},
				Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80,
					TargetPort: intstr.FromInt32(8080), NodePort: s.nodePort}},
			},
		}
		if s.opted {
			svc.Annotations = map[string]string{annotation: "true"}
		}
		if _, err := c.CoreV1().Services(dpNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("service %s: %w", s.name, err)
		}
	}

	// The lab: two nodes, the two pods on dpnode2, the client.
	prefix := "pd" + fmt.Sprintf("%02x%02x", rb[0], rb[1])
	l, err := lab.New(lab.Config{ManifestsDir: dir, AgentBin: agent, Kubeconfig: b.cp.Kubeconfig, Prefix: prefix,
		AgentArgs: []string{"--service-node-port-range=" + nodePortRange, "--v=0"}})
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	defer l.Close()
	ingress, backend := l.Node("dpnode1"), l.Node("dpnode2")
	client := l.Client("client")
	if ingress == nil || backend == nil || client == nil {
		return nil, fmt.Errorf("lab: nodes or client missing")
	}
	// The client's ephemeral ports: all of them, so that ~10^4 short connections per window
	// never reuse a port whose conntrack entries are still around.
	if _, err := l.Exec(client.Netns, "sysctl", "-q", "-w", "net.ipv4.ip_local_port_range="+*dpPorts); err != nil {
		return nil, err
	}
	if err := l.StartAgents(); err != nil {
		return nil, err
	}

	// A sink in each pod.
	for _, p := range dpPods {
		pod := l.Pod(p[0])
		cmd := exec.Command("ip", "netns", "exec", pod.Netns, self, "dp-sink", "-listen", ":8080")
		lf, err := os.Create(filepath.Join(tmp, "sink-"+p[0]+".log"))
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = lf, lf
		if err := cmd.Start(); err != nil {
			lf.Close()
			return nil, err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); lf.Close() }()
	}

	// kube-proxy on dpnode1's host. It reaches the API server (listening in the root namespace)
	// over a veth of its own: root end rootSide/30, node end nodeSide/30, a host route to the API
	// server's address.
	apiIP := b.apiIP
	rootSide := fmt.Sprintf("169.254.%d.%d", 200+int(rb[0])%50, 1+int(rb[1])%60*4)
	nodeSide := rootSide[:strings.LastIndexByte(rootSide, '.')+1] + strconv.Itoa(atoiLast(rootSide)+1)
	rootDev, nodeDev := prefix+"kr", prefix+"kn"
	defer func() { _ = exec.Command("ip", "link", "del", rootDev).Run() }()
	for _, argv := range [][]string{
		{"ip", "link", "add", rootDev, "type", "veth", "peer", "name", nodeDev},
		{"ip", "link", "set", nodeDev, "netns", ingress.Netns},
		{"ip", "addr", "add", rootSide + "/30", "dev", rootDev},
		{"ip", "link", "set", rootDev, "up"},
		{"ip", "netns", "exec", ingress.Netns, "ip", "addr", "add", nodeSide + "/30", "dev", nodeDev},
		{"ip", "netns", "exec", ingress.Netns, "ip", "link", "set", nodeDev, "up"},
		{"ip", "netns", "exec", ingress.Netns, "ip", "route", "add", apiIP + "/32", "via", rootSide},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
	}
	kpLog := filepath.Join(tmp, "dp-kube-proxy.log")
	kp := exec.Command("ip", "netns", "exec", ingress.Netns, *kubeProxyBin,
		"--kubeconfig="+b.cp.Kubeconfig, "--proxy-mode=nftables", "--hostname-override=dpnode1",
		"--cluster-cidr=10.244.0.0/16", "--metrics-bind-address="+nodeSide+":10249",
		"--healthz-bind-address="+nodeSide+":10256", "--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0", "--v=0")
	kf, err := os.Create(kpLog)
	if err != nil {
		return nil, err
	}
	defer kf.Close()
	kp.Stdout, kp.Stderr = kf, kf
	if err := kp.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = kp.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = kp.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = kp.Process.Kill()
			<-done
		}
	}()
	if _, _, err := waitKubeProxySync(ctx, nodeSide+":10249", 2*time.Minute); err != nil {
		out, _ := os.ReadFile(kpLog)
		return nil, fmt.Errorf("kube-proxy on dpnode1: %w\n%s", err, tailLines(string(out), 20))
	}

	r := &DatapathResult{DurationS: dpDuration.Seconds(), Workers: *dpWorkers, Streams: *dpStreams, Rounds: *dpRounds}
	paths := []*dpPath{&r.Preserved, &r.SNAT}
	r.Preserved = dpPath{Service: dpNS + "/" + dpPreserve, Addr: fmt.Sprintf("%s:%d", ingress.IP, dpPreservePort), seen: map[string]int{}}
	r.SNAT = dpPath{Service: dpNS + "/" + dpSNAT, Addr: fmt.Sprintf("%s:%d", ingress.IP, dpSNATPort), seen: map[string]int{}}
	for _, p := range dpPods {
		r.Preserved.Backend = append(r.Preserved.Backend, p[1]+":8080 ("+p[0]+" on dpnode2)")
	}
	r.SNAT.Backend = r.Preserved.Backend
	want := map[*dpPath]string{&r.Preserved: client.IP.String(), &r.SNAT: ingress.Gateway.String()}

	load := func(p *dpPath, args ...string) (*loadResult, error) {
		argv := append([]string{"ip", "netns", "exec", client.Netns, self, "dp-load", "-addr", p.Addr}, args...)
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				err = fmt.Errorf("%w: %s", err, ee.Stderr)
			}
			return nil, fmt.Errorf("%s: %w", strings.Join(argv[5:], " "), err)
		}
		var lr loadResult
		if err := json.Unmarshal(out, &lr); err != nil {
			return nil, fmt.Errorf("dp-load output %q: %w", out, err)
		}
		for k, v := range lr.Seen {
			p.seen[k] += v
		}
		return &lr, nil
	}

	// Both paths answer, each with the source address it should.
	t := time.Now()
	for _, p := range paths {
		for {
			lr, err := load(p, "-mode", "probe")
			if err == nil && lr.Seen[want[p]] == 1 {
				break
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("interrupted while waiting for %s to answer: %w", p.Service, ctx.Err())
			}
			if time.Since(t) > 2*time.Minute {
				return nil, fmt.Errorf("%s via %s: no answer seen from %s within 2 minutes (last: %v, %+v)", p.Service, p.Addr, want[p], err, lr)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	logf("data path: both Services answer through dpnode1 (%.1f s after kube-proxy's first sync); %v per measurement, %d workers, %d stream(s), %d round(s)",
		time.Since(t).Seconds(), *dpDuration, *dpWorkers, *dpStreams, *dpRounds)

	common := []string{"-duration", dpDuration.String(), "-warmup", dpWarmup.String(), "-client-closes=" + strconv.FormatBool(*dpClientCl)}
	if *dpClientCl {
		if _, err := l.Exec(client.Netns, "sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"); err != nil {
			return nil, err
		}
	}
	var lats = map[*dpPath][]float64{}
	r.Preserved.perRound, r.SNAT.perRound = map[string][]float64{}, map[string][]float64{}
	for round := 0; round < *dpRounds; round++ {
		order := paths
		if round%2 == 1 {
			order = []*dpPath{&r.SNAT, &r.Preserved}
		}
		for _, mode := range strings.Split(*dpMeasure, ",") {
			for _, p := range order {
				n := *dpStreams
				if mode == "cps" {
					n = *dpWorkers
				}
				lr, err := load(p, append([]string{"-mode", mode, "-workers", strconv.Itoa(n)}, common...)...)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", p.Service, err)
				}
				v := lr.CPS
				if mode != "cps" {
					v = lr.Mbps
				}
				p.perRound[mode] = append(p.perRound[mode], v)
				switch mode {
				case "cps":
					p.Conns += lr.Conns
					p.Errors += lr.Errors
					for k, v := range lr.ErrorKinds {
						if p.ErrorKinds == nil {
							p.ErrorKinds = map[string]int{}
						}
						p.ErrorKinds[k] += v
					}
					p.cpsS += lr.Seconds
					lats[p] = append(lats[p], lr.P50ms, lr.P99ms)
					logf("data path: %-14s cps %7.0f  p50 %.2f ms  p99 %.2f ms  (%d conns, %d errors %v)", p.Service, lr.CPS, lr.P50ms, lr.P99ms, lr.Conns, lr.Errors, lr.ErrorKinds)
				case "down":
					p.downB += lr.Bytes
					p.downS += lr.Seconds
					logf("data path: %-14s download %7.0f Mbit/s", p.Service, lr.Mbps)
				case "up":
					p.upB += lr.Bytes
					p.upS += lr.Seconds
					logf("data path: %-14s upload   %7.0f Mbit/s", p.Service, lr.Mbps)
				}
			}
		}
	}
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	for _, p := range paths {
		p.CPS = div(float64(p.Conns), p.cpsS)
		p.DownMbps = div(float64(p.downB)*8/1e6, p.downS)
		p.UpMbps = div(float64(p.upB)*8/1e6, p.upS)
		// Latency percentiles: the mean of the rounds' (each round's are over its whole window).
		var s50, s99 float64
		for i := 0; i < len(lats[p]); i += 2 {
			s50 += lats[p][i]
			s99 += lats[p][i+1]
		}
		p.P50ms, p.P99ms = s50/float64(*dpRounds), s99/float64(*dpRounds)
		for k := range p.seen {
			p.SawSource = append(p.SawSource, k)
		}
		sort.Strings(p.SawSource)
		if len(p.SawSource) != 1 || p.SawSource[0] != want[p] {
			return nil, fmt.Errorf("%s: the backends saw sources %v, want only %s: the comparison would not be what it says", p.Service, p.seen, want[p])
		}
	}
	r.RoundRatios = map[string][]float64{}
	for mode, vs := range r.Preserved.perRound {
		for i, v := range vs {
			r.RoundRatios[mode] = append(r.RoundRatios[mode], div(v, r.SNAT.perRound[mode][i]))
		}
	}
	r.RatioCPS = div(r.Preserved.CPS, r.SNAT.CPS)
	r.RatioDown = div(r.Preserved.DownMbps, r.SNAT.DownMbps)
	r.RatioUp = div(r.Preserved.UpMbps, r.SNAT.UpMbps)
	r.RatioP50 = div(r.Preserved.P50ms, r.SNAT.P50ms)
	r.RatioP99 = div(r.Preserved.P99ms, r.SNAT.P99ms)
	return r, nil
}

// checkDatapathFlags refuses bad data-path flags before anything is built (mainErr calls it).
func checkDatapathFlags() error {
	if *kubeProxyBin == "" {
		return fmt.Errorf("the data path's SNAT path needs kube-proxy (-kube-proxy), or -datapath=false")
	}
	for _, m := range strings.Split(*dpMeasure, ",") {
		if m != "cps" && m != "down" && m != "up" {
			return fmt.Errorf("-dp-measure: unknown measurement %q (cps, down, up)", m)
		}
	}
	if *dpRounds < 1 || *dpWorkers < 1 || *dpStreams < 1 {
		return fmt.Errorf("-dp-rounds, -dp-workers and -dp-streams must be at least 1")
	}
	if *dpDuration <= 0 || *dpWarmup < 0 {
		return fmt.Errorf("-dp-duration must be positive and -dp-warmup not negative")
	}
	return nil
}

// cleanupDatapathObjects deletes what datapathPhase wrote to the API server (best effort: the
// namespace controller does not run, so each object is deleted by name).
func cleanupDatapathObjects(c kubernetes.Interface, mf *lab.Manifests) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	zero := int64(0)
	for _, s := range []string{dpPreserve, dpSNAT} {
		_ = c.CoreV1().Services(dpNS).Delete(ctx, s, metav1.DeleteOptions{})
	}
	for _, p := range dpPods {
		_ = c.CoreV1().Pods(dpNS).Delete(ctx, p[0], metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	_ = c.DiscoveryV1().EndpointSlices(dpNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	for i := range mf.Nodes {
		_ = c.CoreV1().Nodes().Delete(ctx, mf.Nodes[i].Name, metav1.DeleteOptions{})
	}
	_ = c.CoreV1().Namespaces().Delete(ctx, dpNS, metav1.DeleteOptions{})
}

func printDatapath(r *DatapathResult) {
	w := os.Stdout
	fmt.Fprintf(w, "\nData path through one ingress node (dpnode1) to the same 2 pods on dpnode2; %.0f s per measurement, %d round(s)\n", r.DurationS, r.Rounds)
	fmt.Fprintf(w, "(preserved: opted-in Service, the agents' flows; SNAT: the same pods behind an unannotated Service, kube-proxy nftables\n")
	fmt.Fprintf(w, " DNAT + masquerade on dpnode1's host, then srcip-gw0 and Geneve; shared 2-core machine: compare within this run)\n\n")
	fmt.Fprintf(w, "%-52s %14s %14s %10s\n", "", "preserved", "SNAT", "ratio")
	row := func(name string, a, s float64, format string, ratio float64) {
		if a == 0 && s == 0 {
			return // not measured (-dp-measure)
		}
		fmt.Fprintf(w, "%-52s %14s %14s %9.2fx\n", name, fmt.Sprintf(format, a), fmt.Sprintf(format, s), ratio)
	}
	row(fmt.Sprintf("connections/s (%d workers, 1 request each)", r.Workers), r.Preserved.CPS, r.SNAT.CPS, "%.0f", r.RatioCPS)
	row("  connect+response p50 (ms)", r.Preserved.P50ms, r.SNAT.P50ms, "%.2f", r.RatioP50)
	row("  connect+response p99 (ms)", r.Preserved.P99ms, r.SNAT.P99ms, "%.2f", r.RatioP99)
	row(fmt.Sprintf("throughput pod -> client, %d stream(s) (Mbit/s)", r.Streams), r.Preserved.DownMbps, r.SNAT.DownMbps, "%.0f", r.RatioDown)
	row(fmt.Sprintf("throughput client -> pod, %d stream(s) (Mbit/s)", r.Streams), r.Preserved.UpMbps, r.SNAT.UpMbps, "%.0f", r.RatioUp)
	for _, m := range []struct{ mode, name string }{{"cps", "connections/s"}, {"down", "pod -> client"}, {"up", "client -> pod"}} {
		if vs := r.RoundRatios[m.mode]; len(vs) > 1 {
			var f []string
			for _, v := range vs {
				f = append(f, fmt.Sprintf("%.2f", v))
			}
			fmt.Fprintf(w, "%-52s %40s\n", "  ratio of each round, "+m.name, strings.Join(f, " "))
		}
	}
	fmt.Fprintf(w, "%-52s %14s %14s\n", "source address the backends saw", strings.Join(r.Preserved.SawSource, ","), strings.Join(r.SNAT.SawSource, ","))
	fmt.Fprintf(w, "%-52s %14d %14d\n", "failed short connections (5 s timeout)", r.Preserved.Errors, r.SNAT.Errors)
	for _, p := range []*dpPath{&r.Preserved, &r.SNAT} {
		if len(p.ErrorKinds) > 0 {
			fmt.Fprintf(w, "  %s: %v\n", p.Service, p.ErrorKinds)
		}
	}
	fmt.Fprintf(w, "(ratios are preserved / SNAT: goal >= 0.95 for connections/s and throughput; for latency lower is better)\n")
}
