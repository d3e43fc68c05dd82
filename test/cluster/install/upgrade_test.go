package install

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	egressclient "github.com/ovs-srcip/ovs-srcip/client/clientset/versioned"
	"github.com/ovs-srcip/ovs-srcip/test/cluster"
	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// TestRollingUpgrade's two builds. oldCommit is 0026617 (2026-12-02 18:45 UTC, main's landing
// that passed CI): a release with egress port blocks and the immediate takeover of a released
// egress Lease (agent/election.go nudge), so the roll stays between two releases that translate a
// selected pod's egress connections the same way (a connection opened under port blocks keeps its
// ct nat(src=POD:LO-HI) entry in ZonePod, which only an agent with port blocks looks up with nat)
// and whose candidates take a stepped-down gateway's Lease at once. The old builds before it:
// 53c0b4f, before port blocks, whose downgrade broke every running egress stream, and d665ca3,
// without the takeover, whose candidate waited for its next jittered retry (RetryPeriod 1 s, up
// to 2.2 s): TCP's retransmission backoff stretched that outage past the streams' 3 s timeout in
// one downgrade of 2026-12-03 (docs/install.md "Upgrade"). Its agent's flags are those of HEAD's
// deploy/, which installs it. The new build is this checkout's, with hack/image.sh -l: br-int's
// base flow set has one more flow, in table flows.UpgradeTestTable (58), which the old build never
// writes, so the upgrade and the downgrade each change the flow layout and the base set's cookie.
const (
	oldCommit   = "0026617c44bbaa62d886ec682f7b4a7a4956c422"
	oldTag      = "upgrade-old"
	newTag      = "upgrade-new"
	upgradeTbl  = 58
	streamEvery = 100 * time.Millisecond // one request per stream every 100 ms
	maxSilence  = time.Second            // the longest gap between two answers allowed
	// maxSilence holds for the egress streams too, whose gateway steps down when its agent is
	// replaced: the other gateway node takes the released Lease on its informer's event (seen
	// 311-345 ms of silence in both rolls with oldCommit 0026617), and TCP retransmits the
	// request lost meanwhile after about 200 ms, then 400 ms more, so an outage of up to about
	// 0.6 s stays under it. With d665ca3's retry at up to 2.2 s it did not (see oldCommit).
	ownedCookie = "cookie=0x5c00000000000000/0xff00000000000000"
	// egressIP is the EgressGateway's address (in the nodes' subnet: its gateway, node2 or node3,
	// answers ARP for it on br-ex); outsidePort is the server in the lab client's netns.
	egressIP    = "10.89.0.50"
	outsidePort = "9090"
)

// connEvery: one new connection per kind every 150 ms (SRCIP_UPGRADE_CONN_EVERY, a duration,
// changes it: a stress run opens many more).
var connEvery = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("SRCIP_UPGRADE_CONN_EVERY")); err == nil && d > 0 {
		return d
	}
	return 150 * time.Millisecond
}()

// upgradeRolls is how many upgrade-downgrade pairs TestRollingUpgrade does (SRCIP_UPGRADE_ROLLS;
// 1 by default).
func upgradeRolls() int {
	if n, err := strconv.Atoi(os.Getenv("SRCIP_UPGRADE_ROLLS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// clientPortLo..clientPortHi are the lab client's local ports for every connection it opens during
// a roll (streams and new connections to the NodePorts), each used once per run, reserved in its
// netns (net.ipv4.ip_local_reserved_ports) so that the kernel never picks one of them for another
// socket. Left to the kernel, the client reused the local port of its own live stream to node2's
// NodePort for a new connection to node1's (Linux shares an ephemeral port between connections to
// different destinations): the Service's group hashes the client ip:port, so both went to the
// same endpoint, one 4-tuple there for two connections, and the endpoint's node refused the second
// by design (flows resetCollision; docs/security.md "The same client ip:port through two ingress
// nodes to one endpoint"): "connect: connection refused", a collision of the test's client with
// itself, not something the roll did.
const clientPortLo, clientPortHi = 20000, 32767

// clientPorts hands out the lab client's local ports (clientPortLo..clientPortHi), each once.
type clientPorts struct {
	mu   sync.Mutex
	next int
}

// reserveClientPorts reserves clientPortLo..clientPortHi in the lab client's netns and returns
// their allocator.
func reserveClientPorts(t *testing.T, c *cluster.Cluster) *clientPorts {
	t.Helper()
	ns, err := c.Lab.Netns(c.Lab.Clients[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	r := fmt.Sprintf("%d-%d", clientPortLo, clientPortHi)
	if out, err := exec.Command("ip", "netns", "exec", ns, "sysctl", "-w", "net.ipv4.ip_local_reserved_ports="+r).CombinedOutput(); err != nil {
		t.Fatalf("reserve the client's ports %s: %v\n%s", r, err, out)
	}
	return &clientPorts{next: clientPortLo}
}

func (p *clientPorts) take() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	port := p.next
	if p.next++; p.next > clientPortHi {
		p.next = clientPortLo // 12768 connections later: any TIME_WAIT of the first is long over
	}
	return port
}

// diagnose, with SRCIP_UPGRADE_DIAG=DIR, captures the lab client's SYNs, resets and ICMP
// (tcpdump in its netns, DIR/client.pcap) and follows the logs of every agent pod
// (DIR/POD.log) until the test ends: what a refused or lost new connection met.
func diagnose(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	dir := os.Getenv("SRCIP_UPGRADE_DIAG")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ns, err := c.Lab.Netns(c.Lab.Clients[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	td := exec.Command("ip", "netns", "exec", ns, "tcpdump", "-i", "any", "-nn", "-U", "-s", "200", "-w", filepath.Join(dir, "client.pcap"))
	if err := td.Start(); err != nil {
		t.Fatalf("tcpdump: %v", err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		_ = td.Process.Signal(syscall.SIGTERM)
		_ = td.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		seen := map[string]bool{}
		var procs []*exec.Cmd
		defer func() {
			for _, p := range procs {
				_ = p.Process.Kill()
				_ = p.Wait()
			}
		}()
		for {
			if l, err := c.Client.CoreV1().Pods("ovs-srcip").List(ctx, metav1.ListOptions{LabelSelector: agentPods}); err == nil {
				for _, p := range l.Items {
					if seen[p.Name] || p.Status.Phase != corev1.PodRunning {
						continue
					}
					seen[p.Name] = true
					f, err := os.Create(filepath.Join(dir, p.Spec.NodeName+"-"+p.Name+".log"))
					if err != nil {
						continue
					}
					cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), "--kubeconfig", c.Kubeconfig, "-n", "ovs-srcip",
						"logs", "-f", "--all-containers", "--prefix", "--timestamps", p.Name)
					cmd.Stdout, cmd.Stderr = f, f
					if cmd.Start() == nil {
						procs = append(procs, cmd)
					}
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// serveOutside runs an echo server in the lab client's netns (the outside world of the egress
// streams) until the test ends.
func serveOutside(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ns, err := c.Lab.Netns(c.Lab.Clients[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, c.Lab.EchoBin(), "serve", "--tcp", ":"+outsidePort, "--name", "outside", "--node", "client")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "ready") {
				close(ready)
				io.Copy(io.Discard, stderr)
				return
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("outside server not ready")
	}
}

// createEgress creates the EgressGateway "upgrade" (egressIP on node2 or node3) for the pods app=job and
// waits until each of them reaches the outside server from the egress IP.
func createEgress(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	ecs, err := egressclient.NewForConfig(c.CP.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ecs.OvsSrcipV1alpha1().EgressGateways().Create(ctx, &egressv1.EgressGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "upgrade"},
		Spec: egressv1.EgressGatewaySpec{
			EgressIPs: []string{egressIP},
			// Two eligible gateways: an agent that stops steps down (its Lease released, its
			// answers removed: agent/election.go StepDown), so with one eligible node the roll of
			// its agent is an egress outage until the new agent leads again (seen: every egress
			// stream broken, 3 s without an answer); with two the other node takes over.
			GatewayNodeSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/hostname", Operator: metav1.LabelSelectorOpIn, Values: []string{"node2", "node3"}}}},
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "job"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments("app").Create(ctx, cluster.EchoDeployment("app", "job", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := c.WaitPodsReady(ctx, "app", "app=job", len(c.Lab.Nodes), 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	outside := c.Lab.Clients[0].IP.String() + ":" + outsidePort
	for _, p := range pods {
		if err := lab.WaitFor(func() error {
			r, err := c.PodRequest(&p, "tcp", outside)
			if err == nil && r.ClientIP() != egressIP {
				err = fmt.Errorf("the outside server saw %s, want the egress IP %s", r.Client, egressIP)
			}
			return err
		}, 30*time.Second); err != nil {
			t.Fatalf("egress from %s on %s: %v", p.Name, p.Spec.NodeName, err)
		}
	}
	t.Logf("egress: the 3 pods app=job reach %s from %s (gateways node2, node3)", outside, egressIP)
}

// buildUpgradeImages writes the old image (oldCommit, extracted with git archive, built by its
// own hack/image.sh) and the new one (this checkout, hack/image.sh -l) and imports both on every
// node.
func buildUpgradeImages(t *testing.T, ctx context.Context, c *cluster.Cluster) (oldCtl, newCtl string) {
	t.Helper()
	t0 := time.Now()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "old")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", root, oldCommit, src))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s (the old build; a shallow clone lacks it: git fetch --unshallow): %v\n%s", oldCommit, err, out)
	}
	dir := t.TempDir()
	oldTar, err := cluster.ImageFrom(ctx, filepath.Join(src, "hack", "image.sh"), oldTag, dir)
	if err != nil {
		t.Fatal(err)
	}
	newTar, err := cluster.ImageFrom(ctx, filepath.Join(root, "hack", "image.sh"), newTag, dir, "-l")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Lab.Nodes {
		for _, tar := range []string{oldTar, newTar} {
			if err := c.KNodes[n.Name].ImportImage(tar); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each build's srcipctl, for srcipctl diff against that build's agent (the new one with the
	// same layout switch as its agent).
	oldCtl, newCtl = filepath.Join(dir, "srcipctl-old"), filepath.Join(dir, "srcipctl-new")
	for _, b := range []struct{ dir, out, ldflags string }{
		{src, oldCtl, ""},
		{root, newCtl, "-X github.com/ovs-srcip/ovs-srcip/flows.upgradeTestLayout=1"},
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", b.ldflags, "-o", b.out, "./cmd/srcipctl")
		cmd.Dir = b.dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build srcipctl in %s: %v\n%s", b.dir, err, out)
		}
	}
	fmt.Printf("upgrade: images %s (commit %.7s) and %s (this checkout, hack/image.sh -l) built and imported in %v\n",
		oldTag, oldCommit, newTag, time.Since(t0).Round(time.Millisecond))
	return oldCtl, newCtl
}

// diffNodes runs srcipctl diff (the build's own: it renders the flow sets that build's agent
// wants and compares them with the bridges' inventory) on every node against its agent's debug
// endpoint: every owned cookie on the bridges is one the running build wants, none is missing.
func diffNodes(t *testing.T, c *cluster.Cluster, what, srcipctl string) {
	t.Helper()
	for _, n := range c.Lab.Nodes {
		argv := append(c.KNodes[n.Name].Enter(), srcipctl, "diff", "--agent", "http://127.0.0.1:9465",
			"--node-rundir", "/var/run/openvswitch", "--kubeconfig", c.Kubeconfig)
		out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		// srcipctl diff renders no egress state (which node holds an egress IP is the Leases'):
		// the flow sets of the egress IP and of the pods the EgressGateway selects (app=job)
		// differ from its rendering on every build; any other difference is a stale or missing
		// flow set.
		var other []string
		egress, sets := 0, 0
		for _, l := range strings.Split(string(out), "\n") {
			l = strings.TrimSpace(l)
			switch {
			case strings.HasPrefix(l, "br-ex: ") || strings.HasPrefix(l, "br-int: "):
				if f := strings.Fields(l); len(f) > 1 {
					k, _ := strconv.Atoi(f[1])
					sets += k
				}
			case strings.HasPrefix(l, "br-ex ") || strings.HasPrefix(l, "br-int "):
				if strings.Contains(l, " pod app/job-") || strings.Contains(l, " egress ") || strings.Contains(l, " egress-announce ") {
					egress++
				} else {
					other = append(other, l)
				}
			}
		}
		if sets == 0 || len(other) > 0 {
			t.Errorf("%s: %s: srcipctl diff: %d flow sets as desired, differences %v\n%s", what, n.Name, sets, other, out)
		}
		fmt.Printf("%s: %s: srcipctl diff (%s): %d flow sets as desired, %d other differences (%d of the egress state, which srcipctl does not render)\n",
			what, n.Name, filepath.Base(srcipctl), sets, len(other), egress)
	}
}

// upStream is one long-lived TCP connection kept by `echo stream`: a request every streamEvery,
// each answer checked (the backend pod stays the same; wantClient, when set, is the client IP
// the backend must see).
type upStream struct {
	name       string
	wantClient string
	egress     bool // through the EgressGateway (see report)
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	lines      chan string

	mu      sync.Mutex
	first   lab.Reply
	answers int
	maxGap  time.Duration
	err     error
	errAt   time.Time
	reset   bool
	done    chan struct{}
	stop    chan struct{}
}

func openStream(t *testing.T, name, wantClient string, argv ...string) (*upStream, error) {
	s := &upStream{name: name, wantClient: wantClient, lines: make(chan string, 16),
		done: make(chan struct{}), stop: make(chan struct{})}
	s.cmd = exec.Command(argv[0], append(argv[1:], "--timeout", "3s")...)
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	t.Cleanup(s.close)
	r, err := s.read()
	if err != nil {
		s.close()
		return nil, err
	}
	s.first = r
	return s, nil
}

func (s *upStream) close() {
	s.stdin.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Kill()
	}
}

func (s *upStream) read() (lab.Reply, error) {
	select {
	case l, ok := <-s.lines:
		if !ok {
			return lab.Reply{}, fmt.Errorf("echo stream exited")
		}
		if strings.HasPrefix(l, "ERROR") {
			return lab.Reply{}, fmt.Errorf("%s", l)
		}
		var r lab.Reply
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			return lab.Reply{}, fmt.Errorf("bad line %q: %w", l, err)
		}
		return r, nil
	case <-time.After(5 * time.Second):
		return lab.Reply{}, fmt.Errorf("no answer within 5s")
	}
}

// run exchanges every streamEvery until stop; the first error ends it.
func (s *upStream) run() {
	defer close(s.done)
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(streamEvery):
		}
		_, err := s.stdin.Write([]byte("\n"))
		var r lab.Reply
		if err == nil {
			r, err = s.read()
		}
		if err == nil && r.Pod != s.first.Pod {
			err = fmt.Errorf("the connection moved from %s to %s", s.first.Pod, r.Pod)
		}
		if err == nil && s.wantClient != "" && r.ClientIP() != s.wantClient {
			err = fmt.Errorf("backend saw %s, want %s", r.Client, s.wantClient)
		}
		now := time.Now()
		s.mu.Lock()
		if err != nil {
			s.err, s.errAt = err, now
			s.reset = strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe")
			if gap := now.Sub(last); gap > s.maxGap {
				s.maxGap = gap
			}
			s.mu.Unlock()
			return
		}
		if gap := now.Sub(last); gap > s.maxGap {
			s.maxGap = gap
		}
		s.answers++
		last = now
		s.mu.Unlock()
	}
}

// connLoop opens a new connection (echo get) every connEvery, round robin over tries, until stop.
type connLoop struct {
	name            string
	tried, answered int
	failures        []string
}

type tryConn struct {
	what       string
	get        func() (lab.Reply, error)
	wantClient string
}

func (l *connLoop) run(stop <-chan struct{}, tries []tryConn, wg *sync.WaitGroup) {
	defer wg.Done()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(connEvery):
		}
		tc := tries[i%len(tries)]
		l.tried++
		r, err := tc.get()
		if err == nil && tc.wantClient != "" && r.ClientIP() != tc.wantClient {
			err = fmt.Errorf("backend %s saw %s, want %s", r.Pod, r.Client, tc.wantClient)
		}
		if err != nil {
			l.failures = append(l.failures, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), tc.what, err))
			continue
		}
		l.answered++
	}
}

// flowSampler counts each node's owned flows on br-ex and br-int (dump-aggregate) every 200 ms.
type flowSampler struct {
	mu      sync.Mutex
	min     map[string]int
	max     map[string]int
	samples int
	errs    []string
	keys    []string // node/bridge, in the nodes' order
	// timeline: when (since t0, the start of the roll) a node's agent pod changed and when the
	// egress IP's Lease changed holder.
	t0       time.Time
	timeline []string
}

func (f *flowSampler) event(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := "before"
	if !f.t0.IsZero() {
		at = fmt.Sprintf("+%.1fs", time.Since(f.t0).Seconds())
	}
	f.timeline = append(f.timeline, at+" "+fmt.Sprintf(format, args...))
}

// watchEvents records agent pod changes per node and the egress Lease's holder until stop.
func (f *flowSampler) watchEvents(ctx context.Context, c *cluster.Cluster, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	pods, holder := map[string]string{}, ""
	for {
		if l, err := c.Client.CoreV1().Pods("ovs-srcip").List(ctx, metav1.ListOptions{LabelSelector: agentPods}); err == nil {
			for _, p := range l.Items {
				if p.DeletionTimestamp != nil || p.Spec.NodeName == "" || pods[p.Spec.NodeName] == p.Name {
					continue
				}
				if pods[p.Spec.NodeName] != "" || !f.t0.IsZero() {
					f.event("%s: agent pod %s (%s)", p.Spec.NodeName, p.Name, strings.TrimPrefix(p.Spec.Containers[0].Image, imageRepo+":"))
				}
				pods[p.Spec.NodeName] = p.Name
			}
		}
		if l, err := c.Client.CoordinationV1().Leases("ovs-srcip").Get(ctx, "egress-"+egressIP, metav1.GetOptions{}); err == nil {
			h := ""
			if l.Spec.HolderIdentity != nil {
				h = *l.Spec.HolderIdentity
			}
			if h != holder {
				f.event("egress Lease holder %q", h)
				holder = h
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var flowCountRE = regexp.MustCompile(`flow_count=(\d+)`)

func (f *flowSampler) run(c *cluster.Cluster, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	f.min, f.max = map[string]int{}, map[string]int{}
	for _, n := range c.Lab.Nodes {
		f.keys = append(f.keys, n.Name+"/br-ex", n.Name+"/br-int")
	}
	for {
		select {
		case <-stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		for _, n := range c.Lab.Nodes {
			for _, br := range []string{"br-ex", "br-int"} {
				out, err := c.Lab.Ofctl(n.Name, "-O", "OpenFlow15", "dump-aggregate", br, ownedCookie)
				key := n.Name + "/" + br
				f.mu.Lock()
				m := flowCountRE.FindStringSubmatch(out)
				if err != nil || m == nil {
					f.errs = append(f.errs, fmt.Sprintf("%s: %v %q", key, err, out))
					f.mu.Unlock()
					continue
				}
				v, _ := strconv.Atoi(m[1])
				if old, ok := f.min[key]; !ok || v < old {
					f.min[key] = v
				}
				if v > f.max[key] {
					f.max[key] = v
				}
				f.mu.Unlock()
			}
		}
		f.mu.Lock()
		f.samples++
		f.mu.Unlock()
	}
}

// layout is what one node's bridges hold of the agent: the base flow sets' cookies and the flows
// in the upgrade test's table.
type layout struct {
	intBase, exBase map[string]int // cookie -> flows
	upgradeFlows    int
	owned           int
}

var cookieRE = regexp.MustCompile(`cookie=(0x[0-9a-f]+),.* table=(\d+),`)

func nodeLayout(t *testing.T, c *cluster.Cluster, node string) layout {
	t.Helper()
	l := layout{intBase: map[string]int{}, exBase: map[string]int{}}
	for _, br := range []string{"br-ex", "br-int"} {
		out, err := c.Lab.DumpFlows(node, br, ownedCookie)
		if err != nil {
			t.Fatalf("%s %s: dump-flows: %v", node, br, err)
		}
		for _, line := range strings.Split(out, "\n") {
			m := cookieRE.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			l.owned++
			v, _ := strconv.ParseUint(m[1], 0, 64)
			kind := byte(v >> 48)
			switch {
			case br == "br-int" && kind == 0x02:
				l.intBase[m[1]]++
			case br == "br-ex" && kind == 0x01:
				l.exBase[m[1]]++
			}
			if br == "br-int" && m[2] == strconv.Itoa(upgradeTbl) {
				l.upgradeFlows++
			}
		}
	}
	return l
}

func onlyKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}

// rollFigures is one roll's result.
type rollFigures struct {
	streams []*upStream
	conns   []*connLoop
	flows   *flowSampler
	took    time.Duration
}

// underTraffic opens the long-lived streams, starts the new-connection loops and the flow sampler,
// runs roll, keeps the traffic 3 s more, stops everything and returns the figures.
func underTraffic(t *testing.T, ctx context.Context, c *cluster.Cluster, ports *clientPorts, what string, roll func()) rollFigures {
	t.Helper()
	client := c.Lab.Clients[0]
	pods, err := c.WaitPodsReady(ctx, "app", "app=echo", len(c.Lab.Nodes), 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := c.Client.CoreV1().Services("app").Get(ctx, "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePort := svc.Spec.Ports[0].NodePort
	cip := svc.Spec.ClusterIP
	podArgv := func(p *corev1.Pod, args ...string) func() []string {
		pid, err := c.PodPid(p)
		if err != nil {
			t.Fatal(err)
		}
		argv := append([]string{"nsenter", "--net=/proc/" + strconv.Itoa(pid) + "/ns/net", c.Lab.EchoBin()}, args...)
		return func() []string { return argv }
	}
	var fig rollFigures
	open := func(name, wantClient string, notNode string, argv func() []string) {
		var s *upStream
		if err := lab.WaitFor(func() (err error) {
			s, err = openStream(t, name, wantClient, argv()...)
			if err == nil && notNode != "" && s.first.Node == notNode {
				s.close()
				return fmt.Errorf("backend %s on the ingress node", s.first.Pod)
			}
			if err == nil && wantClient != "" && s.first.ClientIP() != wantClient {
				s.close()
				return fmt.Errorf("backend %s saw %s, want %s", s.first.Pod, s.first.Client, wantClient)
			}
			return err
		}, 30*time.Second); err != nil {
			t.Fatalf("%s: stream %s: %v", what, name, err)
		}
		s.egress = strings.Contains(name, "egress")
		fig.streams = append(fig.streams, s)
	}
	jobs, err := c.WaitPodsReady(ctx, "app", "app=job", len(c.Lab.Nodes), 120*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	outside := client.IP.String() + ":" + outsidePort
	var ingress, p2p, p2c, egress []tryConn
	for _, j := range jobs {
		open(fmt.Sprintf("pod %s -> outside via egress", j.Spec.NodeName), egressIP, "",
			podArgv(&j, "stream", "--addr", outside))
		egress = append(egress, tryConn{what: j.Name + " -> " + outside, wantClient: egressIP,
			get: func() (lab.Reply, error) { return c.PodRequest(&j, "tcp", outside) }})
	}
	for i, n := range c.Lab.Nodes {
		addr := fmt.Sprintf("%s:%d", n.IP, nodePort)
		cns, err := c.Lab.Netns(client.Name)
		if err != nil {
			t.Fatal(err)
		}
		open(fmt.Sprintf("client -> %s NodePort (backend elsewhere)", n.Name), client.IP.String(), n.Name,
			func() []string {
				return []string{"ip", "netns", "exec", cns, c.Lab.EchoBin(), "stream", "--addr", addr, "--local-port", strconv.Itoa(ports.take())}
			})
		ingress = append(ingress, tryConn{what: "client -> " + addr, wantClient: client.IP.String(),
			get: func() (lab.Reply, error) {
				p := ports.take()
				r, err := c.Lab.RequestWith(client.Name, "tcp", addr, lab.RequestOpts{LocalPort: p})
				if err != nil {
					err = fmt.Errorf("from local port %d: %w", p, err) // for matching it in SRCIP_UPGRADE_DIAG's client.pcap
				}
				return r, err
			}})
		src, dst := pods[i], pods[(i+1)%len(pods)]
		open(fmt.Sprintf("pod %s -> pod %s", src.Spec.NodeName, dst.Spec.NodeName), src.Status.PodIP, "",
			podArgv(&src, "stream", "--addr", dst.Status.PodIP+":8080"))
		open(fmt.Sprintf("pod %s -> ClusterIP", src.Spec.NodeName), "", "",
			podArgv(&src, "stream", "--addr", cip+":80"))
		p2p = append(p2p, tryConn{what: src.Name + " -> " + dst.Status.PodIP, wantClient: src.Status.PodIP,
			get: func() (lab.Reply, error) { return c.PodRequest(&src, "tcp", dst.Status.PodIP+":8080") }})
		p2c = append(p2c, tryConn{what: src.Name + " -> ClusterIP",
			get: func() (lab.Reply, error) { return c.PodRequest(&src, "tcp", cip+":80") }})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range fig.streams {
		go s.run()
	}
	for _, k := range []struct {
		name  string
		tries []tryConn
	}{{"new conns client -> NodePorts", ingress}, {"new conns pod -> pod", p2p}, {"new conns pod -> ClusterIP", p2c},
		{"new conns pod -> outside (egress)", egress}} {
		l := &connLoop{name: k.name}
		fig.conns = append(fig.conns, l)
		wg.Add(1)
		go l.run(stop, k.tries, &wg)
	}
	fig.flows = &flowSampler{}
	wg.Add(2)
	go fig.flows.run(c, stop, &wg)
	go fig.flows.watchEvents(ctx, c, stop, &wg)
	time.Sleep(2 * time.Second)
	t0 := time.Now()
	fig.flows.mu.Lock()
	fig.flows.t0 = t0
	fig.flows.mu.Unlock()
	// The wall clock of +0.0s, for matching the roll's figures with agent logs and captures.
	fmt.Printf("%s: roll started at %s UTC (+0.0s below)\n", what, t0.UTC().Format("15:04:05.000"))
	roll()
	fig.took = time.Since(t0)
	time.Sleep(3 * time.Second)
	close(stop)
	for _, s := range fig.streams {
		close(s.stop)
		<-s.done
		// Closed here, not at the end of the test: a roll's connections do not outlive it.
		s.close()
	}
	wg.Wait()
	return fig
}

// report prints the figures of one roll and fails on any reset, silence over maxSilence,
// unanswered new connection or moment without flows.
func (f rollFigures) report(t *testing.T, what string) {
	t.Helper()
	fmt.Printf("%s: rollout took %v\n", what, f.took.Round(time.Millisecond))
	resets := 0
	// SRCIP_UPGRADE_LAX_EGRESS=1 reports the egress streams' breaks and silences without failing
	// (for hunting other failures: the egress streams cross a gateway failover at each roll).
	laxEgress := os.Getenv("SRCIP_UPGRADE_LAX_EGRESS") != ""
	for _, s := range f.streams {
		s.mu.Lock()
		status := "ok"
		if s.err != nil {
			status = fmt.Sprintf("BROKEN at +%.1fs: %v", s.errAt.Sub(f.flows.t0).Seconds(), s.err)
		}
		if s.reset {
			resets++
		}
		fmt.Printf("%s: stream %-45s answers %4d, longest silence %4d ms, resets %d, %s\n",
			what, s.name, s.answers, s.maxGap.Milliseconds(), map[bool]int{true: 1}[s.reset], status)
		fail := t.Errorf
		if s.egress && laxEgress {
			fail = func(format string, args ...any) { t.Logf("SRCIP_UPGRADE_LAX_EGRESS: not failing: "+format, args...) }
		}
		if s.err != nil {
			fail("%s: stream %s: %v", what, s.name, s.err)
		}
		if s.maxGap > maxSilence {
			fail("%s: stream %s silent for %v", what, s.name, s.maxGap)
		}
		s.mu.Unlock()
	}
	for _, l := range f.conns {
		fmt.Printf("%s: %-30s answered %d/%d\n", what, l.name, l.answered, l.tried)
		if l.answered != l.tried || l.tried == 0 {
			t.Errorf("%s: %s: %d/%d answered: %v", what, l.name, l.answered, l.tried, l.failures)
		}
	}
	f.flows.mu.Lock()
	defer f.flows.mu.Unlock()
	for _, k := range f.flows.keys {
		fmt.Printf("%s: owned flows %s: min %d, max %d over %d samples\n", what, k, f.flows.min[k], f.flows.max[k], f.flows.samples)
		if f.flows.min[k] == 0 {
			t.Errorf("%s: %s had no flow of the agent at one sample", what, k)
		}
	}
	for _, e := range f.flows.timeline {
		fmt.Printf("%s: %s\n", what, e)
	}
	if len(f.flows.errs) > 0 {
		t.Errorf("%s: flow samples failed: %v", what, f.flows.errs)
	}
	fmt.Printf("%s: %d streams, %d reset\n", what, len(f.streams), resets)
}

// TestRollingUpgrade installs the old build with kubectl apply -k, rolls the DaemonSet to the
// new build (apply -k of the same overlay with the new tag: the default RollingUpdate, one node at
// a time) and back (kubectl rollout undo), each under traffic through every node: a long-lived
// TCP connection from the lab client to each node's NodePort of an annotated Service
// (externalTrafficPolicy Cluster, its backend on another node, the client IP kept), from each pod
// to a pod on the next node, from each pod to the Service's ClusterIP (kube-proxy) and from each
// pod of app=job (one per node) to a server outside through the EgressGateway "upgrade" (eligible
// gateways node2 and node3, the server sees the egress IP), one request every 100 ms each; new connections of those
// four kinds every 150 ms (round robin over the nodes); each node's flow count
// sampled every 200 ms. Asserted per roll: no stream broken (reset or timeout), none silent for
// over 1 s, every new connection answered, never a sample without flows, and after the roll each
// node holds the new build's layout only (one base flow set cookie per bridge; table 58's flow
// present after the upgrade, gone after the downgrade; the old build's br-int base cookie gone;
// srcipctl diff of the running build: no stale or missing flow set outside the egress state).
func TestRollingUpgrade(t *testing.T) {
	ctx := context.Background()
	c := startLab(t, ctx)
	oldCtl, newCtl := buildUpgradeImages(t, ctx, c)
	ports := reserveClientPorts(t, c)
	diagnose(t, ctx, c)
	vOld, vNew := imageRepo+":"+oldTag, imageRepo+":"+newTag

	for _, n := range c.Lab.Nodes {
		label(t, ctx, c, n.Name)
	}
	t0 := time.Now()
	applyKustomize(t, ctx, c, "../../../deploy/crds")
	applyKustomize(t, ctx, c, "testdata/upgrade-old")
	for _, n := range c.Lab.Nodes {
		if _, err := c.WaitNodeReady(ctx, n.Name, 120*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	waitAgentsOn(t, ctx, c, vOld)
	fmt.Printf("upgrade: installed %s with kubectl apply -k, 3 agents Ready in %v\n", vOld, time.Since(t0).Round(time.Millisecond))
	checkVersions(t, ctx, c, oldTag)

	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.AppsV1().Deployments("app").Create(ctx, cluster.EchoDeployment("app", "echo", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "echo",
			Annotations: map[string]string{"ovs-srcip.io/preserve-source-ip": "true"}},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			Selector: map[string]string{"app": "echo"},
			Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80,
				TargetPort: intstr.FromInt32(8080), NodePort: 30090}},
		},
	}
	if _, err := c.Client.CoreV1().Services("app").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podsTalk(t, ctx, c, "echo", 3, "old build installed")
	serveOutside(t, c)
	createEgress(t, ctx, c)

	before := map[string]layout{}
	for _, n := range c.Lab.Nodes {
		l := nodeLayout(t, c, n.Name)
		if len(l.intBase) != 1 || len(l.exBase) != 1 || l.upgradeFlows != 0 {
			t.Fatalf("%s on the old build: br-int base cookies %v, br-ex base cookies %v, %d flows in table %d", n.Name, l.intBase, l.exBase, l.upgradeFlows, upgradeTbl)
		}
		before[n.Name] = l
		fmt.Printf("upgrade: %s on %s: %d owned flows, br-int base cookie %s, br-ex base cookie %s, table %d empty\n",
			n.Name, oldTag, l.owned, onlyKey(l.intBase), onlyKey(l.exBase), upgradeTbl)
	}

	diffNodes(t, c, "installed", oldCtl)
	for i := 0; i < upgradeRolls(); i++ {
		up := underTraffic(t, ctx, c, ports, "upgrade", func() {
			applyKustomize(t, ctx, c, "testdata/upgrade-new")
			run(t, c, "kubectl", "-n", "ovs-srcip", "rollout", "status", "daemonset/srcip-agent", "--timeout=240s")
			waitAgentsOn(t, ctx, c, vNew)
		})
		upgraded := map[string]layout{}
		for _, n := range c.Lab.Nodes {
			l := nodeLayout(t, c, n.Name)
			upgraded[n.Name] = l
			old := onlyKey(before[n.Name].intBase)
			if len(l.intBase) != 1 || len(l.exBase) != 1 || l.upgradeFlows == 0 || l.intBase[old] != 0 {
				t.Errorf("%s after the upgrade: br-int base cookies %v (the old build's %s), br-ex base cookies %v, %d flows in table %d",
					n.Name, l.intBase, old, l.exBase, l.upgradeFlows, upgradeTbl)
			}
			fmt.Printf("upgrade: %s on %s: %d owned flows, br-int base cookie %s (old %s: 0 flows left), br-ex base cookie %s, %d flow in table %d\n",
				n.Name, newTag, l.owned, onlyKey(l.intBase), old, onlyKey(l.exBase), l.upgradeFlows, upgradeTbl)
		}
		diffNodes(t, c, "upgrade", newCtl)
		up.report(t, "upgrade")
		checkVersions(t, ctx, c, newTag)

		down := underTraffic(t, ctx, c, ports, "downgrade", func() {
			run(t, c, "kubectl", "-n", "ovs-srcip", "rollout", "undo", "daemonset/srcip-agent")
			run(t, c, "kubectl", "-n", "ovs-srcip", "rollout", "status", "daemonset/srcip-agent", "--timeout=240s")
			waitAgentsOn(t, ctx, c, vOld)
		})
		for _, n := range c.Lab.Nodes {
			l := nodeLayout(t, c, n.Name)
			nw := onlyKey(upgraded[n.Name].intBase)
			if len(l.intBase) != 1 || len(l.exBase) != 1 || l.upgradeFlows != 0 || l.intBase[nw] != 0 {
				t.Errorf("%s after the downgrade: br-int base cookies %v (the new build's %s), br-ex base cookies %v, %d flows in table %d",
					n.Name, l.intBase, nw, l.exBase, l.upgradeFlows, upgradeTbl)
			}
			fmt.Printf("downgrade: %s on %s: %d owned flows, br-int base cookie %s (new %s: 0 flows left; before the upgrade %s), table %d empty\n",
				n.Name, oldTag, l.owned, onlyKey(l.intBase), nw, onlyKey(before[n.Name].intBase), upgradeTbl)
		}
		diffNodes(t, c, "downgrade", oldCtl)
		down.report(t, "downgrade")
		checkVersions(t, ctx, c, oldTag)
	}
}
