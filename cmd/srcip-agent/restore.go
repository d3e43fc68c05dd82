package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flowsnap"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// DefaultFlowSnapshot is where the DaemonSet's agent writes its flow snapshot and flow-restore
// reads it: under /run, so that a reboot (which also takes the pods and their ports) leaves none.
const DefaultFlowSnapshot = "/run/ovs-srcip/flows.snapshot"

type restoreOptions struct {
	snapshot  string
	ovsRunDir string
	bridgeEx  string
	bridgeInt string
	nodeName  string
	watch     bool
	poll      time.Duration
	grace     time.Duration
	timeout   time.Duration
}

func newFlowRestoreCommand() *cobra.Command {
	o := restoreOptions{}
	cmd := &cobra.Command{
		Use:   "flow-restore",
		Short: "replay the agent's flow snapshot into bridges that lost their flows (ovs-vswitchd restarted while no agent runs)",
		Long: `flow-restore puts the agent's last applied flows and groups (its flow snapshot, written by
srcip-agent --flow-snapshot) back into br-int and br-ex when they hold none of the agent's flows:
after an ovs-vswitchd restart (a crash, an upgrade) br-ex (fail_mode=secure) forwards nothing,
not even the node's own traffic to its API server. Each bridge's part is one atomic bundle.
A missing snapshot, one that is corrupt (version, checksum), of another node or of another
boot, or one that Open vSwitch rejects is not used: br-ex then gets the base flow
(table 0, priority 0, NORMAL: the node's own traffic between the NIC and br-ex), so that the
node reaches its API server and the agent can start; the agent then reconciles by cookie as
usual. A bridge that holds any flow of the agent is left alone.

Without --watch it restores once and exits. With --watch (the DaemonSet's flow-restore container)
it restores at start and after every ovs-vswitchd restart (the pidfile in --ovs-rundir changes),
each time after --agent-grace, so that a running agent replays first (docs/node-recovery.md).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runRestore(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.snapshot, "snapshot", DefaultFlowSnapshot, "the agent's flow snapshot (its --flow-snapshot)")
	f.StringVar(&o.ovsRunDir, "ovs-rundir", ofctl.DefaultRunDir, "OVS run directory: the bridges' unix:<rundir>/<bridge>.mgmt and ovs-vswitchd.pid")
	f.StringVar(&o.bridgeEx, "bridge-ex", "br-ex", "the external bridge: gets the base flow when the snapshot cannot be used")
	f.StringVar(&o.bridgeInt, "bridge-int", "br-int", "the integration bridge")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "refuse a snapshot of another node (default $NODE_NAME; empty: no check)")
	f.BoolVar(&o.watch, "watch", false, "keep running: restore at start and after every ovs-vswitchd restart")
	f.DurationVar(&o.poll, "poll-interval", time.Second, "how often --watch reads ovs-vswitchd's pidfile, and the retry period while Open vSwitch cannot be reached")
	f.DurationVar(&o.grace, "agent-grace", 3*time.Second, "with --watch: wait this long after a restart before looking, so that a running agent replays its flows first")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "without --watch: give up when Open vSwitch cannot be reached for this long")
	addKlogFlags(f)
	return cmd
}

func runRestore(ctx context.Context, o restoreOptions) error {
	logger := klog.FromContext(ctx)
	target := func(br string) flowsnap.NamedTarget {
		return flowsnap.NamedTarget{Name: br, Target: ofctl.NewOpenFlow(br, ofctl.MgmtTarget(o.ovsRunDir, br))}
	}
	restore := func() error {
		cfg := flowsnap.RestoreConfig{
			Path: o.snapshot, Node: o.nodeName, BootID: flowsnap.ReadBootID(),
			Bridges:    []flowsnap.NamedTarget{target(o.bridgeInt), target(o.bridgeEx)},
			BaseBridge: o.bridgeEx,
			Rejected: func(err error) bool {
				var e *ofctl.Error
				return errors.As(err, &e) && e.Rejected()
			},
		}
		outs, err := flowsnap.Restore(ctx, cfg)
		for _, out := range outs {
			logger.Info("Flow restore", "bridge", out.Bridge, "action", out.Action, "lines", out.Lines, "reason", out.Reason)
		}
		return err
	}
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !o.watch {
		deadline := time.Now().Add(o.timeout)
		for {
			err := restore()
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("flow-restore: Open vSwitch not reachable for %v: %w", o.timeout, err)
			}
			logger.Info("Open vSwitch not reachable yet; retrying", "err", err.Error())
			if !sleep(o.poll) {
				return ctx.Err()
			}
		}
	}
	restarts := ofctl.WatchVswitchd(ctx, o.ovsRunDir, o.poll)
	logger.Info("Watching ovs-vswitchd for restarts", "rundir", o.ovsRunDir, "snapshot", o.snapshot, "agentGrace", o.grace)
	pending := true // at start: the switch may have restarted while this container was not running
	for {
		var retry <-chan time.Time
		if pending {
			if !sleep(o.grace) {
				return nil
			}
			if err := restore(); err != nil {
				logger.Info("Open vSwitch not reachable; retrying", "err", err.Error())
				retry = time.After(o.poll)
			} else {
				pending = false
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-restarts:
			if !ok {
				return nil
			}
			pending = true
		case <-retry:
		}
	}
}
