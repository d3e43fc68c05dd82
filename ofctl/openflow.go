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
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/openflow"
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
	// one ovs-ofctl process per bundle; a bundle with a message that does not encode still
	// goes through ovs-ofctl as text (logged at V(2) with the reason).
	Native *Conn

	nativeBundles, ofctlBundles atomic.Uint64
}

// BundleCounts returns how many bundles Bundle applied over the native connection and how many
// through ovs-ofctl (with Native set: those with a message that did not encode), since the start.
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

// Bundle applies msgs (flows.Plan.Messages) as one atomic, ordered OpenFlow 1.5 bundle: the
// switch rejects all of it if any message fails. No messages: nothing is sent.
//
// With Native set, the messages are encoded (openflow.EncodeAll) and sent as one ATOMIC|ORDERED
// bundle over the persistent connection (Conn.apply); errors are *Error whose Stderr has the
// OpenFlow error names and the refused messages' text (Rejected), or a connection error (not
// Rejected). Without Native, or for a bundle with a message that does not encode (a group too
// large for one OpenFlow message), the messages' text goes through ovs-ofctl (BundleText).
func (o *OpenFlow) Bundle(ctx context.Context, msgs []openflow.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if o.Native == nil {
		return o.BundleText(ctx, openflow.Text(msgs))
	}
	return o.BundleEncoded(ctx, openflow.EncodeAll(msgs))
}

// BundleEncoded is Bundle with the messages already encoded (the agent's cold start encodes the
// next chunk while the switch commits the current one).
func (o *OpenFlow) BundleEncoded(ctx context.Context, e *openflow.Encoded) error {
	if len(e.Msgs) == 0 {
		return nil
	}
	log := klog.FromContext(ctx).WithValues("bridge", o.Bridge)
	if o.Native == nil || e.Err != nil {
		if e.Err != nil {
			log.V(2).Info("OpenFlow bundle goes through ovs-ofctl", "reason", e.Err.Error())
		}
		return o.BundleText(ctx, openflow.Text(e.Msgs))
	}
	if v := log.V(9); v.Enabled() {
		v.Info("OpenFlow bundle (native)", "messages", len(e.Msgs), "text", strings.Join(openflow.Text(e.Msgs), "\n"))
	}
	msgs := make([]ofMessage, len(e.Msgs))
	for i := range msgs {
		msgs[i] = ofMessage{typ: e.Types[i], body: e.Bodies[i], msg: e.Msgs[i]}
	}
	start := time.Now()
	if err := o.Native.apply(ctx, msgs); err != nil {
		return err
	}
	o.nativeBundles.Add(1)
	log.V(2).Info("Applied OpenFlow bundle", "messages", len(msgs), "path", "native", "elapsed", time.Since(start))
	return nil
}

// BundleText applies lines of an `ovs-ofctl bundle` file (ovs-ofctl(8) "bundle"; the shapes of
// openflow.Text, or any ovs-ofctl accepts) with `ovs-ofctl -O OpenFlow15 --no-names bundle
// TARGET -`: one atomic, ordered bundle. It is the fallback and debugging path; no lines: no
// process. Errors are *Error with ovs-ofctl's stderr. The bundle text is logged at V(9).
func (o *OpenFlow) BundleText(ctx context.Context, lines []string) error {
	if len(lines) == 0 {
		return nil
	}
	log := klog.FromContext(ctx).WithValues("bridge", o.Bridge)
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

// OwnedFlows counts the bridge's flows whose cookie carries the agent's owner byte (`ovs-ofctl
// dump-aggregate TARGET cookie=0x5c00000000000000/0xff00000000000000`, its flow_count): one
// small reply whatever the number of flows. A restarted ovs-vswitchd has none.
func (o *OpenFlow) OwnedFlows(ctx context.Context) (int, error) {
	out, err := o.output(ctx, o.ofctl("dump-aggregate", o.Target, ownedCookieFilter))
	if err != nil {
		return 0, err
	}
	return parseFlowCount(out)
}

var flowCountRE = regexp.MustCompile(`\bflow_count=(\d+)`)

// parseFlowCount reads flow_count=N of a dump-aggregate reply.
func parseFlowCount(out string) (int, error) {
	m := flowCountRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("dump-aggregate: no flow_count in %q", strings.TrimSpace(out))
	}
	return strconv.Atoi(m[1])
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

// Version returns ovs-vswitchd's version as `ovs-appctl -t CTL version` prints it (the first
// line, e.g. "ovs-vswitchd (Open vSwitch) 3.1.0"; ovs-appctl(8)).
func (o *OpenFlow) Version(ctx context.Context) (string, error) {
	ctl, err := o.appctlTarget()
	if err != nil {
		return "", err
	}
	out, err := o.output(ctx, []string{o.appctl(), "-t", ctl, "version"})
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return line, nil
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
