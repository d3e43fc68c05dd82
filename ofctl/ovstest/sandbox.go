// Package ovstest starts a private, throw-away Open vSwitch (ovsdb-server and ovs-vswitchd
// with the userspace "dummy" datapath) for tests. It needs no kernel module and no network
// namespace; it does need the OVS binaries, and a test using it fails when they are missing. The
// one skip is asked for: under `go test -short` (make check, the pure tiers) StartDummy skips
// the test.
package ovstest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// SchemaPath is the Open_vSwitch database schema of Debian's openvswitch-common.
const SchemaPath = "/usr/share/openvswitch/vswitch.ovsschema"

// Sandbox is one private OVS instance. All its files (database, sockets, pidfiles, logs) live
// in RunDir, which is also its OVS_RUNDIR, OVS_DBDIR and OVS_LOGDIR.
type Sandbox struct {
	// RunDir is the instance's directory (short: unix socket paths must stay under 108 bytes).
	RunDir string
	// DBSock is the path of ovsdb-server's socket; the libovsdb/ovs-vsctl endpoint is
	// "unix:"+DBSock (see Endpoint).
	DBSock string
	// VswitchdCtl is ovs-vswitchd's control socket (ovs-appctl -t VswitchdCtl).
	VswitchdCtl string
	// OvsdbCtl is ovsdb-server's control socket.
	OvsdbCtl string

	closeOnce sync.Once
	t         testing.TB
}

// StartDummy starts ovsdb-server (with a fresh database from SchemaPath) and
// `ovs-vswitchd --enable-dummy=override --disable-system` in a new temp directory, and stops
// both in t.Cleanup (through their control sockets; a daemon that does not exit within 5 s is
// killed by pid). It fails the test when a binary is missing or a daemon does not start, and
// skips it under -short (testing.Short: make check runs the tiers that need no OVS).
func StartDummy(t testing.TB) *Sandbox {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this test needs a private Open vSwitch (ovstest.StartDummy)")
	}
	for _, bin := range []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-appctl", "ovs-ofctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("Open vSwitch is required for this test: %v", err)
		}
	}
	// Not t.TempDir(): its path can exceed the 107-byte limit of unix socket paths.
	dir, err := os.MkdirTemp("", "ovs")
	if err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{
		RunDir:   dir,
		DBSock:   filepath.Join(dir, "db.sock"),
		OvsdbCtl: filepath.Join(dir, "ovsdb-server.ctl"),
		t:        t,
	}
	t.Cleanup(s.Close)
	db := filepath.Join(dir, "conf.db")
	s.Run(t, "ovsdb-tool", "create", db, SchemaPath)
	s.StartOVSDB(t)
	s.Run(t, "ovs-vsctl", "--db=unix:"+s.DBSock, "--no-wait", "init")
	s.StartVswitchd(t)
	return s
}

// Endpoint returns the OVSDB endpoint, "unix:"+DBSock.
func (s *Sandbox) Endpoint() string { return "unix:" + s.DBSock }

// MgmtTarget returns the ovs-ofctl target of bridge: "unix:<RunDir>/<bridge>.mgmt".
func (s *Sandbox) MgmtTarget(bridge string) string {
	return "unix:" + filepath.Join(s.RunDir, bridge+".mgmt")
}

// Env returns the environment OVS commands of this sandbox run with.
func (s *Sandbox) Env() []string {
	return append(os.Environ(), "OVS_RUNDIR="+s.RunDir, "OVS_DBDIR="+s.RunDir,
		"OVS_LOGDIR="+s.RunDir, "OVS_SYSCONFDIR="+s.RunDir)
}

// Run runs an OVS command in the sandbox's environment and returns its standard output; a
// failure fails the test with the command's standard error.
func (s *Sandbox) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := s.run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (s *Sandbox) run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = s.Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// Vsctl runs ovs-vsctl against the sandbox's database (waiting for ovs-vswitchd to apply).
func (s *Sandbox) Vsctl(t testing.TB, args ...string) string {
	t.Helper()
	return s.Run(t, "ovs-vsctl", append([]string{"--db=unix:" + s.DBSock, "--timeout=30"}, args...)...)
}

// AddBridge creates bridge name with datapath_type=dummy, fail_mode=secure, protocols
// OpenFlow10/13/15, and one port of type dummy per name in ports (e.g. the uplink "eth0").
func (s *Sandbox) AddBridge(t testing.TB, name string, ports ...string) {
	t.Helper()
	args := []string{"add-br", name, "--", "set", "bridge", name, "datapath_type=dummy",
		"fail_mode=secure", "protocols=OpenFlow10,OpenFlow13,OpenFlow15"}
	for _, p := range ports {
		args = append(args, "--", "add-port", name, p, "--", "set", "interface", p, "type=dummy")
	}
	s.Vsctl(t, args...)
}

// StartOVSDB starts ovsdb-server on the sandbox's database (again, after StopOVSDB).
func (s *Sandbox) StartOVSDB(t testing.TB) {
	t.Helper()
	s.Run(t, "ovsdb-server", filepath.Join(s.RunDir, "conf.db"),
		"--remote=punix:"+s.DBSock, "--unixctl="+s.OvsdbCtl,
		"--pidfile="+filepath.Join(s.RunDir, "ovsdb-server.pid"),
		"--log-file="+filepath.Join(s.RunDir, "ovsdb-server.log"), "-vconsole:off", "--detach")
}

// StopOVSDB stops ovsdb-server (ovs-appctl exit) and waits until it is gone.
func (s *Sandbox) StopOVSDB(t testing.TB) {
	t.Helper()
	if err := s.stop(s.OvsdbCtl, "ovsdb-server.pid"); err != nil {
		t.Fatal(err)
	}
}

// StartVswitchd starts ovs-vswitchd with the dummy datapath (again, after StopVswitchd).
func (s *Sandbox) StartVswitchd(t testing.TB) {
	t.Helper()
	s.Run(t, "ovs-vswitchd", "unix:"+s.DBSock, "--enable-dummy=override", "--disable-system",
		"--pidfile="+filepath.Join(s.RunDir, "ovs-vswitchd.pid"),
		"--log-file="+filepath.Join(s.RunDir, "ovs-vswitchd.log"), "-vconsole:off", "--detach")
	pid, err := readPid(filepath.Join(s.RunDir, "ovs-vswitchd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	s.VswitchdCtl = filepath.Join(s.RunDir, fmt.Sprintf("ovs-vswitchd.%d.ctl", pid))
}

// StopVswitchd stops ovs-vswitchd (ovs-appctl exit) and waits until it is gone. All OpenFlow
// flows and groups are lost, as on a real restart.
func (s *Sandbox) StopVswitchd(t testing.TB) {
	t.Helper()
	if err := s.stop(s.VswitchdCtl, "ovs-vswitchd.pid"); err != nil {
		t.Fatal(err)
	}
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// stop asks the daemon with control socket ctl to exit and waits for its pidfile to go (OVS
// removes it on exit); after 5 s it kills the pid it started.
func (s *Sandbox) stop(ctl, pidfile string) error {
	pidPath := filepath.Join(s.RunDir, pidfile)
	pid, err := readPid(pidPath)
	if err != nil {
		return nil // not running
	}
	_, exitErr := s.run("ovs-appctl", "-t", ctl, "exit")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(pidPath); os.IsNotExist(err) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	killErr := syscall.Kill(pid, syscall.SIGKILL)
	_ = os.Remove(pidPath) // best effort: the daemon is gone or cannot be stopped anyway
	return errors.Join(fmt.Errorf("%s (pid %d) did not exit, killed it", pidfile, pid), exitErr, killErr)
}

// Close stops ovs-vswitchd and ovsdb-server and removes RunDir; it is idempotent and registered
// with t.Cleanup by StartDummy. When the test failed, the daemons' logs are written to the test
// log first.
func (s *Sandbox) Close() {
	s.closeOnce.Do(func() {
		if s.t.Failed() {
			for _, f := range []string{"ovs-vswitchd.log", "ovsdb-server.log"} {
				if b, err := os.ReadFile(filepath.Join(s.RunDir, f)); err == nil {
					s.t.Logf("%s:\n%s", f, b)
				}
			}
		}
		if s.VswitchdCtl != "" {
			if err := s.stop(s.VswitchdCtl, "ovs-vswitchd.pid"); err != nil {
				s.t.Error(err)
			}
		}
		if err := s.stop(s.OvsdbCtl, "ovsdb-server.pid"); err != nil {
			s.t.Error(err)
		}
		_ = os.RemoveAll(s.RunDir)
	})
}

// Fixed OpenFlow port numbers of AddNodeBridges.
const (
	NodeExUplink  = 1 // br-ex: the uplink "eth0" (dummy)
	NodeExPatch   = 2 // br-ex: patch-ex-to-int
	NodeIntPatch  = 1 // br-int: patch-int-to-ex
	NodeIntTunnel = 2 // br-int: the flow-based Geneve port "srcip-geneve0"
	NodeIntPod    = 3 // br-int: first pod port (dummy), then 4, 5, ... for further pods
)

// AddNodeBridges lays out one node as the agent leaves it, with fixed port numbers (Node*
// constants): br-ex with the uplink eth0 and the patch to br-int; br-int with the patch, the
// flow-based Geneve port and one dummy port per name in pods; the patch and Geneve ports have the
// agent's default names (ofctl.Default*). Both bridges are dummy-datapath, fail_mode=secure,
// OpenFlow10/13/15. For pipeline tests that load flows and run ofproto/trace.
func (s *Sandbox) AddNodeBridges(t testing.TB, pods ...string) {
	t.Helper()
	bridge := func(name string) []string {
		return []string{"--", "add-br", name, "--", "set", "bridge", name, "datapath_type=dummy", "fail_mode=secure",
			"protocols=OpenFlow10,OpenFlow13,OpenFlow15"}
	}
	port := func(br, name string, ofport int, typ string, opts ...string) []string {
		a := []string{"--", "add-port", br, name, "--", "set", "interface", name, "type=" + typ, fmt.Sprintf("ofport_request=%d", ofport)}
		return append(a, opts...)
	}
	var args []string
	args = append(args, bridge("br-ex")...)
	args = append(args, port("br-ex", "eth0", NodeExUplink, "dummy")...)
	args = append(args, port("br-ex", ofctl.DefaultPatchExToInt, NodeExPatch, "patch", "options:peer="+ofctl.DefaultPatchIntToEx)...)
	args = append(args, bridge("br-int")...)
	args = append(args, port("br-int", ofctl.DefaultPatchIntToEx, NodeIntPatch, "patch", "options:peer="+ofctl.DefaultPatchExToInt)...)
	args = append(args, port("br-int", ofctl.DefaultGenevePort, NodeIntTunnel, "geneve", "options:remote_ip=flow", "options:key=flow")...)
	for i, p := range pods {
		args = append(args, port("br-int", p, NodeIntPod+i, "dummy")...)
	}
	s.Vsctl(t, args[1:]...)
}
