package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Defaults of Config.
const (
	DefaultFullSyncPeriod  = 60 * time.Second
	DefaultMinSyncInterval = 100 * time.Millisecond
	DefaultRetryMin        = 200 * time.Millisecond
	DefaultRetryMax        = 30 * time.Second
	// UnreadyAfterFailingPeriods: /readyz fails when syncs have been failing for longer than this
	// many full-sync periods.
	UnreadyAfterFailingPeriods = 3
)

// Config configures an Agent: the Reconciler's configuration, and what the Agent adds around it
// (the Source, the Lease election, the sync periods).
type Config struct {
	// ReconcilerConfig configures the Reconciler; NodeName, Dataplane and Bridges (flows.BrEx and
	// flows.BrInt) are required. New sets its HasSynced (the Source's and the election's) and
	// Events (the Source's EventSink), and its Election to Election below.
	ReconcilerConfig
	// Source delivers the cluster objects (required).
	Source Source
	// Election elects the egress gateways by Leases (nil: ChooseGateway). The agent starts it,
	// waits for its Lease informer, and on shutdown steps down (StepDown) before returning. It
	// shadows ReconcilerConfig.Election, which New sets to it.
	Election *LeaseElection
	// FullSyncPeriod is the drift-repair period (0: DefaultFullSyncPeriod).
	FullSyncPeriod time.Duration
	// MinSyncInterval bounds the sync rate (0: DefaultMinSyncInterval).
	MinSyncInterval time.Duration
}

func (c *Config) validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("node name is required"))
	}
	if c.Source == nil {
		errs = append(errs, errors.New("a state source is required"))
	}
	if c.Dataplane == nil {
		errs = append(errs, errors.New("a dataplane is required"))
	}
	for _, b := range applyOrder {
		if c.Bridges[b] == nil {
			errs = append(errs, fmt.Errorf("bridge %s is required", b))
		}
	}
	if c.FullSyncPeriod <= 0 {
		c.FullSyncPeriod = DefaultFullSyncPeriod
	}
	if c.MinSyncInterval <= 0 {
		c.MinSyncInterval = DefaultMinSyncInterval
	}
	if m, err := ParsePreserveMode(string(c.PreserveSourceIP)); err != nil {
		errs = append(errs, fmt.Errorf("preserve-source-ip %w", err))
	} else {
		c.PreserveSourceIP = m
	}
	return errors.Join(errs...)
}

// Agent runs the control loop of one node: Source -> Reconciler -> bridges.
type Agent struct {
	cfg    Config
	rec    *Reconciler
	runner *Runner
}

// New validates cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	rc := cfg.ReconcilerConfig
	rc.HasSynced = func() bool {
		return cfg.Source.HasSynced() && (cfg.Election == nil || cfg.Election.HasSynced())
	}
	rc.Events = sourceEvents{cfg.Source}
	rec := NewReconciler(rc)
	if cfg.Metrics != nil && cfg.Metrics.reg != nil {
		if err := cfg.Metrics.reg.Register(newFlowStatsCollector(rec, cfg.Bridges)); err != nil {
			return nil, fmt.Errorf("register the flow counters' metrics: %w", err)
		}
	}
	if cfg.Election != nil {
		rec.cfg.Election = cfg.Election
		rec.model.election = cfg.Election
		cfg.Election.SetTrigger(rec.trigger)
	}
	runner := NewRunner(rec.Sync, RunnerConfig{MinInterval: cfg.MinSyncInterval, RetryMin: DefaultRetryMin, RetryMax: DefaultRetryMax})
	rec.SetTrigger(runner.Run)
	return &Agent{cfg: cfg, rec: rec, runner: runner}, nil
}

// Reconciler returns the Agent's Reconciler.
func (a *Agent) Reconciler() *Reconciler { return a.rec }

// Run starts the Source, waits until it has synced, then runs the sync loop until ctx is done.
// It returns nil on cancellation; flows are left in place.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	if err := a.cfg.Source.Start(ctx, a.rec); err != nil {
		return fmt.Errorf("start state source: %w", err)
	}
	if e := a.cfg.Election; e != nil {
		if err := e.Start(ctx); err != nil {
			return fmt.Errorf("start gateway election: %w", err)
		}
	}
	logger.Info("Waiting for the state source to sync")
	if err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		return a.cfg.Source.HasSynced(), nil
	}); err != nil {
		return nil // cancelled before sync
	}
	logger.Info("State source synced; starting the sync loop", "fullSyncPeriod", a.cfg.FullSyncPeriod)
	// Pod ports are tracked like API objects (podPortSource): their baseline is what OVSDB
	// holds now, which the first full sync reads as well. Listed, and the first full sync
	// requested, before the loop starts: the loop's first sync is then that full sync. (Asked
	// for while the loop's first sync ran, it made a second full sync right after the first,
	// which at 10k Services rebuilt every flow set again and took the memory the first one had
	// returned.)
	pods := &podPortSource{dp: a.cfg.Dataplane, rec: a.rec}
	if err := pods.refresh(ctx); err != nil {
		logger.Error(err, "Pod ports not listed; the full sync retries")
	}
	a.rec.RequestFullSync()
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.runner.Loop(ctx)
	}()
	snapDone := make(chan struct{})
	if snap := a.rec.syncer.snap; snap != nil {
		go func() {
			defer close(snapDone)
			snap.run(ctx, done) // its last write follows the last sync
		}()
	} else {
		close(snapDone)
	}
	tick := time.NewTicker(a.cfg.FullSyncPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			<-done
			<-snapDone
			if e := a.cfg.Election; e != nil {
				// Stop answering for the egress IPs this node holds, then hand their Leases over.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				e.StepDown(sctx, a.rec.Sync, 2*time.Second)
				cancel()
			}
			logger.Info("Stopped; flows are left in place")
			return nil
		case <-a.cfg.Dataplane.Changes():
			logger.V(4).Info("OVSDB changed beyond pod ports; requesting a full sync")
			a.rec.RequestFullSync()
		case <-a.cfg.Dataplane.PodPortChanges():
			if err := pods.refresh(ctx); err != nil {
				logger.Error(err, "Pod ports not listed; requesting a full sync")
				a.rec.RequestFullSync()
			}
		case <-tick.C:
			a.rec.RequestFullSync()
		}
	}
}

// Healthy reports an error when the OVSDB connection is down: the Dataplane says so (when it
// implements ConnectionChecker) or the last OVSDB read failed.
func (a *Agent) Healthy() error {
	if c, ok := a.cfg.Dataplane.(ConnectionChecker); ok && !c.Connected() {
		return errors.New("ovsdb not connected")
	}
	if err := a.rec.Status().DataplaneError; err != nil {
		return fmt.Errorf("ovsdb: %w", err)
	}
	return nil
}

// Ready reports an error until the first full sync succeeded, and while syncs have been failing
// for longer than UnreadyAfterFailingPeriods full-sync periods.
func (a *Agent) Ready() error {
	st := a.rec.Status()
	if !st.FullSyncDone {
		if st.LastError != nil {
			return fmt.Errorf("first full sync not done: %w", st.LastError)
		}
		return errors.New("first full sync not done")
	}
	if !st.FailingSince.IsZero() && time.Since(st.FailingSince) > UnreadyAfterFailingPeriods*a.cfg.FullSyncPeriod {
		return fmt.Errorf("syncs failing since %s: %w", st.FailingSince.Format(time.RFC3339), st.LastError)
	}
	return nil
}

// sourceEvents forwards to the Source's current EventSink (KubeSource creates its recorder in
// Start).
type sourceEvents struct{ src Source }

func (s sourceEvents) Warn(obj runtime.Object, reason, message string) {
	s.src.Events().Warn(obj, reason, message)
}
