// Package kube runs a real Kubernetes control plane for tests: etcd, kube-apiserver and
// kube-controller-manager (v1.37.2, etcd v3.7.0), built from the Go module proxy by
// hack/controlplane/build.sh and cached, on free loopback ports, in their own directory.
//
// There is no kubelet and no scheduler. Tests create Node objects (the EndpointSlice controller
// ignores Pods on unknown Nodes), create Pods with spec.nodeName and write their status (podIPs,
// the Ready condition) with UpdateStatus; the controller writes the EndpointSlices. Give such Pods
// terminationGracePeriodSeconds 0 (or delete them with grace period 0): with no kubelet a graceful
// deletion never completes, and namespace deletion would wait for it.
//
// The components' flags live in one place, hack/controlplane/start.sh: Start runs it with
// --prepare-only (credentials, kubeconfig, one command line per component) and then starts the
// processes itself, so that it owns them and they die with the test binary.
package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// ServiceCIDR is the control plane's Service CIDR (kube-apiserver and kube-controller-manager
// --service-cluster-ip-range in hack/controlplane/start.sh; kubeadm's default).
const ServiceCIDR = "10.96.0.0/16"

// The components, in start order.
const (
	Etcd                  = "etcd"
	APIServer             = "kube-apiserver"
	ControllerManager     = "kube-controller-manager"
	defaultReadyTimeout   = 90 * time.Second
	defaultStopGrace      = 20 * time.Second
	startAttemptsOnEADDR  = 3
	controllerStartedLine = `"Starting endpoint slice controller"`
	startHeader           = "=== starting " // + component, as start.sh writes it
)

var components = []string{Etcd, APIServer, ControllerManager}

// Options tune Start. The zero value is what most tests want.
type Options struct {
	// Dir holds the control plane's state (credentials, kubeconfig, etcd data, logs). Default: a
	// new directory under os.TempDir(), removed by Stop unless KeepDir is set.
	Dir string
	// KeepDir keeps Dir after Stop (StartT also keeps it when the test failed).
	KeepDir bool
	// BinDir holds etcd, kube-apiserver and kube-controller-manager. Default: $SRCIP_CP_BIN, else
	// the output of hack/controlplane/build.sh (a cache hit after `make controlplane`).
	BinDir string
	// Controllers sets kube-controller-manager --controllers. Default (start.sh): endpointslice,
	// endpointslice-mirroring, namespace and garbage-collector controllers.
	Controllers string
	// APIServerAddress is the address kube-apiserver binds to, advertises and has in its
	// certificate and in Kubeconfig. Default 127.0.0.1. The real-kubelet lab (test/cluster) gives
	// its root<->lab link address, which the emulated nodes reach through the lab's router.
	APIServerAddress string
	// ClusterCIDR, when set, makes kube-controller-manager allocate node pod CIDRs from it (/24
	// each); Controllers must then include node-ipam-controller.
	ClusterCIDR string
	// ServiceAccounts keeps the ServiceAccount admission plugin, so pods get projected tokens (the
	// real-kubelet lab's DaemonSet install); Controllers must then include serviceaccount-controller
	// and root-ca-certificate-publisher-controller.
	ServiceAccounts bool
	// Kubelets makes a control plane for real kubelets that the API server dials (exec, logs,
	// port-forward, attach): a kubelet client certificate (O=system:masters) for kube-apiserver,
	// kubelet serving certificates verified against the CA (sign them with KubeletServingCert),
	// the lease endpoint reconciler for the "kubernetes" Service (APIServerAddress must not be
	// loopback), and the service-account key, root CA and CSR signer for
	// kube-controller-manager. start.sh's SRCIP_CP_KUBELETS.
	Kubelets bool
	// NodePortRange is kube-apiserver --service-node-port-range, FIRST-LAST. Default 30000-32767.
	NodePortRange string
	// ReadyTimeout bounds the wait for each component. Default 90 s.
	ReadyTimeout time.Duration
	// Logf receives progress lines (StartT uses t.Logf). Default: discarded.
	Logf func(format string, args ...any)
}

// ControlPlane is a running control plane. Its methods are safe for concurrent use.
type ControlPlane struct {
	// Dir is the state directory; Kubeconfig the admin kubeconfig in it (token of a
	// system:masters user, the cluster CA embedded); LogsDir holds <component>.log.
	Dir, Kubeconfig, LogsDir string
	// RESTConfig and Client talk to the API server as that admin (QPS 200, burst 400).
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	// Loopback ports.
	EtcdPort, APIServerPort int
	// BinDir is where the binaries came from.
	BinDir string

	opts  Options
	mu    sync.Mutex
	procs map[string]*proc
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	log  *os.File
}

// StartT starts a control plane for t, fails t (never skips) if it cannot, and stops it in
// t.Cleanup. When t has failed, the tail of every log goes to t.Log and Dir is kept.
func StartT(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("kube: start control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cp.opts.KeepDir = true
			t.Logf("kube: test failed; control plane state kept in %s", cp.Dir)
			t.Log(cp.LogTails(30))
		}
		if err := cp.Stop(); err != nil {
			if onlyKilled(err) {
				// Stopped all the same: a component slow to shut down on a loaded machine (seen:
				// kube-apiserver past 10 s in a CI run beside other jobs) is no test failure.
				t.Logf("kube: stop control plane: %v", err)
			} else {
				t.Errorf("kube: stop control plane: %v", err)
			}
		}
	})
	return cp
}

// Start builds (or finds in the cache) the binaries, starts etcd, kube-apiserver and
// kube-controller-manager on free 127.0.0.1 ports and returns once the API server's /readyz is
// ok and the EndpointSlice controller has started. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	t0 := time.Now()
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = defaultReadyTimeout
	}
	if err := lab.CheckPrograms(lab.ControlPlanePrograms); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	hack, err := controlplaneDir()
	if err != nil {
		return nil, err
	}
	bin := opts.BinDir
	if bin == "" {
		bin = os.Getenv("SRCIP_CP_BIN")
	}
	if bin == "" {
		tb := time.Now()
		if bin, err = build(ctx, hack); err != nil {
			return nil, err
		}
		opts.Logf("kube: binaries in %s (build.sh %v)", bin, time.Since(tb).Round(time.Millisecond))
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "srcip-kube-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	cp := &ControlPlane{
		Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), LogsDir: filepath.Join(dir, "logs"),
		BinDir: bin, opts: opts, procs: map[string]*proc{},
	}
	for attempt := 1; ; attempt++ {
		err = cp.start(ctx, hack)
		if err == nil {
			break
		}
		inUse := cp.logsContain("address already in use")
		_ = cp.stopAll()
		if !inUse || attempt == startAttemptsOnEADDR {
			if !opts.KeepDir && opts.Dir == "" {
				_ = os.RemoveAll(dir)
			}
			return nil, fmt.Errorf("%w (state in %s)", err, dir)
		}
		opts.Logf("kube: a port was taken meanwhile, retrying with new ones")
		_ = os.RemoveAll(filepath.Join(dir, "etcd-data"))
		_ = os.RemoveAll(cp.LogsDir)
	}
	opts.Logf("kube: control plane ready in %v (etcd :%d, kube-apiserver :%d, dir %s)",
		time.Since(t0).Round(time.Millisecond), cp.EtcdPort, cp.APIServerPort, dir)
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, hack string) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	cp.EtcdPort, cp.APIServerPort = ports[0], ports[2]
	prep := exec.CommandContext(ctx, filepath.Join(hack, "start.sh"), "--prepare-only", cp.Dir)
	prep.Env = append(os.Environ(),
		"SRCIP_CP_BIN="+cp.BinDir,
		"SRCIP_CP_ETCD_PORT="+strconv.Itoa(ports[0]),
		"SRCIP_CP_ETCD_PEER_PORT="+strconv.Itoa(ports[1]),
		"SRCIP_CP_APISERVER_PORT="+strconv.Itoa(ports[2]),
	)
	if cp.opts.Controllers != "" {
		prep.Env = append(prep.Env, "SRCIP_CP_CONTROLLERS="+cp.opts.Controllers)
	}
	if cp.opts.APIServerAddress != "" {
		prep.Env = append(prep.Env, "SRCIP_CP_APISERVER_ADDRESS="+cp.opts.APIServerAddress)
	}
	if cp.opts.NodePortRange != "" {
		prep.Env = append(prep.Env, "SRCIP_CP_NODE_PORT_RANGE="+cp.opts.NodePortRange)
	}
	if cp.opts.Kubelets {
		prep.Env = append(prep.Env, "SRCIP_CP_KUBELETS=1")
	}
	if cp.opts.ServiceAccounts {
		prep.Env = append(prep.Env, "SRCIP_CP_SERVICE_ACCOUNTS=1")
	}
	if cp.opts.ClusterCIDR != "" {
		prep.Env = append(prep.Env, "SRCIP_CP_CLUSTER_CIDR="+cp.opts.ClusterCIDR)
	}
	if out, err := prep.CombinedOutput(); err != nil {
		return fmt.Errorf("start.sh --prepare-only: %v: %s", err, out)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load %s: %w", cp.Kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cp.RESTConfig, cp.Client = cfg, client
	for _, c := range components {
		if err := cp.startComponent(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// startComponent starts c from DIR/<c>.args and waits until it is ready.
func (cp *ControlPlane) startComponent(ctx context.Context, c string) error {
	t0 := time.Now()
	cp.mu.Lock()
	if p := cp.procs[c]; p != nil && !p.exited() {
		cp.mu.Unlock()
		return fmt.Errorf("%s is already running (pid %d)", c, p.cmd.Process.Pid)
	}
	argv, err := readArgs(filepath.Join(cp.Dir, c+".args"))
	if err != nil {
		cp.mu.Unlock()
		return err
	}
	if err := os.MkdirAll(cp.LogsDir, 0o755); err != nil {
		cp.mu.Unlock()
		return err
	}
	logf, err := os.OpenFile(filepath.Join(cp.LogsDir, c+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		cp.mu.Unlock()
		return err
	}
	fmt.Fprintf(logf, "%s%s at %s\n", startHeader, c, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group (a terminal's ^C reaches only the test binary); killed if the test
	// binary dies without running Stop.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		cp.mu.Unlock()
		return fmt.Errorf("start %s: %w", c, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: logf}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	cp.procs[c] = p
	// stop.sh DIR can end it too, should this process leave it behind.
	_ = os.WriteFile(filepath.Join(cp.Dir, c+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644)
	cp.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, cp.opts.ReadyTimeout)
	defer cancel()
	for {
		ok, detail := cp.ready(ctx, c)
		if ok {
			break
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited during startup (%v); log tail:\n%s", c, cmd.ProcessState, tail(filepath.Join(cp.LogsDir, c+".log"), 20))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v (%s); see %s", c, cp.opts.ReadyTimeout, detail, filepath.Join(cp.LogsDir, c+".log"))
		case <-time.After(50 * time.Millisecond):
		}
	}
	cp.opts.Logf("kube: %s ready (pid %d) in %v", c, cmd.Process.Pid, time.Since(t0).Round(time.Millisecond))
	return nil
}

func (cp *ControlPlane) ready(ctx context.Context, c string) (bool, string) {
	switch c {
	case Etcd:
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/health", cp.EtcdPort), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return bytes.Contains(body, []byte(`"health":"true"`)), string(body)
	case APIServer:
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		body, err := cp.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		if err != nil {
			return false, err.Error()
		}
		return string(body) == "ok", string(body)
	default:
		// --secure-port=0: no health endpoint; its log says when the EndpointSlice controller
		// runs. The marker is counted so that a restart waits for the new process's line.
		if !hasEndpointSlice(cp.opts.Controllers) {
			return true, ""
		}
		n := countInFile(filepath.Join(cp.LogsDir, c+".log"), controllerStartedLine)
		return n >= cp.startsOf(c), "no " + controllerStartedLine + " in its log yet"
	}
}

// startsOf counts the start headers of c's log: how many times it was started.
func (cp *ControlPlane) startsOf(c string) int {
	return countInFile(filepath.Join(cp.LogsDir, c+".log"), startHeader+c+" ")
}

// hasEndpointSlice tells whether a --controllers value (empty: start.sh's default) runs the
// EndpointSlice controller.
func hasEndpointSlice(controllers string) bool {
	if controllers == "" {
		return true
	}
	for _, c := range strings.Split(controllers, ",") {
		switch strings.TrimSpace(c) {
		case "endpointslice", "endpointslice-controller", "*":
			return true
		}
	}
	return false
}

// Stop ends the three processes (kube-controller-manager, kube-apiserver, etcd; SIGTERM, then
// SIGKILL after 20 s), by the pids it started, and removes Dir unless KeepDir. Idempotent.
func (cp *ControlPlane) Stop() error {
	t0 := time.Now()
	err := cp.stopAll()
	if !cp.opts.KeepDir {
		if rmErr := os.RemoveAll(cp.Dir); rmErr != nil && err == nil {
			err = rmErr
		}
	} else {
		_ = os.RemoveAll(filepath.Join(cp.Dir, "etcd-data"))
	}
	cp.opts.Logf("kube: control plane stopped in %v", time.Since(t0).Round(time.Millisecond))
	return err
}

func (cp *ControlPlane) stopAll() error {
	var errs []error
	for i := len(components) - 1; i >= 0; i-- {
		if err := cp.stopComponent(components[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (cp *ControlPlane) stopComponent(c string) error {
	cp.mu.Lock()
	p := cp.procs[c]
	delete(cp.procs, c)
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	defer p.log.Close()
	defer os.Remove(filepath.Join(cp.Dir, c+".pid"))
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(defaultStopGrace):
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for %v and was killed: %w", c, p.cmd.Process.Pid, defaultStopGrace, errKilled)
}

var errKilled = errors.New("SIGKILL needed")

// onlyKilled reports whether err (possibly joined) says nothing but that components needed
// SIGKILL: they are stopped all the same.
func onlyKilled(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyKilled(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, errKilled)
}

// StopAPIServer stops kube-apiserver alone (etcd and kube-controller-manager keep running).
func (cp *ControlPlane) StopAPIServer() error { return cp.stopComponent(APIServer) }

// StartAPIServer starts kube-apiserver again with the same flags and port and waits for /readyz.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	return cp.startComponent(ctx, APIServer)
}

// RestartAPIServer stops kube-apiserver and starts it again with the same flags and port; it
// returns once /readyz is ok. Clients (Client, RESTConfig) stay valid.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	t0 := time.Now()
	if err := cp.StopAPIServer(); err != nil {
		if !errors.Is(err, errKilled) {
			return err
		}
		cp.opts.Logf("kube: %v", err) // stopped all the same
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		return err
	}
	cp.opts.Logf("kube: kube-apiserver restarted in %v", time.Since(t0).Round(time.Millisecond))
	return nil
}

// PIDs returns the pid of each running component.
func (cp *ControlPlane) PIDs() map[string]int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	m := map[string]int{}
	for c, p := range cp.procs {
		if !p.exited() {
			m[c] = p.cmd.Process.Pid
		}
	}
	return m
}

// RSS returns the resident set size in bytes of each running component.
func (cp *ControlPlane) RSS() map[string]int64 {
	m := map[string]int64{}
	for c, pid := range cp.PIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				m[c] = kb * 1024
			}
		}
	}
	return m
}

// LogTails returns the last n lines of every component's log.
func (cp *ControlPlane) LogTails(n int) string {
	var b strings.Builder
	for _, c := range components {
		fmt.Fprintf(&b, "--- %s (last %d lines of %s)\n%s\n", c, n, filepath.Join(cp.LogsDir, c+".log"),
			tail(filepath.Join(cp.LogsDir, c+".log"), n))
	}
	return b.String()
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (cp *ControlPlane) logsContain(s string) bool {
	for _, c := range components {
		if countInFile(filepath.Join(cp.LogsDir, c+".log"), s) > 0 {
			return true
		}
	}
	return false
}

// controlplaneDir finds hack/controlplane: $SRCIP_CONTROLPLANE_DIR, else relative to this
// source file, else above the working directory.
func controlplaneDir() (string, error) {
	var cands []string
	if d := os.Getenv("SRCIP_CONTROLPLANE_DIR"); d != "" {
		cands = append(cands, d)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		cands = append(cands, filepath.Join(filepath.Dir(file), "..", "..", "hack", "controlplane"))
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			cands = append(cands, filepath.Join(d, "hack", "controlplane"))
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, d := range cands {
		if _, err := os.Stat(filepath.Join(d, "start.sh")); err == nil {
			return filepath.Abs(d)
		}
	}
	return "", fmt.Errorf("hack/controlplane/start.sh not found (tried %v); set SRCIP_CONTROLPLANE_DIR", cands)
}

// build runs build.sh (a cache hit after the first build) and returns the bin dir it prints.
func build(ctx context.Context, hack string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(hack, "build.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/controlplane/build.sh: %v\n%s", err, lastLines(stderr.String(), 30))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	bin := strings.TrimSpace(lines[len(lines)-1])
	if bin == "" {
		return "", fmt.Errorf("hack/controlplane/build.sh printed no directory\n%s", stderr.String())
	}
	return bin, nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 (held together while choosing).
func freePorts(n int) ([]int, error) {
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func readArgs(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	argv := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("%s: empty command line", path)
	}
	return argv, nil
}

func countInFile(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(s))
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(b), n)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
