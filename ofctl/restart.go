package ofctl

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// WatchVswitchd reports restarts of ovs-vswitchd: it polls the pidfile <runDir>/ovs-vswitchd.pid
// every interval and sends on the returned channel (capacity 1, coalescing) whenever the pid it
// holds changes. A restarted ovs-vswitchd comes back with empty flow tables and no groups while
// OVSDB shows no change at all, so this is how the agent learns that it must replay everything
// (docs/field-cases.md#c19). The channel is closed when ctx ends. A missing or unreadable pidfile counts
// as "no pid"; the first pid seen after one is a restart too.
func WatchVswitchd(ctx context.Context, runDir string, interval time.Duration) <-chan struct{} {
	out := make(chan struct{}, 1)
	path := filepath.Join(runDir, "ovs-vswitchd.pid")
	read := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	go func() {
		defer close(out)
		logger := klog.FromContext(ctx)
		last := read()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cur := read()
			if cur == last {
				continue
			}
			logger.Info("ovs-vswitchd restarted", "pidfile", path, "oldPid", last, "newPid", cur)
			last = cur
			if cur == "" {
				continue // stopped; the restart is reported when a new pid appears
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
}
