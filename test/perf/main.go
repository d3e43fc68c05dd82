// Command perf is `make bench`: srcip-agent side by side with the OVS floor and kube-proxy
// (nftables mode) on one synthetic cluster behind a live API server (test/kube), on one emulated
// node's Open vSwitch (test/lab). It prints a table and writes the figures as JSON (-out), from
// which test/perf/plot draws docs/performance.png.
//
// First (-datapath, on by default; -only=datapath runs it alone) the data path, on a two-node lab
// of its own (datapath.go): connections per second and bulk throughput from an external client
// through one ingress node to the same two pods on the other node, for an opted-in Service (the
// agents' preserved-source path) and for an unannotated Service over the same pods (kube-proxy's
// DNAT + masquerade on the ingress node's host), side by side, with their ratios.
//
// Then, for each cluster size (-sizes; opted-in NodePort Services x -endpoints ready endpoints over
// -nodes Nodes), in order:
//  1. srcip-agent cold start: the bridges hold none of its flows; from the process start to
//     /readyz (first full sync applied), then its flows and groups counted in OVS, its RSS and
//     CPU seconds;
//  2. one EndpointSlice change at a time (-changes at the largest size, -small-changes at the
//     others): from the API write (its round trip included) to the Service's flows changing in
//     OVS, seen by one `ovs-ofctl monitor` (no polling); then a burst of -burst changes at the
//     largest size: time until every one of them is in OVS;
//  3. the floor: the agent's flows and groups of both bridges (dumped from OVS) written as one
//     pre-encoded OpenFlow bundle per bridge over the switch socket; `ovs-ofctl --bundle
//     add-groups` + `--bundle replace-flows` of the whole bridge into empty bridges, and
//     replace-flows again with one flow changed (what OVN-Kubernetes does on every sync);
//  4. kube-proxy (hack/cluster's build of k8s.io/kubernetes) in nftables mode, in a network
//     namespace of its own, on the same objects: initial sync (process start to its first sync
//     of all rules, from its metrics), RSS, CPU, and API write -> rule in nftables (`nft
//     monitor`), changes spaced by more than its 1 s minimum sync period;
//  5. dual-stack (-dual-stack, on by default; -only=dualstack runs it with the IPv4 cold start
//     alone, dualstack.go): the same cluster made dual-stack (the API server has a second,
//     IPv6 Service range; every Node an IPv6 InternalIP and pod CIDR, every Service
//     PreferDualStack or RequireDualStack with an IPv6 EndpointSlice of its endpoints), the
//     agent's cold start as in 1, and its ratios to the IPv4 one: PASS when the cold start and
//     the peak RSS stay within -dual-stack-bound (2x); then the cluster IPv4-only again for
//     the next size.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/ovs-srcip/ovs-srcip/test/kube"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

var (
	agentBin     = flag.String("agent", "bin/srcip-agent", "srcip-agent binary")
	kubeProxyBin = flag.String("kube-proxy", "", "kube-proxy binary (hack/cluster/build.sh); empty: skip kube-proxy")
	sizesFlag    = flag.String("sizes", "1000,10000", "cluster sizes: opted-in Services")
	endpoints    = flag.Int("endpoints", 10, "ready endpoints per Service")
	nodes        = flag.Int("nodes", 50, "Nodes")
	changes      = flag.Int("changes", 500, "single changes at the largest size")
	smallChanges = flag.Int("small-changes", 200, "single changes at the other sizes")
	spacing      = flag.Duration("spacing", 150*time.Millisecond, "time between single changes (above the agent's 100 ms minimum sync interval)")
	burst        = flag.Int("burst", 1000, "changes of the burst at the largest size")
	kpChanges    = flag.Int("kp-changes", 100, "kube-proxy single changes at the largest size (a quarter at the others)")
	kpSpacing    = flag.Duration("kp-spacing", 1100*time.Millisecond, "time between kube-proxy changes (its minimum sync period is 1 s)")
	profileDir   = flag.String("profile", "", "directory: run the agent with --profiling and save a CPU profile of each cold start (cpu-N.pprof) and a heap profile after it (heap-N.pprof)")
	extraArgs    = flag.String("agent-args", "", "extra srcip-agent arguments, space-separated (e.g. --openflow=ovs-ofctl)")
	coldRuns     = flag.Int("cold-runs", 3, "cold starts of the agent at each size; the figure is their median")
	agentEnv     = flag.String("agent-env", "", "environment of the srcip-agent process only, space-separated NAME=VALUE (e.g. GOMEMLIMIT=200MiB, as deploy/ sets it from the container's memory limit)")
	outFile      = flag.String("out", "bin/bench/results.json", "figures as JSON")
	only         = flag.String("only", "", "run one phase alone: datapath, podstart (the agent's cold start at the largest of -sizes, then the pod starts; no changes, floor or kube-proxy), or dualstack (at each of -sizes the agent's IPv4 cold start, then the same cluster dual-stack: its cold start and the ratios; no changes, floor or kube-proxy)")
)

const nodePortRange = "20000-32767" // 10k NodePorts do not fit the default range

// Result is one cluster size's figures.
type Result struct {
	Services, Endpoints, Nodes int

	AgentReadyS     float64   // process start -> first full sync applied (/readyz): the median of the runs
	AgentReadyRunsS []float64 // each cold start (-cold-runs), in order; the last one is profiled
	AgentFlows      int       // in OVS, br-ex + br-int, agent cookies
	AgentGroups     int
	AgentFlowsLater int // 3 s later (must equal AgentFlows)
	// AgentMessages are the OpenFlow messages of the first full sync's bundles, both bridges
	// (srcip_agent_bundle_lines_total at /readyz).
	AgentMessages float64
	AgentAtReady  usage
	AgentSettled  usage // 3 s after the cold start (the first sync's memory returned)
	AgentAfter    usage // after the changes
	Change        latencyStats
	// ChangeWrite is the API write's round trip alone (within Change); ColdSteps and
	// ChangeSteps are the agent's own step times (ms, from srcip_agent_sync_step_duration_seconds):
	// of its first full sync, and the mean of its partial syncs during the single changes.
	ChangeWrite  latencyStats
	ColdSteps    map[string]float64 `json:",omitempty"`
	ChangeSteps  map[string]float64 `json:",omitempty"`
	BurstN       int
	BurstS       float64 // first write -> last change in OVS
	BurstWritesS float64 // first write -> last API write returned

	FloorBundleS      float64 // pre-encoded bundles (both bridges)
	FloorMessages     int
	OfctlReplaceColdS float64 // ovs-ofctl --bundle add-groups + replace-flows, empty bridges
	OfctlReplaceOneS  float64 // replace-flows again with one flow changed

	// One Service's bundle (its group add_or_mod and its flows), repeated: one ovs-ofctl process
	// each, against the same bytes over one persistent connection.
	SmallBundleOfctl      latencyStats
	SmallBundlePersistent latencyStats

	KubeProxySyncS    float64
	KubeProxyRules    int // service chains in nftables
	KubeProxyAtSync   usage
	KubeProxyChange   latencyStats
	KubeProxySyncMetS float64 // its own sync duration metric (first sync)

	// PodStart is the pod-start phase (-pods, at the largest size).
	PodStart *PodStartResult `json:",omitempty"`
	// DualStack is the same size dual-stack (-dual-stack), the agent's cold start alone.
	DualStack *DualStackResult `json:",omitempty"`
}

func main() {
	// The data path's sink and load generator are this binary too (dpload.go).
	if len(os.Args) > 1 && (os.Args[1] == "dp-sink" || os.Args[1] == "dp-load") {
		f := dpSink
		if os.Args[1] == "dp-load" {
			f = dpLoad
		}
		if err := f(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "perf:", err)
			os.Exit(1)
		}
		return
	}
	flag.Parse()
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "perf:", err)
		os.Exit(1)
	}
}

type bench struct {
	lab      *lab.Lab
	cp       *kube.ControlPlane
	cl       *cluster
	node     *lab.Node
	env      []string // OVS_RUNDIR of node1
	metrics  string   // agent metrics address
	kpNS     string
	kpIP     string
	nextPort int32
	apiIP    string // the API server's address (root namespace)
	results  []*Result
	datapath *DatapathResult
	tmp      string
}

// Results is what -out holds: the data-path phase and one Result per cluster size.
type Results struct {
	Datapath *DatapathResult `json:",omitempty"`
	Sizes    []*Result
}

func mainErr() error {
	var sizes []int
	switch *only {
	case "":
	case "datapath":
		*dpEnabled = true
	case "podstart":
		*dpEnabled, *kubeProxyBin, *coldRuns, *changes, *smallChanges, *burst, *dualStack = false, "", 1, 0, 0, 0, false
		if *podStarts <= 0 {
			return errors.New("-only=podstart needs -pods > 0")
		}
	case "dualstack":
		*dpEnabled, *kubeProxyBin, *changes, *smallChanges, *burst, *podStarts, *dualStack = false, "", 0, 0, 0, 0, true
	default:
		return fmt.Errorf("-only: unknown phase %q (datapath, podstart, dualstack)", *only)
	}
	if *dpEnabled {
		if err := checkDatapathFlags(); err != nil {
			return err
		}
	}
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-sizes: %v", err)
		}
		sizes = append(sizes, n)
	}
	if *only == "podstart" {
		sizes = sizes[len(sizes)-1:]
	}
	agent, err := filepath.Abs(*agentBin)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tmp, err := os.MkdirTemp("", "srcip-perf")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b := &bench{nextPort: 40000, tmp: tmp}
	rb := make([]byte, 2)
	_, _ = rand.Read(rb)
	prefix := "pf" + hex.EncodeToString(rb)

	// kube-proxy's network namespace, linked to the root namespace, where the API server listens
	// on the root end of the link (so the agent, in the root namespace, and kube-proxy reach it).
	b.kpNS = prefix + "-kp"
	rootIP := fmt.Sprintf("169.254.%d.%d", 100+int(rb[0])%100, 1+int(rb[1])%60*4)
	b.kpIP = rootIP[:strings.LastIndexByte(rootIP, '.')+1] + strconv.Itoa(atoiLast(rootIP)+1)
	cleanupNS, err := linkNetns(b.kpNS, prefix, rootIP, b.kpIP)
	defer cleanupNS()
	if err != nil {
		return err
	}

	// A dual-stack run needs the API server's IPv6 Service range too (hack/controlplane/start.sh
	// reads SRCIP_CP_SERVICE_CIDR; test/kube has no option for it). IPv4-only Services are the
	// same on it (SingleStack, from the first range).
	serviceCIDRs := kube.ServiceCIDR
	if *dualStack {
		serviceCIDRs += "," + serviceCIDR6
		if err := os.Setenv("SRCIP_CP_SERVICE_CIDR", serviceCIDRs); err != nil {
			return err
		}
	}
	logf("starting the control plane (kube-apiserver on %s, Service CIDRs %s, NodePorts %s)", rootIP, serviceCIDRs, nodePortRange)
	b.cp, err = kube.Start(ctx, kube.Options{APIServerAddress: rootIP, NodePortRange: nodePortRange})
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	defer b.cp.Stop()
	b.apiIP = rootIP

	// The data path first, on a lab of its own, while the API server holds nothing else; it
	// removes its objects when done.
	if *dpEnabled {
		cfg := rest.CopyConfig(b.cp.RESTConfig)
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		if b.datapath, err = b.datapathPhase(ctx, c, agent, tmp, rb); err != nil {
			return fmt.Errorf("data path: %w", err)
		}
		if err := b.writeResults(); err != nil {
			return err
		}
		if *only == "datapath" {
			printDatapath(b.datapath)
			return nil
		}
	}

	// The lab: one node (node1), whose agent watches the API server. With -dual-stack its br-ex
	// holds the IPv6 InternalIP too (addresses only; the IPv4 phases' API Nodes stay IPv4-only).
	mdir := filepath.Join(tmp, "manifests")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return err
	}
	node1YAML, err := yaml.Marshal(nodeObj(1, *dualStack))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(mdir, "nodes.yaml"), node1YAML, 0o644); err != nil {
		return err
	}
	b.metrics = fmt.Sprintf("127.0.0.1:%d", 19000+int(rb[1])%1000)
	agentArgs := []string{"--service-node-port-range=" + nodePortRange, "--v=0", "--metrics-bind-address=" + b.metrics}
	if *profileDir != "" {
		agentArgs = append(agentArgs, "--profiling")
	}
	agentArgs = append(agentArgs, strings.Fields(*extraArgs)...)
	b.lab, err = lab.New(lab.Config{ManifestsDir: mdir, AgentBin: agent, Kubeconfig: b.cp.Kubeconfig, Prefix: prefix, AgentArgs: agentArgs})
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	defer b.lab.Close()
	b.node = b.lab.Node("node1")
	b.env = append(os.Environ(), "OVS_RUNDIR="+b.node.Dir)

	cfg := rest.CopyConfig(b.cp.RESTConfig)
	cfg.QPS, cfg.Burst = 5000, 10000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	b.cl = &cluster{c: c, nodes: *nodes, endpoints: *endpoints}
	if err := b.cl.createNodes(ctx); err != nil {
		return err
	}

	for i, n := range sizes {
		largest := i == len(sizes)-1
		r := &Result{Services: n, Endpoints: *endpoints, Nodes: *nodes}
		b.results = append(b.results, r)
		t := time.Now()
		if err := b.cl.grow(ctx, n); err != nil {
			return fmt.Errorf("create Services: %w", err)
		}
		logf("%d Services x %d endpoints over %d nodes in the API (%.1f s to write)", n, *endpoints, *nodes, time.Since(t).Seconds())
		waitQuiet()
		if err := b.agentPhase(ctx, r, largest); err != nil {
			return fmt.Errorf("srcip-agent at %d Services: %w", n, err)
		}
		if *only == "podstart" {
			if err := b.writeResults(); err != nil {
				return err
			}
			printPodStart(r)
			return nil
		}
		if *only != "dualstack" {
			if err := b.floorPhase(ctx, r, tmp); err != nil {
				return fmt.Errorf("floor at %d Services: %w", n, err)
			}
		}
		if *kubeProxyBin != "" {
			nc := *kpChanges
			if !largest {
				nc /= 4
			}
			if err := b.kubeProxyPhase(ctx, r, nc, tmp); err != nil {
				return fmt.Errorf("kube-proxy at %d Services: %w", n, err)
			}
		}
		if *dualStack {
			t := time.Now()
			if err := b.dualStackPhase(ctx, r, largest); err != nil {
				return fmt.Errorf("dual-stack at %d Services: %w", n, err)
			}
			logf("dual-stack part at %d Services: %.0f s", n, time.Since(t).Seconds())
		}
		if err := b.writeResults(); err != nil {
			return err
		}
	}
	if *only == "dualstack" {
		printDualStack(b.results)
	} else {
		printTable(b.results)
	}
	if b.datapath != nil {
		printDatapath(b.datapath)
	}
	if *dualStack {
		fmt.Printf("\ndual-stack within %.1fx of IPv4: %s\n", *dualStackBound, dualStackSummary(b.results))
	}
	return nil
}

func atoiLast(ip string) int {
	n, _ := strconv.Atoi(ip[strings.LastIndexByte(ip, '.')+1:])
	return n
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func (b *bench) writeResults() error {
	if err := os.MkdirAll(filepath.Dir(*outFile), 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(Results{Datapath: b.datapath, Sizes: b.results}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(*outFile, j, 0o644)
}

// linkNetns creates netns ns with a veth to the root namespace: rootIP/30 at the root end,
// nsIP/30 inside. The returned function removes both.
func linkNetns(ns, prefix, rootIP, nsIP string) (func(), error) {
	rootDev, nsDev := prefix+"r", prefix+"n"
	cleanup := func() {
		_ = exec.Command("ip", "link", "del", rootDev).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
	for _, argv := range [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", rootDev, "type", "veth", "peer", "name", nsDev},
		{"ip", "link", "set", nsDev, "netns", ns},
		{"ip", "addr", "add", rootIP + "/30", "dev", rootDev},
		{"ip", "link", "set", rootDev, "up"},
		{"ip", "netns", "exec", ns, "ip", "addr", "add", nsIP + "/30", "dev", nsDev},
		{"ip", "netns", "exec", ns, "ip", "link", "set", nsDev, "up"},
		{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return cleanup, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
	}
	return cleanup, nil
}
