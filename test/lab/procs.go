package lab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a long-running process the lab started itself.
type proc struct {
	name string
	cmd  *exec.Cmd
	pid  int
	done chan struct{}
	err  error // exit status, valid after done
	log  *os.File
}

func (l *Lab) startProc(name, logPath string, env []string, argv ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	fmt.Fprintf(f, "=== %s start %s: %s\n", name, time.Now().Format(time.RFC3339Nano), shellJoin(argv))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	// Own process group: a Ctrl-C to the test does not hit it before we do.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: start %s: %w", name, shellJoin(argv), err)
	}
	l.logf("started %s pid %d: %s (log %s)", name, cmd.Process.Pid, shellJoin(argv), logPath)
	p := &proc{name: name, cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{}), log: f}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM to the process (by pid), waits up to timeout, then
// SIGKILL. It returns nil once the process is gone.
func (l *Lab) stopProc(p *proc, timeout time.Duration) error {
	if p == nil || !p.running() {
		return nil
	}
	start := time.Now()
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
		l.logf("stopped %s pid %d with SIGTERM in %s (%v)", p.name, p.pid, time.Since(start).Round(time.Millisecond), p.err)
		return nil
	case <-time.After(timeout):
	}
	l.logf("%s pid %d still running %s after SIGTERM: SIGKILL", p.name, p.pid, timeout)
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s pid %d did not exit after SIGKILL", p.name, p.pid)
	}
}

func (l *Lab) startEcho(p *Pod) error {
	dir := filepath.Join(l.Dir, "pods")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, p.Namespace+"_"+p.Name)
	p.EchoLog = base + ".log"
	out := base + ".out"
	argv := []string{"ip", "netns", "exec", p.Netns, l.cfg.EchoBin, "serve", "--name", p.Name, "--node", p.NodeName, "--log", p.EchoLog}
	for _, port := range p.TCPPorts {
		argv = append(argv, "--tcp", ":"+strconv.Itoa(port))
	}
	for _, port := range p.UDPPorts {
		argv = append(argv, "--udp", ":"+strconv.Itoa(port))
	}
	pr, err := l.startProc("echo "+p.Namespace+"/"+p.Name, out, nil, argv...)
	if err != nil {
		return err
	}
	p.echo, p.EchoPid = pr, pr.pid
	// "echo serve" prints "ready" once every socket is bound.
	return WaitFor(func() error {
		if !pr.running() {
			return fmt.Errorf("echo server of %s exited: %v (see %s)", p.Name, pr.err, out)
		}
		b, _ := os.ReadFile(out)
		if !strings.Contains(string(b), "\nready") {
			return fmt.Errorf("echo server of %s not ready (see %s)", p.Name, out)
		}
		return nil
	}, 10*time.Second)
}

// AgentLog is the path of node's agent log (stdout+stderr, appended across
// restarts, each start marked by a "=== ... start" line).
func (l *Lab) AgentLog(node string) string {
	n := l.Node(node)
	if n == nil {
		return ""
	}
	return filepath.Join(n.Dir, "agent.log")
}

// AgentArgs is the agent command line StartAgent uses for node (the flag
// names are the contract with the agent).
func (l *Lab) AgentArgs(node string) ([]string, error) {
	n := l.Node(node)
	if n == nil {
		return nil, fmt.Errorf("lab: no node %q", node)
	}
	source := "--manifests=" + l.cfg.ManifestsDir
	if l.cfg.Kubeconfig != "" {
		source = "--kubeconfig=" + l.cfg.Kubeconfig
	}
	args := []string{
		"--node-name=" + n.Name,
		source,
		"--ovsdb=unix:" + n.DBSock(),
		"--ovs-rundir=" + n.Dir,
		"--bridge-ex=br-ex",
		"--bridge-int=br-int",
		"--uplink=eth0",
		// The lab's LoadBalancer and external IPs of both families (routed to the ingress node by
		// the router; test/README.md, the lab's addresses).
		"--external-ip-cidrs=203.0.113.0/24,2001:db8:0:113::/64",
		"--geneve-port=" + strconv.Itoa(l.cfg.GenevePort),
		"--v=" + strconv.Itoa(l.cfg.AgentVerbosity),
	}
	if l.cfg.Kubeconfig != "" {
		args = append(args, "--metrics-bind-address=0")
	}
	args = append(args, l.cfg.AgentArgs...)
	l.mu.Lock()
	defer l.mu.Unlock()
	return append(args, n.extraArgs...), nil
}

// SetAgentExtraArgs sets flags appended to node's agent command line from its next start (after
// Config.AgentArgs, so they win); no args: none.
func (l *Lab) SetAgentExtraArgs(node string, args ...string) error {
	n := l.Node(node)
	if n == nil {
		return fmt.Errorf("lab: no node %q", node)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n.extraArgs = append([]string(nil), args...)
	return nil
}

// StartAgent runs Config.AgentBin inside node's netns. It returns once the
// process started; use AgentRunning / WaitFor for readiness.
func (l *Lab) StartAgent(node string) error { return l.StartAgentWith(node) }

// StartAgentWith is StartAgent with extra flags after AgentArgs (a later flag
// wins, e.g. "--repair-period=0" over Config.AgentArgs' value).
func (l *Lab) StartAgentWith(node string, extra ...string) error {
	n := l.Node(node)
	if n == nil {
		return fmt.Errorf("lab: no node %q", node)
	}
	if l.cfg.AgentBin == "" {
		return errors.New("lab: Config.AgentBin not set")
	}
	bin, err := filepath.Abs(l.cfg.AgentBin)
	if err != nil {
		return err
	}
	args, _ := l.AgentArgs(node)
	l.mu.Lock()
	defer l.mu.Unlock()
	if n.agent != nil && n.agent.running() {
		return fmt.Errorf("lab: agent of %s already running (pid %d)", node, n.agent.pid)
	}
	args = append(args, extra...)
	argv := append([]string{"ip", "netns", "exec", n.Netns, bin}, args...)
	if l.cfg.Kubeconfig != "" {
		argv = append([]string{bin}, args...) // root netns: see Config.Kubeconfig
	}
	p, err := l.startProc("agent "+node, l.AgentLog(node), n.ovsEnv(), argv...)
	if err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	n.agent = p
	return nil
}

// StopAgent stops node's agent: SIGTERM, then SIGKILL after
// Config.AgentStopTimeout. No-op if it is not running.
func (l *Lab) StopAgent(node string) error {
	n := l.Node(node)
	if n == nil {
		return fmt.Errorf("lab: no node %q", node)
	}
	l.mu.Lock()
	p := n.agent
	l.mu.Unlock()
	if err := l.stopProc(p, l.cfg.AgentStopTimeout); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	return nil
}

// KillAgent SIGKILLs node's agent (by its pid), as a crash would: nothing it would do on
// SIGTERM (handing over its egress Leases) happens. No-op if it is not running.
func (l *Lab) KillAgent(node string) error {
	n := l.Node(node)
	if n == nil {
		return fmt.Errorf("lab: no node %q", node)
	}
	l.mu.Lock()
	p := n.agent
	l.mu.Unlock()
	if p == nil || !p.running() {
		return nil
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	select {
	case <-p.done:
		l.logf("killed agent %s pid %d", node, p.pid)
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("node %s: agent pid %d survived SIGKILL", node, p.pid)
	}
}

// RestartAgent is StopAgent then StartAgent.
func (l *Lab) RestartAgent(node string) error {
	if err := l.StopAgent(node); err != nil {
		return err
	}
	return l.StartAgent(node)
}

// AgentRunning reports whether node's agent process is alive; if it exited,
// err is its exit status.
func (l *Lab) AgentRunning(node string) (running bool, exitErr error) {
	n := l.Node(node)
	if n == nil {
		return false, fmt.Errorf("lab: no node %q", node)
	}
	l.mu.Lock()
	p := n.agent
	l.mu.Unlock()
	if p == nil {
		return false, nil
	}
	if p.running() {
		return true, nil
	}
	return false, p.err
}

// AgentPid is the pid of node's agent, 0 if never started.
func (l *Lab) AgentPid(node string) int {
	n := l.Node(node)
	if n == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n.agent == nil {
		return 0
	}
	return n.agent.pid
}

// StartAgents starts the agent on every node.
func (l *Lab) StartAgents() error {
	return parallel(l.Nodes, func(n *Node) error { return l.StartAgent(n.Name) })
}

// StopEcho stops a pod's echo server (e.g. to emulate a dead backend).
func (l *Lab) StopEcho(pod string) error {
	p := l.Pod(pod)
	if p == nil {
		return fmt.Errorf("lab: no pod %q", pod)
	}
	return l.stopProc(p.echo, 5*time.Second)
}
