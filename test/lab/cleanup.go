package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// generatedPrefix matches prefixes New generates ("sl" + 4 hex digits).
var generatedPrefix = regexp.MustCompile(`^sl[0-9a-f]{4}$`)

// Close tears the lab down: agents, echo servers (by pid), ovs-vswitchd
// ("exit --cleanup"), ovsdb-server ("exit"), then any process still inside a
// lab netns (by pid), the netns (and with them every veth), and the lab dir.
// It is idempotent: later calls return the first call's result.
func (l *Lab) Close() error {
	l.closeOnce.Do(func() {
		start := time.Now()
		l.closeErr = l.teardown()
		l.closeTime = time.Since(start)
		l.logf("lab %s: teardown took %s (err=%v)", l.Prefix, l.closeTime.Round(time.Millisecond), l.closeErr)
	})
	return l.closeErr
}

// TeardownTime is how long Close took (0 before Close).
func (l *Lab) TeardownTime() time.Duration { return l.closeTime }

func (l *Lab) teardown() error {
	var errs []error
	if err := parallel(l.Nodes, func(n *Node) error { return l.StopAgent(n.Name) }); err != nil {
		errs = append(errs, err)
	}
	if err := parallel(l.Pods, func(p *Pod) error { return l.stopProc(p.echo, 5*time.Second) }); err != nil {
		errs = append(errs, err)
	}
	if err := parallel(l.Nodes, l.stopOVS); err != nil {
		errs = append(errs, err)
	}
	existing, err := listNetns()
	if err != nil {
		errs = append(errs, err)
	}
	if err := parallel(l.allNetns, func(ns string) error {
		if !existing[ns] {
			return nil
		}
		return removeNetns(l.logf, ns)
	}); err != nil {
		errs = append(errs, err)
	}
	if l.Dir != "" && strings.Contains(l.Dir, l.Prefix) {
		if err := os.RemoveAll(l.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (l *Lab) stopOVS(n *Node) error {
	var errs []error
	if n.VswitchdPid > 0 && pidAlive(n.VswitchdPid) {
		if _, err := l.Appctl(n.Name, "-T", "10", "-t", "ovs-vswitchd", "exit", "--cleanup"); err != nil {
			l.logf("node %s: ovs-vswitchd exit: %v", n.Name, err)
		}
		if err := waitGone(l.logf, n.VswitchdPid, n.Dir, 5*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("node %s ovs-vswitchd: %w", n.Name, err))
		}
	}
	if n.OvsdbPid > 0 && pidAlive(n.OvsdbPid) {
		if _, err := l.Appctl(n.Name, "-T", "10", "-t", "ovsdb-server", "exit"); err != nil {
			l.logf("node %s: ovsdb-server exit: %v", n.Name, err)
		}
		if err := waitGone(l.logf, n.OvsdbPid, n.Dir, 5*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("node %s ovsdb-server: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}

// waitGone waits for pid to exit; after timeout it SIGKILLs it, but only if
// its command line still mentions marker (so a recycled pid is never hit).
func waitGone(logf func(string, ...any), pid int, marker string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if !pidAlive(pid) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(cmdline(pid), marker) {
		return nil
	}
	if logf != nil {
		logf("pid %d (%s) still alive after %s: SIGKILL", pid, cmdline(pid), timeout)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		if !pidAlive(pid) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("pid %d did not exit", pid)
}

// pidAlive is true if pid exists and is not a zombie.
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] != 'Z' && s[i+2] != 'X'
}

// PidAlive reports whether pid is a live (non-zombie) process.
func PidAlive(pid int) bool { return pidAlive(pid) }

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
}

func startTime(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19] // field 22: starttime
}

// writeOwner records which process owns a lab dir, for CleanupStale.
func writeOwner(dir string) error {
	pid := os.Getpid()
	return os.WriteFile(filepath.Join(dir, "owner"), []byte(fmt.Sprintf("%d %s\n", pid, startTime(pid))), 0o644)
}

func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	return pidAlive(pid) && startTime(pid) == f[1]
}

func listNetns() (map[string]bool, error) {
	out, err := runCmd(nil, 30*time.Second, runOpts{}, "ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	m := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			m[f[0]] = true
		}
	}
	return m, nil
}

// removeNetns ends every process still inside ns (by pid: SIGTERM, then
// SIGKILL) and deletes ns; its veths go with it.
func removeNetns(logf func(string, ...any), ns string) error {
	out, err := runCmd(logf, 30*time.Second, runOpts{}, "ip", "netns", "pids", ns)
	if err == nil {
		var pids []int
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				pids = append(pids, pid)
			}
		}
		for _, pid := range pids {
			if logf != nil {
				logf("netns %s: leftover pid %d (%s): SIGTERM", ns, pid, cmdline(pid))
			}
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		for _, pid := range pids {
			deadline := time.Now().Add(3 * time.Second)
			for pidAlive(pid) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if pidAlive(pid) {
				if logf != nil {
					logf("netns %s: pid %d survived SIGTERM: SIGKILL", ns, pid)
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if _, err := runCmd(logf, 30*time.Second, runOpts{}, "ip", "netns", "del", ns); err != nil {
		return fmt.Errorf("delete netns %s: %w", ns, err)
	}
	return nil
}

// Cleanup removes everything of the lab with this prefix whether or not its
// owner is alive: processes inside its netns (by pid), the netns
// "<prefix>-*", and baseDir/<prefix> (baseDir "" = /tmp). Use it for a known
// leftover; CleanupStale finds them.
func Cleanup(prefix, baseDir string, logf func(string, ...any)) error {
	if !validPrefix(prefix) {
		return fmt.Errorf("cleanup: bad prefix %q", prefix)
	}
	if baseDir == "" {
		baseDir = "/tmp"
	}
	existing, err := listNetns()
	if err != nil {
		return err
	}
	var mine []string
	for ns := range existing {
		if strings.HasPrefix(ns, prefix+"-") {
			mine = append(mine, ns)
		}
	}
	errs := []error{parallel(mine, func(ns string) error { return removeNetns(logf, ns) })}
	errs = append(errs, os.RemoveAll(filepath.Join(baseDir, prefix)))
	return errors.Join(errs...)
}

// LiveLabs lists the labs with generated prefixes ("sl" + 4 hex: netns "slXXXX-*" or a directory
// baseDir/slXXXX, default /tmp) whose owner process (recorded at New) is alive: prefix -> owner
// pid. Those of dead owners are not listed (CleanupStale removes them).
func LiveLabs(baseDir string) (map[string]int, error) {
	if baseDir == "" {
		baseDir = "/tmp"
	}
	existing, err := listNetns()
	if err != nil {
		return nil, err
	}
	prefixes := map[string]bool{}
	for ns := range existing {
		if i := strings.IndexByte(ns, '-'); i > 0 && generatedPrefix.MatchString(ns[:i]) {
			prefixes[ns[:i]] = true
		}
	}
	if ents, err := os.ReadDir(baseDir); err == nil {
		for _, e := range ents {
			if e.IsDir() && generatedPrefix.MatchString(e.Name()) {
				prefixes[e.Name()] = true
			}
		}
	}
	live := map[string]int{}
	for p := range prefixes {
		dir := filepath.Join(baseDir, p)
		if !ownerAlive(dir) {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(dir, "owner"))
		pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
		live[p] = pid
	}
	return live, nil
}

// CleanupStale removes leftovers of crashed labs with generated prefixes
// ("sl" + 4 hex): netns "slXXXX-*" and baseDir/slXXXX whose owner process
// (recorded at New) is gone. Labs of live processes are left alone. It
// returns the prefixes it removed.
func CleanupStale(baseDir string, logf func(string, ...any)) ([]string, error) {
	if baseDir == "" {
		baseDir = "/tmp"
	}
	prefixes := map[string]bool{}
	existing, err := listNetns()
	if err != nil {
		return nil, err
	}
	for ns := range existing {
		if i := strings.IndexByte(ns, '-'); i > 0 && generatedPrefix.MatchString(ns[:i]) {
			prefixes[ns[:i]] = true
		}
	}
	if ents, err := os.ReadDir(baseDir); err == nil {
		for _, e := range ents {
			if e.IsDir() && generatedPrefix.MatchString(e.Name()) {
				prefixes[e.Name()] = true
			}
		}
	}
	var removed []string
	var errs []error
	for p := range prefixes {
		dir := filepath.Join(baseDir, p)
		if ownerAlive(dir) {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "owner")); err != nil {
			if st, err := os.Stat(dir); err == nil && time.Since(st.ModTime()) < 10*time.Second {
				continue // being created right now; owner not written yet
			}
		}
		if logf != nil {
			logf("cleanup: stale lab %s", p)
		}
		if err := Cleanup(p, baseDir, logf); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	return removed, errors.Join(errs...)
}
