// Command demo builds the lab from manifests, starts srcip-agent on every
// node, and shows where each request to an opted-in Service went and which
// client address the backend saw:
//
//	go run ./test/demo --agent /tmp/srcip-agent --echo /tmp/echo --srcipctl /tmp/srcipctl --manifests test/manifests/demo
//
// The agents read a copy of the manifests in the lab's directory (printed; edit it to change a
// kept lab). After the requests it prints the backends hit, the path of each entry point, and
// the ingress node as srcipctl shows it (get services, flows, groups, diff). On the dual-stack lab
// (--ipv6, the default) the copy of a SingleStack IPv4 Service is made PreferDualStack first (an
// IPv6 ClusterIP, LoadBalancer IP and externalIP, and an IPv6 EndpointSlice of its pods' IPv6
// addresses), and the client also asks once per IPv6 entry point from its IPv6 address. It exits
// non-zero if a request failed, a backend saw an address other than the client's (of the family
// asked), or an answer came from an address other than the one asked. With --keep it prints its verdict and its pid, and keeps the
// lab until SIGINT or SIGTERM; it then exits with the verdict's status.
package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

type entry struct {
	kind   string // NodePort, LoadBalancer, externalIP
	proto  string // tcp, udp
	addr   string // IP:port
	target int    // the Service port's targetPort (its port when not a number)
	v6     bool   // an IPv6 entry point: the client asks from its IPv6 address
}

func main() {
	os.Exit(run())
}

func run() int {
	agent := flag.String("agent", "", "srcip-agent binary (required)")
	echo := flag.String("echo", "", "test/echo binary (default: built into a temp dir)")
	srcipctl := flag.String("srcipctl", "", "srcipctl binary (default: built into a temp dir)")
	manifests := flag.String("manifests", "test/manifests/demo", "manifests directory")
	service := flag.String("service", "demo/web", "namespace/name of the opted-in Service to exercise")
	n := flag.Int("n", 9, "TCP requests per entry point")
	nUDP := flag.Int("udp", 3, "UDP requests per entry point")
	wait := flag.Duration("wait", 60*time.Second, "how long to wait for the Service to work")
	verbose := flag.Bool("v", false, "log every command the lab runs")
	keep := flag.Bool("keep", false, "leave the lab running until Ctrl-C (for poking around)")
	ipv6 := flag.Bool("ipv6", true, "make the Service dual-stack in the lab's copy and ask its IPv6 entry points too (one request each)")
	flag.Parse()
	if *agent == "" {
		fmt.Fprintln(os.Stderr, "demo: --agent is required")
		return 2
	}
	mdir, err := filepath.Abs(*manifests)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	for _, b := range []struct {
		bin *string
		pkg string
	}{{echo, "github.com/ovs-srcip/ovs-srcip/test/echo"}, {srcipctl, "github.com/ovs-srcip/ovs-srcip/cmd/srcipctl"}} {
		if *b.bin != "" {
			continue
		}
		dir, err := os.MkdirTemp("", "demo-bin")
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		*b.bin = filepath.Join(dir, filepath.Base(b.pkg))
		if out, err := exec.Command("go", "build", "-o", *b.bin, b.pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: build %s: %v\n%s", b.pkg, err, out)
			return 1
		}
	}
	if abs, err := filepath.Abs(*srcipctl); err == nil {
		*srcipctl = abs
	}
	logf := func(string, ...any) {}
	if *verbose {
		logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, "  "+f+"\n", a...) }
	}

	if removed, err := lab.CleanupStale("", logf); err != nil {
		fmt.Fprintln(os.Stderr, "demo: cleanup of stale labs:", err)
	} else if len(removed) > 0 {
		fmt.Printf("removed leftovers of crashed labs: %v\n", removed)
	}

	t0 := time.Now()
	l, err := lab.New(lab.Config{ManifestsDir: mdir, CopyManifests: true, AgentBin: *agent, EchoBin: *echo, Logf: logf})
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	closeLab := func() {
		t := time.Now()
		if err := l.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: teardown:", err)
		}
		fmt.Printf("teardown: %s\n", time.Since(t).Round(time.Millisecond))
	}
	defer closeLab()
	// verdict is the exit status once the verdict is printed; 130 before (interrupted).
	var verdict atomic.Int32
	verdict.Store(130)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "demo: signalled, tearing down")
		closeLab()
		os.Exit(int(verdict.Load()))
	}()
	fmt.Printf("lab %s: %d nodes, %d pods, built in %s (dir %s)\n", l.Prefix, len(l.Nodes), len(l.Pods), l.SetupTime.Round(time.Millisecond), l.Dir)
	fmt.Printf("  manifests: %s (a copy of %s: the agents read it, edit it to change the lab)\n", l.ManifestsDir, *manifests)
	printNodes(l)

	ns, name, _ := strings.Cut(*service, "/")
	svc := l.Manifests.Service(ns, name)
	if svc == nil {
		fmt.Fprintf(os.Stderr, "demo: Service %s not in %s\n", *service, mdir)
		return 1
	}
	ingress := l.IngressNode()
	client := l.Clients[0]
	var entries6 []entry
	if *ipv6 && ingress.IP6.IsValid() && client.IP6.IsValid() {
		if svc, err = dualStack(l, svc); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			return 1
		}
		entries6 = entryPoints(svc, ingress.IP6.String(), true)
		for i := range entries6 {
			entries6[i].v6 = true
		}
		policy := "dual-stack"
		if svc.Spec.IPFamilyPolicy != nil {
			policy = string(*svc.Spec.IPFamilyPolicy)
		}
		fmt.Printf("  %s: %s %v in the copy (--ipv6=false leaves it as it is)\n", *service, policy, svc.Spec.IPFamilies)
	}
	entries := entryPoints(svc, ingress.IP.String(), false)
	if len(entries) == 0 {
		fmt.Fprintf(os.Stderr, "demo: Service %s has no NodePort / LB / external entry points\n", *service)
		return 1
	}

	if err := l.StartAgents(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	t1 := time.Now()
	err = lab.WaitFor(func() error {
		for _, nd := range l.Nodes {
			if running, exitErr := l.AgentRunning(nd.Name); !running {
				return fmt.Errorf("agent of %s exited: %v (log %s)", nd.Name, exitErr, l.AgentLog(nd.Name))
			}
		}
		for _, e := range entries {
			if _, err := l.RequestWith(client.Name, e.proto, e.addr, lab.RequestOpts{Timeout: "1s"}); err != nil {
				return fmt.Errorf("%s %s %s: %w", e.kind, e.proto, e.addr, err)
			}
		}
		return nil
	}, *wait)
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: Service %s never worked: %v\n", *service, err)
		dumpDebug(l, ingress.Name)
		fmt.Printf("\nFAIL: Service %s never worked\n", *service)
		verdict.Store(1)
		if *keep {
			hold(l)
		}
		return 1
	}
	fmt.Printf("setup: lab %s + agents until every entry point answered %s = %s total\n",
		l.SetupTime.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	if len(entries6) > 0 {
		// The IPv6 entry points get their own, shorter wait: if they never answer, the table
		// shows their failures beside the IPv4 results.
		t6 := time.Now()
		err := lab.WaitFor(func() error {
			for _, e := range entries6 {
				if _, err := l.RequestWith(client.Name, e.proto, e.addr, lab.RequestOpts{Timeout: "1s"}); err != nil {
					return fmt.Errorf("%s %s %s: %w", e.kind, e.proto, e.addr, err)
				}
			}
			return nil
		}, 20*time.Second)
		if err != nil {
			fmt.Printf("IPv6: not every entry point answered within 20 s: %v\n", oneLine(err))
		} else {
			fmt.Printf("IPv6: every entry point answered %s later\n", time.Since(t6).Round(time.Millisecond))
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tENTRY\tPROTO\tADDRESS\tBACKEND POD\tPOD NODE\tCLIENT SEEN BY BACKEND\tANSWER FROM\tOK")
	bad, i := 0, 0
	var hits []hit
	first := map[entry]lab.Reply{}
	for _, e := range append(entries, entries6...) {
		count := *n
		if e.proto == "udp" {
			count = *nUDP
		}
		want := client.IP.String()
		if e.v6 {
			count, want = 1, client.IP6.String() // one line per IPv6 entry point: keep it fast
		}
		for k := 0; k < count; k++ {
			i++
			r, err := l.Request(client.Name, e.proto, e.addr)
			if err != nil {
				bad++
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t-\t-\t-\t-\tFAIL: %v\n", i, e.kind, e.proto, e.addr, oneLine(err))
				continue
			}
			hits = append(hits, hit{pod: r.Pod, node: r.Node, proto: e.proto})
			if _, ok := first[e]; !ok {
				first[e] = r
			}
			var why []string
			if r.ClientIP() != want {
				why = append(why, "backend saw "+r.ClientIP()+", want "+want)
			}
			if r.From != e.addr {
				why = append(why, "answer from "+r.From+", want "+e.addr)
			}
			status := "ok"
			if len(why) > 0 {
				bad++
				status = "BAD: " + strings.Join(why, "; ")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i, e.kind, e.proto, e.addr, r.Pod, r.Node, r.Client, r.From, status)
		}
	}
	tw.Flush()

	fmt.Printf("\n== backends hit\n")
	writeBackends(os.Stdout, hits)

	fmt.Printf("\n== the path of the first request to each entry point (every reply goes back the same way)\n")
	for _, e := range append(entries, entries6...) {
		r, ok := first[e]
		if !ok {
			fmt.Printf("%-12s %-3s %-20s  no answer\n", e.kind, e.proto, e.addr)
			continue
		}
		fmt.Printf("%-12s %-3s %-20s  %s\n", e.kind, e.proto, e.addr, drawPath(ingress.Name, r.Node, r.Pod, podAddr(l, r.Pod, e.target, e.v6)))
	}

	ctl := func(args ...string) {
		fmt.Printf("\n== %s: srcipctl %s\n", ingress.Name, strings.Join(args, " "))
		cmd := exec.Command(*srcipctl, args...)
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+ingress.Dir)
		out, err := cmd.CombinedOutput()
		fmt.Print(string(out))
		if err != nil {
			fmt.Println("(srcipctl:", err, ")")
		}
	}
	ctl("get", "services")
	ctl("flows", "--kind", "service-port")
	ctl("groups")
	ctl("diff")

	if bad > 0 {
		fmt.Printf("\nFAIL: %d of %d requests failed or were wrong\n", bad, i)
		verdict.Store(1)
	} else {
		seen := client.IP.String()
		if len(entries6) > 0 {
			seen += " (IPv4) or " + client.IP6.String() + " (IPv6)"
		}
		fmt.Printf("\nPASS: %d requests, every backend saw %s, every answer came from the address asked\n", i, seen)
		verdict.Store(0)
	}
	if *keep {
		hold(l)
	}
	return int(verdict.Load())
}

// hit is one answered request: the backend pod, its node, and the protocol.
type hit struct{ pod, node, proto string }

// writeBackends prints one line per backend pod: its node and the TCP, UDP and total requests
// it answered.
func writeBackends(w io.Writer, hits []hit) {
	type count struct {
		node     string
		tcp, udp int
	}
	per := map[string]*count{}
	for _, h := range hits {
		c := per[h.pod]
		if c == nil {
			c = &count{node: h.node}
			per[h.pod] = c
		}
		if h.proto == "udp" {
			c.udp++
		} else {
			c.tcp++
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKEND POD\tPOD NODE\tTCP\tUDP\tREQUESTS")
	for _, pod := range slices.Sorted(maps.Keys(per)) {
		c := per[pod]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", pod, c.node, c.tcp, c.udp, c.tcp+c.udp)
	}
	tw.Flush()
}

// drawPath draws the way of a request in one line: from the client into the ingress node's br-ex,
// where the connection is DNATed to the endpoint, over Geneve when the pod is on another node,
// through the pod's node's br-int to the pod; the reply takes it back (un-DNATed on the ingress
// node).
func drawPath(ingress, podNode, pod, dnat string) string {
	s := "client -> " + ingress + " br-ex [DNAT " + dnat + "]"
	if podNode != ingress {
		s += " => Geneve => " + podNode + " br-int"
	} else {
		s += " -> " + ingress + " br-int"
	}
	return s + " -> " + pod + "; reply back"
}

// podAddr returns the endpoint address a request was DNATed to: the pod's IP (its IPv6 one with
// v6) and the Service port's targetPort; "?" for a pod the lab does not have.
func podAddr(l *lab.Lab, pod string, target int, v6 bool) string {
	for _, p := range l.Pods {
		if p.Name == pod {
			ip := p.IP
			if v6 {
				ip = p.IP6
			}
			return net.JoinHostPort(ip.String(), strconv.Itoa(target))
		}
	}
	return "?"
}

// entryPoints lists NodePort (on the ingress node's nodeIP), LoadBalancer ingress and
// externalIP addresses of every TCP/UDP port of svc, those of one family: IPv6 with v6.
func entryPoints(svc *corev1.Service, nodeIP string, v6 bool) []entry {
	fam := func(ip string) bool {
		a, err := netip.ParseAddr(ip)
		return err == nil && a.Unmap().Is6() == v6
	}
	var out []entry
	for _, p := range svc.Spec.Ports {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		if proto != "tcp" && proto != "udp" {
			continue
		}
		target := int(p.TargetPort.IntVal)
		if target == 0 {
			target = int(p.Port)
		}
		if p.NodePort != 0 {
			out = append(out, entry{"NodePort", proto, net.JoinHostPort(nodeIP, strconv.Itoa(int(p.NodePort))), target, v6})
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" && fam(ing.IP) {
				out = append(out, entry{"LoadBalancer", proto, net.JoinHostPort(ing.IP, strconv.Itoa(int(p.Port))), target, v6})
			}
		}
		for _, ip := range svc.Spec.ExternalIPs {
			if !fam(ip) {
				continue
			}
			out = append(out, entry{"externalIP", proto, net.JoinHostPort(ip, strconv.Itoa(int(p.Port))), target, v6})
		}
	}
	return out
}

func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// dumpDebug prints what helps when the Service never came up.
func dumpDebug(l *lab.Lab, node string) {
	for _, n := range l.Nodes {
		b, _ := os.ReadFile(l.AgentLog(n.Name))
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		fmt.Printf("\n== agent log of %s (last %d lines of %s)\n%s\n", n.Name, len(lines), l.AgentLog(n.Name), strings.Join(lines, "\n"))
	}
	for _, br := range []string{"br-ex", "br-int"} {
		out, err := l.DumpFlows(node, br)
		fmt.Printf("\n== %s %s flows\n%s", node, br, out)
		if err != nil {
			fmt.Println("error:", err)
		}
	}
}

// printNodes prints each node's OVS run directory (OVS_RUNDIR for ovs-* and srcipctl), network
// namespace and agent log.
func printNodes(l *lab.Lab) {
	for _, n := range l.Nodes {
		fmt.Printf("  %s %s: OVS_RUNDIR=%s  netns %s  agent log %s\n", n.Name, n.IP, n.Dir, n.Netns, l.AgentLog(n.Name))
	}
}

// hold keeps the lab up until the signal handler tears it down.
func hold(l *lab.Lab) {
	fmt.Printf("\nlab %s kept (netns %v, dir %s)\n", l.Prefix, l.NetnsNames(), l.Dir)
	fmt.Printf("  manifests: %s (the agents re-read it on change; test/manifests/demo is not touched)\n", l.ManifestsDir)
	printNodes(l)
	ing := l.IngressNode()
	fmt.Printf("try: OVS_RUNDIR=%s bin/srcipctl status\n     OVS_RUNDIR=%s bin/srcipctl trace --from %s:40000 --to 203.0.113.100:80\n", ing.Dir, ing.Dir, l.Clients[0].IP)
	fmt.Printf("demo pid %d: Ctrl-C or kill %d tears the lab down (the exit status is the verdict's)\n", os.Getpid(), os.Getpid())
	select {}
}
