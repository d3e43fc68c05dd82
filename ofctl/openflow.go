package ofctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// DefaultRunDir is the usual OVS run directory (OVS_RUNDIR) of a host's Open vSwitch.
const DefaultRunDir = "/var/run/openvswitch"

// Error is a failed ovs-ofctl or ovs-appctl run: the command line, its standard error (for
// ovs-ofctl bundles, the OpenFlow error of the first rejected message) and the underlying error
// (*exec.ExitError, a start failure or the context's error). Use errors.As to get it.
type Error struct {
	Cmd    []string
	Stderr string
	Err    error
}

// Error renders the command, the error and the trimmed standard error.
func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %v", strings.Join(e.Cmd, " "), e.Err)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// rejectedRE matches what ovs-ofctl prints when the switch answered a message with an OpenFlow
// error ("Error OFPGMFC_BAD_BUCKET for: ...", "OFPBFC_MSG_FAILED") or when it could not encode a
// line of the bundle file ("-:12: unknown keyword ...").
var rejectedRE = regexp.MustCompile(`\bOFP[A-Z]+_[A-Z_]+\b|(?m)^-:\d+: `)

// Rejected reports whether the command failed because of what it was asked to write (the switch
// answered with an OpenFlow error, or a line could not be encoded) rather than because it could
// not talk to the switch (no socket, timeout): retrying the same lines fails the same way.
func (e *Error) Rejected() bool { return rejectedRE.MatchString(e.Stderr) }

// MgmtTarget returns the ovs-ofctl target of bridge's management socket in runDir (OVS_RUNDIR,
// e.g. DefaultRunDir): "unix:<runDir>/<bridge>.mgmt" (ovs-vswitchd(8) "OpenFlow connections").
func MgmtTarget(runDir, bridge string) string {
	return "unix:" + filepath.Join(runDir, bridge+".mgmt")
}

// OpenFlow drives one bridge of ovs-vswitchd with ovs-ofctl(8) (OpenFlow 1.5 always) and
// ovs-appctl(8). Each method runs one process, bounded by its context. The fields may be changed
// before first use; methods do not modify them, so an OpenFlow is safe for concurrent use.
type OpenFlow struct {
	// Bridge is the bridge name (for ofproto/trace and logs).
	Bridge string
	// Target is the ovs-ofctl target: MgmtTarget(runDir, bridge) or "tcp:IP:PORT".
	Target string
	// OfctlPath and AppctlPath are the binaries (default "ovs-ofctl", "ovs-appctl" from PATH).
	OfctlPath, AppctlPath string
	// AppctlTarget is ovs-vswitchd's control socket for ovs-appctl -t. Empty: found through
	// RunDir's pidfile ovs-vswitchd.pid as <RunDir>/ovs-vswitchd.<pid>.ctl.
	AppctlTarget string
	// RunDir is OVS_RUNDIR; NewOpenFlow derives it from a unix: Target.
	RunDir string
	// Native, if set, applies bundles over its persistent OpenFlow 1.5 connection instead of
	// one ovs-ofctl process per bundle; a bundle with any line the native encoder cannot
	// translate exactly still goes through ovs-ofctl (logged at V(2) with the reason).
	Native *Conn

	nativeBundles, ofctlBundles atomic.Uint64

	// prepared holds the encodings made by Prepare, by the bundle's lines (see prepKey).
	prepMu   sync.Mutex
	prepared map[prepKey]preparedBundle
}

// prepKey names a slice of bundle lines by identity (its first element and length), not by
// content: Bundle uses an encoding only for the very slice Prepare was given.
type prepKey struct {
	first *string
	n     int
}

type preparedBundle struct {
	msgs []ofMessage
	err  error
}

// maxPrepared bounds the encodings waiting for their Bundle call (a caller that prepares and
// then does not write does not make them pile up).
const maxPrepared = 4

// Prepare encodes lines for a later Bundle call with the same slice (not a copy), so that a
// caller writing a series of bundles can encode the next one while the switch commits the
// current one (the agent's cold start). It does nothing without Native. Prepare and Bundle
// may run on different goroutines; lines must not change in between.
func (o *OpenFlow) Prepare(lines []string) {
	if o.Native == nil || len(lines) == 0 {
		return
	}
	msgs, err := translate(lines)
	o.prepMu.Lock()
	defer o.prepMu.Unlock()
	if o.prepared == nil || len(o.prepared) >= maxPrepared {
		o.prepared = map[prepKey]preparedBundle{}
	}
	o.prepared[prepKey{&lines[0], len(lines)}] = preparedBundle{msgs, err}
}

// encode returns the native encoding of lines: the one Prepare made of this slice, if any,
// else a new one.
func (o *OpenFlow) encode(lines []string) ([]ofMessage, error) {
	k := prepKey{&lines[0], len(lines)}
	o.prepMu.Lock()
	p, ok := o.prepared[k]
	delete(o.prepared, k)
	o.prepMu.Unlock()
	if ok {
		return p.msgs, p.err
	}
	return translate(lines)
}

// BundleCounts returns how many bundles Bundle applied over the native connection and how many
// through ovs-ofctl (with Native set: those it could not translate), since the start.
func (o *OpenFlow) BundleCounts() (native, ovsOfctl uint64) {
	return o.nativeBundles.Load(), o.ofctlBundles.Load()
}

// NewOpenFlow returns an OpenFlow for bridge at target (see MgmtTarget). For a
// "unix:<dir>/<file>" target RunDir is <dir>, else DefaultRunDir.
func NewOpenFlow(bridge, target string) *OpenFlow {
	o := &OpenFlow{Bridge: bridge, Target: target, OfctlPath: "ovs-ofctl", AppctlPath: "ovs-appctl", RunDir: DefaultRunDir}
	if p, ok := strings.CutPrefix(target, "unix:"); ok {
		o.RunDir = filepath.Dir(p)
	}
	return o
}

func (o *OpenFlow) ofctl(args ...string) []string {
	bin := o.OfctlPath
	if bin == "" {
		bin = "ovs-ofctl"
	}
	return append([]string{bin, "-O", "OpenFlow15"}, args...)
}

// run runs argv with stdin, streams stdout to out (if not nil) and returns an *Error on failure.
func run(ctx context.Context, argv []string, stdin io.Reader, out func(io.Reader) error) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = time.Second
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var outErr error
	if out == nil {
		cmd.Stdout = io.Discard
		outErr = cmd.Run()
	} else {
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return &Error{Cmd: argv, Err: err}
		}
		if err := cmd.Start(); err != nil {
			return &Error{Cmd: argv, Err: err}
		}
		perr := out(pipe)
		if perr != nil {
			_, _ = io.Copy(io.Discard, pipe)
		}
		// Both when the command failed and its output could not be parsed.
		outErr = errors.Join(cmd.Wait(), perr)
	}
	if outErr != nil {
		if ctx.Err() != nil {
			outErr = fmt.Errorf("%w (%w)", ctx.Err(), outErr)
		}
		return &Error{Cmd: argv, Stderr: stderr.String(), Err: outErr}
	}
	return nil
}

// Bundle applies lines with `ovs-ofctl -O OpenFlow15 --no-names bundle TARGET -` (ovs-ofctl(8)
// "bundle"): one atomic, ordered OpenFlow 1.5 bundle; the switch rejects all of it if any
// line fails. Lines have the shapes of flows.Plan.Lines: "group add_or_mod ...",
// "flow add ...", "flow modify_strict ...", "flow delete cookie=0x.../-1", "group delete group_id=N". No lines: no
// process. Errors are *Error with ovs-ofctl's stderr. The bundle text is logged at V(9).
//
// With Native set, the lines are translated to OpenFlow 1.5 messages (ofencode.go) and sent as
// one ATOMIC|ORDERED bundle over the persistent connection (Conn.apply); errors are *Error
// whose Stderr has the OpenFlow error names and the refused lines (Rejected), or a connection
// error (not Rejected). Lines it cannot translate send the whole bundle through ovs-ofctl.
func (o *OpenFlow) Bundle(ctx context.Context, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	log := klog.FromContext(ctx).WithValues("bridge", o.Bridge)
	if o.Native != nil {
		msgs, err := o.encode(lines)
		if err == nil {
			if v := log.V(9); v.Enabled() {
				v.Info("OpenFlow bundle (native)", "lines", len(lines), "text", strings.Join(lines, "\n"))
			}
			start := time.Now()
			if err := o.Native.apply(ctx, msgs); err != nil {
				return err
			}
			o.nativeBundles.Add(1)
			log.V(2).Info("Applied OpenFlow bundle", "lines", len(lines), "path", "native", "elapsed", time.Since(start))
			return nil
		}
		log.V(2).Info("OpenFlow bundle goes through ovs-ofctl", "reason", err.Error())
	}
	var buf bytes.Buffer
	for _, l := range lines {
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	if v := log.V(9); v.Enabled() {
		v.Info("OpenFlow bundle", "lines", len(lines), "text", buf.String())
	}
	start := time.Now()
	// --no-names: the agent's flow text uses numbers only, and name lookups cost ovs-ofctl
	// extra round trips (~20 ms instead of <10 ms for a small bundle on OVS 3.1).
	argv := o.ofctl("--no-names", "bundle", o.Target, "-")
	if err := run(ctx, argv, &buf, nil); err != nil {
		return err
	}
	o.ofctlBundles.Add(1)
	log.V(2).Info("Applied OpenFlow bundle", "lines", len(lines), "path", "ovs-ofctl", "elapsed", time.Since(start))
	return nil
}

// ownedCookieFilter is the dump-flows filter for flows whose cookie has the agent's owner byte.
var ownedCookieFilter = fmt.Sprintf("cookie=%#x/%#x", uint64(flows.NewCookie(0, 0)), uint64(flows.OwnerMask))

// Inventory counts the bridge's flows per owned cookie (`dump-flows --no-stats TARGET
// cookie=0x5c00000000000000/0xff00000000000000`, reading only each line's cookie= token) and
// collects the group ids that flows.OwnedGroup accepts with their bucket counts
// (`dump-group-stats TARGET`: its reply has 16 bytes per bucket, while a group description of more
// than about 744 Service buckets overflows the 16-bit length of dump-groups' reply and is printed
// as a decode error; see flows.MaxGroupBuckets). It runs two
// processes; 100k flows take about 0.6 s, almost all of it in ovs-vswitchd and ovs-ofctl.
func (o *OpenFlow) Inventory(ctx context.Context) (flows.Inventory, error) {
	inv := flows.Inventory{Flows: map[flows.Cookie]int{}, Groups: map[uint32]bool{}}
	err := run(ctx, o.ofctl("--no-names", "dump-flows", "--no-stats", o.Target, ownedCookieFilter), nil,
		func(r io.Reader) error { return scanCookies(r, inv.Flows) })
	if err != nil {
		return flows.Inventory{}, err
	}
	inv.Buckets = map[uint32]int{}
	err = run(ctx, o.ofctl("--no-names", "dump-group-stats", o.Target), nil,
		func(r io.Reader) error { return scanGroupStats(r, inv.Groups, inv.Buckets) })
	if err != nil {
		return flows.Inventory{}, err
	}
	klog.FromContext(ctx).V(2).Info("Read OpenFlow inventory", "bridge", o.Bridge,
		"cookies", len(inv.Flows), "groups", len(inv.Groups))
	return inv, nil
}

// DumpFlows returns `ovs-ofctl -O OpenFlow15 --names dump-flows TARGET [filter]`: every flow
// with statistics, table and port names, for humans (srcipctl, test failure output). filter is
// an ovs-ofctl(8) flow match such as "table=40" or "cookie=0x5c.../-1"; empty for all. Never
// parse the result to reconcile: ovs-ofctl normalises and reorders flow text.
func (o *OpenFlow) DumpFlows(ctx context.Context, filter string) (string, error) {
	args := []string{"--names", "dump-flows", o.Target}
	if filter != "" {
		args = append(args, filter)
	}
	return o.output(ctx, o.ofctl(args...))
}

// DumpGroups returns `ovs-ofctl -O OpenFlow15 dump-groups TARGET`, for humans.
func (o *OpenFlow) DumpGroups(ctx context.Context) (string, error) {
	return o.output(ctx, o.ofctl("dump-groups", o.Target))
}

// LocalMAC returns the MAC of the bridge's LOCAL port (`ovs-ofctl show`, "LOCAL(...): addr:"),
// the Ethernet destination of every frame the node receives on its uplink.
func (o *OpenFlow) LocalMAC(ctx context.Context) (net.HardwareAddr, error) {
	out, err := o.output(ctx, o.ofctl("show", o.Target))
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "LOCAL(") {
			if _, a, ok := strings.Cut(l, "addr:"); ok {
				return net.ParseMAC(strings.TrimSpace(a))
			}
		}
	}
	return nil, fmt.Errorf("%s: no LOCAL port in ovs-ofctl show", o.Bridge)
}

// Trace returns `ovs-appctl -t CTL ofproto/trace BRIDGE FLOW [--ct-next X]...` (ovs-vswitchd(8)
// "OFPROTO COMMANDS"): flow is a microflow such as "in_port=1,tcp,nw_src=...,tcp_dst=80"
// (port and table names allowed); ctNext gives one set of ct_state flags ("trk,new") per
// ct(table=N) the packet goes through. CTL is AppctlTarget, else found through RunDir.
func (o *OpenFlow) Trace(ctx context.Context, flow string, ctNext []string) (string, error) {
	ctl, err := o.appctlTarget()
	if err != nil {
		return "", err
	}
	argv := []string{o.appctl(), "-t", ctl, "ofproto/trace", o.Bridge, flow}
	for _, ct := range ctNext {
		argv = append(argv, "--ct-next", ct)
	}
	return o.output(ctx, argv)
}

// appctlTarget returns AppctlTarget or <RunDir>/ovs-vswitchd.<pid>.ctl from the pidfile.
func (o *OpenFlow) appctlTarget() (string, error) {
	if o.AppctlTarget != "" {
		return o.AppctlTarget, nil
	}
	dir := o.RunDir
	if dir == "" {
		dir = DefaultRunDir
	}
	b, err := os.ReadFile(filepath.Join(dir, "ovs-vswitchd.pid"))
	if err != nil {
		return "", fmt.Errorf("find ovs-vswitchd control socket: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return "", fmt.Errorf("find ovs-vswitchd control socket: bad pidfile: %w", err)
	}
	ctl := filepath.Join(dir, fmt.Sprintf("ovs-vswitchd.%d.ctl", pid))
	if _, err := os.Stat(ctl); err != nil {
		return "", fmt.Errorf("find ovs-vswitchd control socket: %w", err)
	}
	return ctl, nil
}

// output runs argv and returns its standard output.
func (o *OpenFlow) output(ctx context.Context, argv []string) (string, error) {
	var out []byte
	err := run(ctx, argv, nil, func(r io.Reader) error {
		var err error
		out, err = io.ReadAll(r)
		return err
	})
	if err != nil {
		return "", err
	}
	return string(out), nil
}
