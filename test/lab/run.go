package lab

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// defaultCmdTimeout bounds every helper command the lab runs.
const defaultCmdTimeout = 60 * time.Second

type runOpts struct {
	env   []string
	stdin string
}

// run executes argv, logs it, and returns stdout. The error carries the
// command line, the exit status and stderr.
func (l *Lab) run(o runOpts, argv ...string) (string, error) {
	return runCmd(l.logf, l.cmdTimeout(), o, argv...)
}

func (l *Lab) cmdTimeout() time.Duration {
	if l.cfg.CommandTimeout > 0 {
		return l.cfg.CommandTimeout
	}
	return defaultCmdTimeout
}

func runCmd(logf func(string, ...any), timeout time.Duration, o runOpts, argv ...string) (string, error) {
	if len(argv) == 0 {
		return "", fmt.Errorf("run: empty command")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if len(o.env) > 0 {
		cmd.Env = append(os.Environ(), o.env...)
	}
	if o.stdin != "" {
		cmd.Stdin = strings.NewReader(o.stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	if logf != nil {
		envs := ""
		if len(o.env) > 0 {
			envs = strings.Join(o.env, " ") + " "
		}
		in := ""
		if o.stdin != "" {
			in = " <<<" + fmt.Sprintf("%q", o.stdin)
		}
		status := "ok"
		if err != nil {
			status = err.Error()
		}
		logf("$ %s%s%s  [%s, %s]", envs, shellJoin(argv), in, time.Since(start).Round(time.Millisecond), status)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("timed out after %s: %w", timeout, err)
		}
		return stdout.String(), fmt.Errorf("%s: %w: %s", shellJoin(argv), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func shellJoin(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t\n\"'$;&|<>()*?{}[]\\`") {
			b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}

// WaitFor polls cond every 100ms until it returns nil or timeout passes; the
// error then wraps cond's last error.
func WaitFor(cond func() error, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = cond(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("condition not met within %s: %w", timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
