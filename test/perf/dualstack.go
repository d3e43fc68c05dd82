package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The dual-stack part (issue 22): after each size's IPv4 phases, the same cluster made
// dual-stack - every Node with an IPv6 InternalIP and pod CIDR beside its IPv4 ones, every
// Service PreferDualStack (even index) or RequireDualStack (odd) with an IPv6 ClusterIP from
// serviceCIDR6 and a second EndpointSlice (addressType IPv6) of its 10 endpoints on the same
// nodes - and the agent's cold start measured on it as on the IPv4 cluster: twice the Service
// flows, which must cost at most -dual-stack-bound times the IPv4 cold start and peak RSS.

var (
	dualStack      = flag.Bool("dual-stack", true, "after each size's IPv4 phases, measure the agent's cold start on the same cluster dual-stack (-only=dualstack: the IPv4 and dual-stack cold starts alone)")
	dualStackBound = flag.Float64("dual-stack-bound", 2, "PASS when the dual-stack cold start and peak RSS are at most this many times the IPv4 ones")
)

// serviceCIDR6 is the API server's second --service-cluster-ip-range (documentation prefix, as
// test/cluster's dual-stack lab).
const serviceCIDR6 = "2001:db8:96::/112"

// coldFigures are one cold start's figures (agentPhase for IPv4, dualStackPhase).
type coldFigures struct {
	ReadyS     float64   // process start -> /readyz, median of -cold-runs
	ReadyRunsS []float64 // each run, in order
	Flows      int       // in OVS, both bridges, agent cookies
	Groups     int
	FlowsLater int // 3 s later
	// Messages are the OpenFlow messages of the first full sync's bundles, both bridges
	// (srcip_agent_bundle_lines_total at /readyz: flow and group adds).
	Messages float64
	AtReady  usage
	Settled  usage // 3 s after the cold start
	Steps    map[string]float64
}

// DualStackResult is the dual-stack cold start at one size, with its ratios to the IPv4 one.
type DualStackResult struct {
	Services, EndpointsPerFamily, Nodes int
	PreferDualStack, RequireDualStack   int
	coldFigures
	DeclinedServicePorts float64 // srcip_agent_declined_service_ports at /readyz (must be 0)

	RatioReady, RatioPeakRSS, RatioRSSAtReady, RatioFlows, RatioGroups, RatioMessages float64
	Bound                                                                             float64
	Pass                                                                              bool // RatioReady and RatioPeakRSS <= Bound
}

// parallel runs f(i) for i in [from, to) on 32 writers and returns the first error.
func parallel(from, to int, f func(i int) error) error {
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

// endpoint6 is the IPv6 address of endpoint j of Service i: on the same node as its IPv4 one
// (endpoint), 2001:db8:244:<k>::<host> in that node's IPv6 pod CIDR.
func (cl *cluster) endpoint6(i, j int) (node string, ip netip.Addr) {
	node, ip4 := cl.endpoint(i, j)
	b := ip4.As4()
	return node, netip.MustParseAddr(fmt.Sprintf("2001:db8:244:%x::%x", b[2], b[3]))
}

func (cl *cluster) slice6(i int, name string, port int32) *discoveryv1.EndpointSlice {
	s := cl.slice(i, name, port)
	s.Name, s.AddressType = name+"-perf6", discoveryv1.AddressTypeIPv6
	for j := range s.Endpoints {
		_, ip := cl.endpoint6(i, j)
		s.Endpoints[j].Addresses = []string{ip.String()}
	}
	return s
}

// setDualStack makes Services 0..n-1 dual-stack with an IPv6 EndpointSlice each (on), or
// (off) deletes the IPv6 slices and makes every dual-stack Service IPv4-only again.
func (cl *cluster) setDualStack(ctx context.Context, n int, on bool) error {
	svcs := cl.c.CoreV1().Services(perfNS)
	slices := cl.c.DiscoveryV1().EndpointSlices(perfNS)
	if !on {
		err := parallel(0, cl.dualSvcs, func(i int) error {
			s := cl.svcs[i]
			if err := slices.Delete(ctx, s.name+"-perf6", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			p, _ := json.Marshal(map[string]any{"spec": map[string]any{
				"ipFamilyPolicy": corev1.IPFamilyPolicySingleStack, "ipFamilies": []string{"IPv4"}, "clusterIPs": []string{s.clusterIP}}})
			_, err := svcs.Patch(ctx, s.name, types.MergePatchType, p, metav1.PatchOptions{})
			return err
		})
		if err == nil {
			cl.dualSvcs = 0
		}
		return err
	}
	err := parallel(cl.dualSvcs, n, func(i int) error {
		s := cl.svcs[i]
		policy := corev1.IPFamilyPolicyPreferDualStack
		if i%2 == 1 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		p, _ := json.Marshal(map[string]any{"spec": map[string]any{"ipFamilyPolicy": policy}})
		out, err := svcs.Patch(ctx, s.name, types.MergePatchType, p, metav1.PatchOptions{})
		if err != nil {
			return err
		}
		if len(out.Spec.ClusterIPs) != 2 {
			return fmt.Errorf("service %s %s: clusterIPs %v, want one per family (is %s a --service-cluster-ip-range?)", s.name, policy, out.Spec.ClusterIPs, serviceCIDR6)
		}
		_, err = slices.Create(ctx, cl.slice6(i, s.name, *s.slice.Ports[0].Port), metav1.CreateOptions{})
		return err
	})
	if err == nil {
		cl.dualSvcs = n
	}
	return err
}

// dualStackPhase makes the cluster dual-stack (Nodes and Services 0..n-1, the agent stopped),
// measures the agent's cold start on it like the IPv4 one (r) and, unless last, makes it
// IPv4-only again for the next size.
func (b *bench) dualStackPhase(ctx context.Context, r *Result, last bool) error {
	n := len(b.cl.svcs)
	t := time.Now()
	if err := b.cl.setNodesDual(ctx, true); err != nil {
		return err
	}
	if err := b.cl.setDualStack(ctx, n, true); err != nil {
		return err
	}
	logf("dual-stack: %d Nodes and %d Services (PreferDualStack/RequireDualStack, an IPv6 EndpointSlice of %d endpoints each) in the API (%.1f s to write)",
		b.cl.nodes, n, *endpoints, time.Since(t).Seconds())
	waitQuiet()
	d := &DualStackResult{Services: n, EndpointsPerFamily: *endpoints, Nodes: b.cl.nodes,
		PreferDualStack: (n + 1) / 2, RequireDualStack: n / 2, Bound: *dualStackBound}
	r.DualStack = d
	if err := b.coldStarts(&d.coldFigures, nil); err != nil {
		return err
	}
	declined, err := b.metricSum("srcip_agent_declined_service_ports")
	_ = b.lab.StopAgent("node1")
	if err != nil {
		return err
	}
	d.DeclinedServicePorts = declined
	logf("dual-stack: cold start -> all flows in OVS %.2f s: %d flows, %d groups, %.0f messages, RSS %.0f MB (peak %.0f MB), CPU %.2f s; declined Service ports %.0f",
		d.ReadyS, d.Flows, d.Groups, d.Messages, d.AtReady.RSSMB, d.AtReady.PeakRSSMB, d.AtReady.CPUSeconds, declined)
	logf("dual-stack: its first full sync, ms by step: %s", formatSteps(d.Steps))
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	d.RatioReady = div(d.ReadyS, r.AgentReadyS)
	d.RatioPeakRSS = div(d.AtReady.PeakRSSMB, r.AgentAtReady.PeakRSSMB)
	d.RatioRSSAtReady = div(d.AtReady.RSSMB, r.AgentAtReady.RSSMB)
	d.RatioFlows = div(float64(d.Flows), float64(r.AgentFlows))
	d.RatioGroups = div(float64(d.Groups), float64(r.AgentGroups))
	d.RatioMessages = div(d.Messages, r.AgentMessages)
	d.Pass = d.RatioReady > 0 && d.RatioReady <= d.Bound && d.RatioPeakRSS > 0 && d.RatioPeakRSS <= d.Bound
	logf("dual-stack / IPv4 at %d Services: cold start %.2fx, peak RSS %.2fx, flows %.2fx, groups %.2fx, messages %.2fx: %s (bound %.1fx)",
		n, d.RatioReady, d.RatioPeakRSS, d.RatioFlows, d.RatioGroups, d.RatioMessages, passFail(d.Pass), d.Bound)
	if declined != 0 {
		return fmt.Errorf("dual-stack: the agent declined %.0f Service ports (IPv6 not programmed?)", declined)
	}
	if last {
		return nil
	}
	t = time.Now()
	if err := b.cl.setDualStack(ctx, n, false); err != nil {
		return err
	}
	if err := b.cl.setNodesDual(ctx, false); err != nil {
		return err
	}
	logf("dual-stack: the cluster IPv4-only again (%.1f s to write)", time.Since(t).Seconds())
	return nil
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// dualStackRows prints the dual-stack rows (sizes without a dual-stack run show "-").
func dualStackRows(row func(string, func(*Result) string)) {
	ds := func(f func(r *Result, d *DualStackResult) string) func(*Result) string {
		return func(r *Result) string {
			if r.DualStack == nil {
				return "-"
			}
			return f(r, r.DualStack)
		}
	}
	row("dual-stack: Services (Prefer/Require) x endpoints/family", ds(func(_ *Result, d *DualStackResult) string {
		return fmt.Sprintf("%d/%d x%d", d.PreferDualStack, d.RequireDualStack, d.EndpointsPerFamily)
	}))
	row("dual-stack: cold start -> all flows in OVS (s)", ds(func(_ *Result, d *DualStackResult) string { return f2(d.ReadyS) }))
	row("dual-stack: flows / groups in OVS", ds(func(_ *Result, d *DualStackResult) string { return fmt.Sprintf("%d/%d", d.Flows, d.Groups) }))
	row("dual-stack: messages of the first sync", ds(func(_ *Result, d *DualStackResult) string { return fmt.Sprintf("%.0f", d.Messages) }))
	row("dual-stack: RSS at sync / 3 s later (MB)", ds(func(_ *Result, d *DualStackResult) string {
		return fmt.Sprintf("%.0f/%.0f", d.AtReady.RSSMB, d.Settled.RSSMB)
	}))
	row("dual-stack: peak RSS at sync (MB)", ds(func(_ *Result, d *DualStackResult) string { return fmt.Sprintf("%.0f", d.AtReady.PeakRSSMB) }))
	row("dual-stack: CPU seconds to first sync", ds(func(_ *Result, d *DualStackResult) string { return f2(d.AtReady.CPUSeconds) }))
	row("ratio dual-stack / IPv4, cold start", ds(func(_ *Result, d *DualStackResult) string { return fmt.Sprintf("%.2fx", d.RatioReady) }))
	row("ratio dual-stack / IPv4, peak RSS at sync", ds(func(_ *Result, d *DualStackResult) string { return fmt.Sprintf("%.2fx", d.RatioPeakRSS) }))
	row("ratio dual-stack / IPv4, flows/groups/messages", ds(func(_ *Result, d *DualStackResult) string {
		return fmt.Sprintf("%.2f/%.2f/%.2f", d.RatioFlows, d.RatioGroups, d.RatioMessages)
	}))
	row("dual-stack within the bound (cold start, RSS)", ds(func(_ *Result, d *DualStackResult) string {
		return fmt.Sprintf("%s (<=%.1fx)", passFail(d.Pass), d.Bound)
	}))
}

// printDualStack is -only=dualstack's table: the IPv4 and dual-stack cold starts.
func printDualStack(rs []*Result) {
	w := os.Stdout
	fmt.Fprintf(w, "\nsrcip-agent cold start, IPv4 and dual-stack; one emulated node, live API server\n")
	fmt.Fprintf(w, "(shared 2-core machine: compare ratios within this run, not with other machines)\n\n")
	row := tableRow(w, rs)
	row("Services x endpoints (nodes)", func(r *Result) string { return fmt.Sprintf("%dx%d (%d)", r.Services, r.Endpoints, r.Nodes) })
	coldRows(row)
	dualStackRows(row)
}

// dualStackSummary is the line printed last: every size's verdict.
func dualStackSummary(rs []*Result) string {
	var parts []string
	for _, r := range rs {
		if d := r.DualStack; d != nil {
			parts = append(parts, fmt.Sprintf("%d Services %s (cold start %.2fx, peak RSS %.2fx)", d.Services, passFail(d.Pass), d.RatioReady, d.RatioPeakRSS))
		}
	}
	return strings.Join(parts, "; ")
}
