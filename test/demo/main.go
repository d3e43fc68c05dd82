// Command demo builds the lab from manifests, starts srcip-agent on every
// node, and shows where each request to an opted-in Service went and which
// client address the backend saw:
//
//	go run ./test/demo --agent /tmp/srcip-agent --echo /tmp/echo --manifests test/manifests/demo
//
// It exits non-zero if a request failed, a backend saw an address other than
// the client's, or an answer came from an address other than the one asked.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

type entry struct {
	kind  string // NodePort, LoadBalancer, externalIP
	proto string // tcp, udp
	addr  string // IP:port
}

func main() {
	os.Exit(run())
}

func run() int {
	agent := flag.String("agent", "", "srcip-agent binary (required)")
	echo := flag.String("echo", "", "test/echo binary (default: built into a temp dir)")
	manifests := flag.String("manifests", "test/manifests/demo", "manifests directory")
	service := flag.String("service", "demo/web", "namespace/name of the opted-in Service to exercise")
	n := flag.Int("n", 9, "TCP requests per entry point")
	nUDP := flag.Int("udp", 3, "UDP requests per entry point")
	wait := flag.Duration("wait", 60*time.Second, "how long to wait for the Service to work")
	verbose := flag.Bool("v", false, "log every command the lab runs")
	keep := flag.Bool("keep", false, "leave the lab running until Ctrl-C (for poking around)")
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
	if *echo == "" {
		dir, err := os.MkdirTemp("", "demo-echo")
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			return 1
		}
		defer os.RemoveAll(dir)
		*echo = filepath.Join(dir, "echo")
		if out, err := exec.Command("go", "build", "-o", *echo, "github.com/ovs-srcip/ovs-srcip/test/echo").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: build echo: %v\n%s", err, out)
			return 1
		}
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
	l, err := lab.New(lab.Config{ManifestsDir: mdir, AgentBin: *agent, EchoBin: *echo, Logf: logf})
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
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Fprintln(os.Stderr, "demo: interrupted, tearing down")
		closeLab()
		os.Exit(130)
	}()
	fmt.Printf("lab %s: %d nodes, %d pods, built in %s (dir %s)\n", l.Prefix, len(l.Nodes), len(l.Pods), l.SetupTime.Round(time.Millisecond), l.Dir)
	printNodes(l)

	ns, name, _ := strings.Cut(*service, "/")
	svc := l.Manifests.Service(ns, name)
	if svc == nil {
		fmt.Fprintf(os.Stderr, "demo: Service %s not in %s\n", *service, mdir)
		return 1
	}
	ingress := l.IngressNode()
	client := l.Clients[0]
	entries := entryPoints(svc, ingress.IP.String())
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
		if *keep {
			hold(l)
		}
		return 1
	}
	fmt.Printf("setup: lab %s + agents until every entry point answered %s = %s total\n",
		l.SetupTime.Round(time.Millisecond), time.Since(t1).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tENTRY\tPROTO\tADDRESS\tBACKEND POD\tPOD NODE\tCLIENT SEEN BY BACKEND\tANSWER FROM\tOK")
	bad, i := 0, 0
	backends := map[string]int{}
	for _, e := range entries {
		count := *n
		if e.proto == "udp" {
			count = *nUDP
		}
		for k := 0; k < count; k++ {
			i++
			r, err := l.Request(client.Name, e.proto, e.addr)
			if err != nil {
				bad++
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t-\t-\t-\t-\tFAIL: %v\n", i, e.kind, e.proto, e.addr, oneLine(err))
				continue
			}
			backends[r.Pod]++
			var why []string
			if r.ClientIP() != client.IP.String() {
				why = append(why, "backend saw "+r.ClientIP()+", want "+client.IP.String())
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
	fmt.Printf("backends hit: %v\n", backends)

	flows, err := l.DumpFlows(ingress.Name, "br-ex", "cookie=0x5c00000000000000/0xff00000000000000")
	fmt.Printf("\n== %s br-ex flows with cookie 0x5c... (ovs-ofctl -O OpenFlow15 dump-flows br-ex cookie=0x5c00000000000000/0xff00000000000000)\n%s", ingress.Name, flows)
	if err != nil {
		fmt.Println("error:", err)
	}
	for _, br := range []string{"br-ex", "br-int"} {
		groups, err := l.DumpGroups(ingress.Name, br)
		fmt.Printf("\n== %s %s groups\n%s", ingress.Name, br, groups)
		if err != nil {
			fmt.Println("error:", err)
		}
	}

	if *keep {
		hold(l)
	}
	if bad > 0 {
		fmt.Printf("\nFAIL: %d of %d requests failed or were wrong\n", bad, i)
		return 1
	}
	fmt.Printf("\nPASS: %d requests, every backend saw %s, every answer came from the address asked\n", i, client.IP)
	return 0
}

// entryPoints lists NodePort (on the ingress node), LoadBalancer ingress and
// externalIP addresses of every TCP/UDP port of svc.
func entryPoints(svc *corev1.Service, nodeIP string) []entry {
	var out []entry
	for _, p := range svc.Spec.Ports {
		proto := strings.ToLower(string(p.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		if proto != "tcp" && proto != "udp" {
			continue
		}
		if p.NodePort != 0 {
			out = append(out, entry{"NodePort", proto, net.JoinHostPort(nodeIP, strconv.Itoa(int(p.NodePort)))})
		}
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				out = append(out, entry{"LoadBalancer", proto, net.JoinHostPort(ing.IP, strconv.Itoa(int(p.Port)))})
			}
		}
		for _, ip := range svc.Spec.ExternalIPs {
			out = append(out, entry{"externalIP", proto, net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))})
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
	fmt.Printf("\nlab %s kept (netns %v, dir %s); Ctrl-C or SIGTERM to tear down\n", l.Prefix, l.NetnsNames(), l.Dir)
	printNodes(l)
	ing := l.IngressNode()
	fmt.Printf("try: OVS_RUNDIR=%s bin/srcipctl status\n     OVS_RUNDIR=%s bin/srcipctl trace --from %s:40000 --to 203.0.113.100:80\n", ing.Dir, ing.Dir, l.Clients[0].IP)
	select {}
}
