package cluster

// TestEgressFailoverUnderLoad runs last in this package (its file name sorts after the others):
// its ovs-vswitchd faults take the gateway nodes' datapaths down for seconds, so the kubelet's
// liveness probes of every pod on those nodes fail and restart them (TestAgentRestart asserts
// that nothing was restarted).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovs-srcip/ovs-srcip/agent"
	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	egressclient "github.com/ovs-srcip/ovs-srcip/client/clientset/versioned"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// The agents' gateway-election settings (main_test.go gives them to every agent).
const (
	leaseNS       = "default"
	leaseDuration = 3 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

const (
	foEgressIP = "10.89.0.50" // in the nodes' subnet: the gateway answers ARP for it on br-ex
	foPort     = "9091"       // the outside server (TCP and UDP) in the client netns
	foStreams  = 5
	// foNewConnBound bounds the time from a fault to the first new connection through the new
	// gateway: the Lease expires leaseDuration after its last renewal (at most retryPeriod
	// before the fault), a candidate takes it within one retryPeriod, plus 5 s for the new
	// gateway's sync and gratuitous ARP, the pod node's switch of tunnel and the connection
	// itself on the shared 2-core machine. A SIGTERMed agent releases the Lease at once.
	foNewConnBound = leaseDuration + 2*retryPeriod + 5*time.Second
)

var foCandidates = []string{"node2", "node3"}

// foFault is one fault of the active gateway.
type foFault struct {
	name     string
	vswitchd bool // the fault is ovs-vswitchd's, else the agent's
	sig      syscall.Signal
}

var foFaults = []foFault{
	{"agent-SIGTERM", false, syscall.SIGTERM},
	{"agent-SIGKILL", false, syscall.SIGKILL},
	{"vswitchd-SIGTERM", true, syscall.SIGTERM},
	{"vswitchd-SIGKILL", true, syscall.SIGKILL},
}

// TestEgressFailoverUnderLoad: an EgressGateway (egress IP foEgressIP, node2 and node3 eligible)
// selects a pod of a Deployment on node1, which runs 5 long TCP sessions, a UDP stream and a loop
// of new connections to a server in the lab's client netns. For each fault of the active gateway
// in turn (SIGTERM and SIGKILL of its agent, SIGTERM and SIGKILL of its ovs-vswitchd; then
// restarted, the cluster settled), it prints one FAILOVER line: the new gateway, the time from
// the fault to the first new connection through it (bounded by foNewConnBound), the new
// connections that failed, the sessions kept (5/5 required), the longest silence of each TCP
// session and of the UDP stream, and the sources the server saw (only the egress IP allowed).
func TestEgressFailoverUnderLoad(t *testing.T) {
	ctx := context.Background()
	c := theCluster
	t0 := time.Now()
	outside := c.Lab.Clients[0].IP.String() + ":" + foPort
	srvLog := startFailoverServer(t, c)

	ecs, err := egressclient.NewForConfig(c.CP.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ecs.OvsSrcipV1alpha1().EgressGateways().Create(ctx, &egressv1.EgressGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "failover"},
		Spec: egressv1.EgressGatewaySpec{
			EgressIPs: []string{foEgressIP},
			GatewayNodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: foCandidates}}},
			PodSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{"app": "egress-load"}},
			Destinations: []string{c.Lab.Clients[0].IP.String() + "/32"},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ecs.OvsSrcipV1alpha1().EgressGateways().Delete(ctx, "failover", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete the EgressGateway: %v", err)
		}
	})
	d := EchoDeployment("default", "egress-load", 1)
	d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "node1"}
	if _, err := c.Client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.AppsV1().Deployments("default").Delete(ctx, "egress-load", metav1.DeleteOptions{})
	})
	pods, err := c.WaitPodsReady(ctx, "default", "app=egress-load", 1, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pod := pods[0]
	pid, err := c.PodPid(&pod)
	if err != nil {
		t.Fatal(err)
	}
	podNet := "--net=/proc/" + strconv.Itoa(pid) + "/ns/net"
	inPod := func(args ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{podNet, c.cfg.EchoBin}, args...)...)
	}
	t.Logf("pod %s (%s on node1) selected; egress IP %s on node2 or node3; server %s (set up in %v)",
		pod.Name, pod.Status.PodIP, foEgressIP, outside, time.Since(t0).Round(time.Millisecond))

	conns := startConnLoop(inPod, outside)
	defer conns.stop()
	for _, f := range foFaults {
		active := foSettle(t, c, ecs, conns)
		kn := c.KNodes[active]
		var streams []*foStream
		for range foStreams {
			streams = append(streams, startFoStream(t, inPod, outside))
		}
		udp := inPod("udpstream", "--addr", outside, "--every", "50ms")
		udpIn, err := udp.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var udpOut strings.Builder
		udp.Stdout = &udpOut
		if err := udp.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1500 * time.Millisecond) // every stream talking

		start := time.Now()
		if f.vswitchd {
			err = kn.SignalVswitchd(f.sig)
		} else if f.sig == syscall.SIGKILL {
			err = kn.KillAgent()
		} else {
			err = kn.StopAgent()
		}
		if err != nil {
			t.Fatalf("%s of %s: %v", f.name, active, err)
		}
		// The first new connection that starts after the Lease left the old gateway and leaves
		// as the egress IP.
		var newGW string
		var moved, through time.Time
		err = lab.WaitFor(func() error {
			if moved.IsZero() {
				h := leaseHolder(ctx, c)
				if h == "" || h == active {
					return fmt.Errorf("the Lease is still %q", h)
				}
				newGW, moved = h, time.Now()
			}
			if r, ok := conns.firstOKAfter(moved); ok {
				through = r.end
				return nil
			}
			return fmt.Errorf("no new connection through %s yet", newGW)
		}, 2*foNewConnBound)
		if err != nil {
			t.Errorf("%s of %s: %v", f.name, active, err)
			through = time.Now()
		}
		took := through.Sub(start)
		// Every session has answered after that (a retransmission reached the new gateway), or
		// failed.
		_ = lab.WaitFor(func() error {
			for i, s := range streams {
				if !s.settledAfter(through) {
					return fmt.Errorf("stream %d", i)
				}
			}
			return nil
		}, 15*time.Second)
		kept := 0
		var gaps []string
		var srcs []string
		for i, s := range streams {
			ok, gap, ss, err := s.result(through)
			if ok {
				kept++
			} else {
				t.Logf("%s: TCP session %d lost: %v", f.name, i, err)
			}
			gaps = append(gaps, gap.Round(10*time.Millisecond).String())
			srcs = append(srcs, ss...)
		}
		for _, s := range streams {
			s.close()
		}
		udpIn.Close()
		if err := udp.Wait(); err != nil {
			t.Errorf("udpstream: %v", err)
		}
		var u struct {
			Sent, Received int
			MaxGapMs       int64
			Clients        []string
		}
		if err := json.Unmarshal([]byte(udpOut.String()), &u); err != nil {
			t.Errorf("udpstream printed %q: %v", udpOut.String(), err)
		}
		srcs = append(srcs, u.Clients...)
		failed := conns.failedBetween(start, through)

		// Restart what was killed.
		if f.vswitchd {
			err = kn.RestartVswitchd()
		} else {
			err = kn.StartAgent()
		}
		if err != nil {
			t.Fatalf("restart after %s of %s: %v", f.name, active, err)
		}
		t.Logf("FAILOVER fault=%s gateway=%s new-gateway=%s new-conn=%v bound=%v new-conns-failed=%d tcp-kept=%d/%d tcp-longest-silence=[%s] udp-sent=%d udp-answered=%d udp-longest-silence=%dms sources=%v",
			f.name, active, newGW, took.Round(time.Millisecond), foNewConnBound, failed, kept, foStreams, strings.Join(gaps, " "),
			u.Sent, u.Received, u.MaxGapMs, uniq(srcs))
		if took > foNewConnBound {
			t.Errorf("%s of %s: the first new connection through the new gateway after %v, bound %v", f.name, active, took, foNewConnBound)
		}
		if kept != foStreams {
			t.Errorf("%s of %s: %d/%d TCP sessions kept", f.name, active, kept, foStreams)
		}
		for _, s := range uniq(srcs) {
			if s != foEgressIP {
				t.Errorf("%s of %s: the server saw the source %s, want only the egress IP %s", f.name, active, s, foEgressIP)
			}
		}
	}
	foSettle(t, c, ecs, conns)
	conns.stop()
	// Everything the server answered (every new connection, every session's first exchange,
	// every UDP datagram) came from the egress IP.
	b, err := os.ReadFile(srvLog)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r lab.Reply
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Errorf("server log line %q: %v", l, err)
			continue
		}
		seen[r.ClientIP()]++
	}
	ok, bad := conns.counts()
	t.Logf("server answered %v (source: answers); new connections: %d answered, %d failed; test took %v",
		seen, ok, bad, time.Since(t0).Round(time.Millisecond))
	for s := range seen {
		if s != foEgressIP {
			t.Errorf("the server saw the source %s (%d answers), want only the egress IP %s", s, seen[s], foEgressIP)
		}
	}
}

// startFailoverServer runs the echo server (TCP and UDP foPort) in the client netns, logging every
// answer to the returned file, until the test ends.
func startFailoverServer(t *testing.T, c *Cluster) string {
	t.Helper()
	ns, err := c.Lab.Netns(c.Lab.Clients[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "answers.log")
	stderr := filepath.Join(c.dir, "failover-server.log")
	srv, err := c.start("failover server", stderr, "ip", "netns", "exec", ns, c.cfg.EchoBin, "serve",
		"--tcp", ":"+foPort, "--udp", ":"+foPort, "--name", "outside", "--node", "client", "--log", log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.stop(c.logf, 5*time.Second) })
	if err := lab.WaitFor(func() error {
		b, _ := os.ReadFile(stderr)
		if !strings.Contains(string(b), "ready tcp=[:"+foPort) {
			return fmt.Errorf("not ready")
		}
		return nil
	}, 10*time.Second); err != nil {
		t.Fatal("the outside server did not start")
	}
	return log
}

// leaseHolder is the holder of the egress IP's Lease ("" when none or unreadable).
func leaseHolder(ctx context.Context, c *Cluster) string {
	l, err := c.Client.CoordinationV1().Leases(leaseNS).Get(ctx, agent.LeaseName(netip.MustParseAddr(foEgressIP)), metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// foSettle waits until the cluster is settled (every node Ready, every agent ready, the Lease
// held by an eligible node that the EgressGateway's status names, Ready, and a new connection
// from the pod through it) and returns the active gateway.
func foSettle(t *testing.T, c *Cluster, ecs egressclient.Interface, conns *connLoop) string {
	t.Helper()
	ctx := context.Background()
	var active string
	// since is when the Lease and the status first agreed on active: the connection that
	// proves the path must have started after it. (It cannot be the time of each poll: a
	// record is only added once its connection ended, so no record ever starts after "now".)
	var since time.Time
	var sinceGW string
	if err := lab.WaitFor(func() error {
		for _, n := range c.Lab.Nodes {
			node, err := c.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ready := false
			for _, cd := range node.Status.Conditions {
				ready = ready || (cd.Type == "Ready" && cd.Status == "True")
			}
			if !ready {
				return fmt.Errorf("node %s not Ready", n.Name)
			}
			if _, err := c.KNodes[n.Name].Exec("curl", "-sf", "-m", "2", "http://127.0.0.1:9464/readyz"); err != nil {
				return fmt.Errorf("agent of %s not ready: %v", n.Name, err)
			}
		}
		g, err := ecs.OvsSrcipV1alpha1().EgressGateways().Get(ctx, "failover", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(g.Status.ActiveGateways) != 1 || !meta.IsStatusConditionTrue(g.Status.Conditions, egressv1.ConditionReady) {
			return fmt.Errorf("status %+v", g.Status)
		}
		active = g.Status.ActiveGateways[0].Node
		if h := leaseHolder(ctx, c); h != active || !slices.Contains(foCandidates, h) {
			since = time.Time{}
			return fmt.Errorf("Lease holder %q, status says %s", h, active)
		}
		if since.IsZero() || sinceGW != active {
			since, sinceGW = time.Now(), active
		}
		if _, ok := conns.firstOKAfter(since); !ok {
			return fmt.Errorf("no new connection through the egress IP via %s since %s (last: %s)",
				active, since.Format("15:04:05.000"), conns.last())
		}
		return nil
	}, 60*time.Second); err != nil {
		t.Fatalf("cluster not settled: %v", err)
	}
	return active
}

// connLoop makes one new TCP connection after the other from the pod (echo get, 1 s timeout,
// 100 ms apart) and records each.
type connLoop struct {
	mu   sync.Mutex
	recs []connRec
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

type connRec struct {
	start, end time.Time
	src        string // "" when it failed
}

func startConnLoop(inPod func(...string) *exec.Cmd, addr string) *connLoop {
	l := &connLoop{done: make(chan struct{})}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			select {
			case <-l.done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			r := connRec{start: time.Now()}
			out, err := inPod("get", "--proto", "tcp", "--addr", addr, "--timeout", "1s").Output()
			var rep lab.Reply
			if err == nil && json.Unmarshal([]byte(strings.TrimSpace(string(out))), &rep) == nil {
				r.src = rep.ClientIP()
			}
			r.end = time.Now()
			l.mu.Lock()
			l.recs = append(l.recs, r)
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *connLoop) stop() { l.once.Do(func() { close(l.done) }); l.wg.Wait() }

// firstOKAfter is the first connection started after t that left as the egress IP.
func (l *connLoop) firstOKAfter(t time.Time) (connRec, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.start.After(t) && r.src == foEgressIP {
			return r, true
		}
	}
	return connRec{}, false
}

// failedBetween counts the connections started between a and b that failed (or left with
// another source).
// last describes the newest connection (its start and the source the server saw, or failed).
func (l *connLoop) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recs) == 0 {
		return "none made"
	}
	r := l.recs[len(l.recs)-1]
	src := r.src
	if src == "" {
		src = "failed"
	}
	return fmt.Sprintf("started %s, %s, source %s", r.start.Format("15:04:05.000"), r.end.Sub(r.start).Round(time.Millisecond), src)
}

func (l *connLoop) failedBetween(a, b time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.recs {
		if r.start.After(a) && r.start.Before(b) && r.src != foEgressIP {
			n++
		}
	}
	return n
}

func (l *connLoop) counts() (ok, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.src == foEgressIP {
			ok++
		} else {
			failed++
		}
	}
	return ok, failed
}

// foStream is one long TCP session from the pod (echo stream), one exchange every 200 ms.
type foStream struct {
	cmd *exec.Cmd
	st  *lab.Stream

	mu      sync.Mutex
	err     error
	closed  bool
	stopped chan struct{}
}

func startFoStream(t *testing.T, inPod func(...string) *exec.Cmd, addr string) *foStream {
	t.Helper()
	cmd := inPod("stream", "--addr", addr, "--timeout", "30s")
	st, err := lab.StartStream(cmd, 4)
	if err != nil {
		t.Fatal(err)
	}
	s := &foStream{cmd: cmd, st: st, stopped: make(chan struct{})}
	t.Cleanup(s.close)
	if _, err := st.Next(); err != nil {
		t.Fatalf("TCP session not established: %v", err)
	}
	go s.loop()
	return s
}

func (s *foStream) loop() {
	defer close(s.stopped)
	for {
		time.Sleep(200 * time.Millisecond)
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return
		}
		if _, err := s.st.Exchange(); err != nil {
			s.mu.Lock()
			if !s.closed {
				s.err = err
			}
			s.mu.Unlock()
			return
		}
	}
}

// settledAfter reports whether the session answered after t or failed.
func (s *foStream) settledAfter(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil || s.st.Log().Last.After(t)
}

// result reports whether the session answered after t and never failed, its longest silence and
// the sources the server saw on it.
func (s *foStream) result(t time.Time) (kept bool, gap time.Duration, srcs []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	log := s.st.Log()
	return s.err == nil && log.Last.After(t), log.MaxGap, log.Sources(), s.err
}

func (s *foStream) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.st.CloseStdin()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func uniq(ss []string) []string {
	m := map[string]bool{}
	for _, s := range ss {
		m[s] = true
	}
	out := make([]string, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
