package agent

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// applyOrder is the order bridges are written in within one sync: br-int first, so that the
// backend side of a Service exists before br-ex steers traffic into it.
var applyOrder = []flows.Bridge{flows.BrInt, flows.BrEx}

// syncer moves the bridges to the flow sets built from the model's flows.State, in one pipeline
// of steps shared by partial and full syncs (see pass and syncer.run). It owns what it last wrote
// per bridge and key (and the metrics that count it), the conflict index, the drains and the
// deep-repair clock. It is owned by the goroutine calling Reconciler.Sync.
type syncer struct {
	cfg       ReconcilerConfig
	metrics   *Metrics
	conflicts *flows.Conflicts

	applied     map[flows.Bridge]map[flows.Key]flows.Applied
	appliedSize map[flows.Bridge]map[flows.Key]int
	kindCount   map[flows.Kind]int
	// appliedByKind counts, per kind and key, the bridges that have the key applied (so that a
	// partial sync finds the applied keys of one kind without a walk over every applied key).
	appliedByKind map[flows.Kind]map[flows.Key]int
	// liveEPs counts the applied service-port flow sets that program each entry point.
	liveEPs map[flows.EntryPoint]int
	// declined holds why each applied service-port flow set declines its port (FlowSet.Declined:
	// an endpoint outside every node's pod CIDRs, C34; no IPv6 pod CIDR on this node).
	declined map[flows.Key]string
	// drains holds the draining entry points with the time their drain began.
	drains          map[flows.EntryPoint]time.Time
	drainsRecovered bool
	lastRepair      time.Time
	// zones are the conntrack zones' limits and entries read at the last full sync (nil: never
	// read; Conntrack is no ConntrackLimiter).
	zones map[uint16]flows.ZoneLimit
	// rejected holds, per bridge, the keys whose flow set Open vSwitch rejected, with the cookie
	// of the rejected flow set: partial syncs do not send that flow set again (a changed one is
	// tried), full syncs retry every one.
	rejected map[flows.Bridge]map[flows.Key]flows.Cookie
	// warn reports the warnings of an applied flow set as Events (set by the Reconciler).
	warn func(*flows.FlowSet)
	// reject reports (reason non-empty) or clears (nil) the rejection of a key's flow set (set by
	// the Reconciler: an Event on the object).
	reject func(k flows.Key, problem string)
	// steps are the last sync's steps with their durations (observeStep).
	steps []stepTime
	// planned, when set, receives every full sync's desired flow sets of each bridge, the ones
	// flows.FullDiff compared with the bridge's inventory (Desired reads them; nil in the agent).
	planned func(b flows.Bridge, desired []*flows.FlowSet)
	// snap, when set, keeps the flow snapshot of what is applied (ReconcilerConfig.FlowSnapshot).
	snap *snapshotter
}

// stepTime is one step of a sync and how long it took.
type stepTime struct {
	name string
	d    time.Duration
}

// observeStep records that step of a sync of kind (full, partial) took d: in
// srcip_agent_sync_step_duration_seconds and in s.steps.
func (s *syncer) observeStep(step, kind string, d time.Duration) {
	s.metrics.SyncStepDuration.WithLabelValues(step, kind).Observe(d.Seconds())
	s.steps = append(s.steps, stepTime{step, d})
}

// stepsKV returns the last sync's steps as log key-values (name, rounded duration).
func (s *syncer) stepsKV() []any {
	kv := make([]any, 0, 2*len(s.steps))
	for _, st := range s.steps {
		kv = append(kv, st.name, st.d.Round(time.Microsecond).String())
	}
	return kv
}

func newSyncer(cfg ReconcilerConfig, m *Metrics) *syncer {
	s := &syncer{cfg: cfg, metrics: m, conflicts: flows.NewConflicts(),
		applied:       map[flows.Bridge]map[flows.Key]flows.Applied{},
		appliedSize:   map[flows.Bridge]map[flows.Key]int{},
		kindCount:     map[flows.Kind]int{},
		appliedByKind: map[flows.Kind]map[flows.Key]int{},
		liveEPs:       map[flows.EntryPoint]int{},
		declined:      map[flows.Key]string{},
		drains:        map[flows.EntryPoint]time.Time{},
		rejected:      map[flows.Bridge]map[flows.Key]flows.Cookie{},
	}
	if cfg.FlowSnapshot != nil {
		s.snap = newSnapshotter(*cfg.FlowSnapshot, cfg.NodeName, cfg.BucketsPerMessage, m)
	}
	for _, b := range applyOrder {
		s.rejected[b] = map[flows.Key]flows.Cookie{}
		s.applied[b] = map[flows.Key]flows.Applied{}
		s.appliedSize[b] = map[flows.Key]int{}
	}
	return s
}

// pass is the working set of one sync, filled step by step.
type pass struct {
	logger klog.Logger
	full   bool
	ch     changes
	st     *flows.State
	// built are the flow sets as built; gone the keys that have none any more (partial syncs).
	built map[flows.Key]*flows.FlowSet
	gone  map[flows.Key]bool
	// final are the flow sets to apply, after conflicts and drains.
	final   map[flows.Key]*flows.FlowSet
	invs    map[flows.Bridge]flows.Inventory // full syncs: what the bridges hold
	flushes []flushReq
	plans   map[flows.Bridge]*flows.Plan
	// bad are the flow sets Open vSwitch rejected in this sync (not applied), by key.
	bad    map[flows.Key]*flows.FlowSet
	repair bool
	now    time.Time
	// zonesDone is closed when the conntrack zone limits are set (full syncs; see run).
	zonesDone chan struct{}
}

// waitZones waits for the conntrack zone limits of a full sync (run starts them).
func waitZones(_ context.Context, p *pass) error {
	if p.zonesDone != nil {
		<-p.zonesDone
	}
	return nil
}

// run is one sync: build -> resolve conflicts -> (full: read inventories) -> drains -> plan ->
// apply and record; a full sync sets the conntrack zone limits meanwhile and waits for them at
// the end. A partial sync builds the keys that ch makes dirty and plans against what it applied; a full sync builds every key and plans against the bridges' inventories. It returns
// the keys that have no flow set any more (partial syncs), whose group ids may now be released.
func (s *syncer) run(ctx context.Context, st *flows.State, ch changes) ([]flows.Key, error) {
	p := &pass{logger: klog.FromContext(ctx), full: ch.full, ch: ch, st: st,
		built: map[flows.Key]*flows.FlowSet{}, gone: map[flows.Key]bool{},
		final: map[flows.Key]*flows.FlowSet{}, bad: map[flows.Key]*flows.FlowSet{}, now: time.Now()}
	kind := "partial"
	if p.full {
		kind = "full"
		// The conntrack zone limits (a few ovs-appctl calls) are independent of the flows: set
		// them while the flows are built and written; the zones step waits for them.
		p.zonesDone = make(chan struct{})
		go func() {
			defer close(p.zonesDone)
			_ = s.zoneLimits(ctx, p)
		}()
	}
	for _, step := range []struct {
		name string
		fn   func(context.Context, *pass) error
	}{
		{"build", s.build}, {"resolve", s.resolve}, {"inventory", s.inventory}, {"drain", s.drain},
		{"plan", s.plan}, {"apply", s.apply}, {"zones", waitZones},
	} {
		start := time.Now()
		err := step.fn(ctx, p)
		s.observeStep(step.name, kind, time.Since(start))
		if err != nil {
			_ = waitZones(ctx, p)
			return nil, err
		}
	}
	released := make([]flows.Key, 0, len(p.gone))
	for k := range p.gone {
		released = append(released, k)
	}
	return released, nil
}

// dirtyKeys returns the keys a sync rebuilds: every key of every kind (a full sync, drains aside:
// the drain step builds them), or the keys whose own object changed plus every key of the kinds
// whose triggers fired (flows.KindSpec.Triggers), and the applied keys of EverySync kinds.
func dirtyKeys(p *pass, appliedByKind map[flows.Kind]map[flows.Key]int) map[flows.Key]bool {
	keys := map[flows.Key]bool{}
	if p.full {
		keys = make(map[flows.Key]bool, len(p.st.Services)+len(p.st.Pods)+len(p.st.Nodes)+64)
	}
	for _, spec := range flows.Kinds() {
		all := spec.Triggers&flows.EverySync != 0 || (p.ch.podCIDRs && spec.Triggers&flows.PodCIDRs != 0)
		if p.full {
			all = spec.Kind != flows.KindServiceDrain
		}
		if !all {
			continue
		}
		for _, k := range spec.Keys(p.st) {
			keys[k] = true
		}
		if spec.Triggers&flows.EverySync != 0 {
			// A key State no longer calls for is built too, so that it goes away (gone).
			for k := range appliedByKind[spec.Kind] {
				keys[k] = true
			}
		}
	}
	if !p.full {
		for k := range p.ch.keys {
			keys[k] = true
		}
	}
	return keys
}

// buildKey builds k into p.built, or marks it gone. A flow set that fails to build is logged and
// left out: a partial sync keeps the installed one, a full sync deletes it (FullDiff).
func (s *syncer) buildKey(p *pass, k flows.Key) {
	fs, err := flows.BuildKey(p.st, k)
	s.record(p, k, fs, err)
}

// record puts the outcome of building k into p.built or p.gone (see buildKey).
func (s *syncer) record(p *pass, k flows.Key, fs *flows.FlowSet, err error) {
	switch {
	case err != nil:
		p.logger.Error(err, "Flow set could not be built; left out (a partial sync keeps the installed one)", "key", k.String())
	case fs == nil:
		p.gone[k] = true
	default:
		p.built[k] = fs
	}
}

// parallelBuildMin is the number of dirty keys from which build spreads flows.BuildKey (pure: it
// only reads State) over GOMAXPROCS goroutines: a full sync of 10k Service ports builds in about
// half the time on two cores.
var parallelBuildMin = 512

func (s *syncer) build(_ context.Context, p *pass) error {
	dirty := dirtyKeys(p, s.appliedByKind)
	p.built = grown(p.built, len(dirty))
	workers := runtime.GOMAXPROCS(0)
	if len(dirty) < parallelBuildMin || workers < 2 {
		for k := range dirty {
			s.buildKey(p, k)
		}
		return nil
	}
	type result struct {
		fs  *flows.FlowSet
		err error
	}
	keys := slices.Collect(maps.Keys(dirty))
	results := make([]result, len(keys))
	var wg sync.WaitGroup
	chunk := (len(keys) + workers - 1) / workers
	for lo := 0; lo < len(keys); lo += chunk {
		hi := min(lo+chunk, len(keys))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				results[i].fs, results[i].err = flows.BuildKey(p.st, keys[i])
			}
		}()
	}
	wg.Wait()
	for i, k := range keys {
		s.record(p, k, results[i].fs, results[i].err)
	}
	return nil
}

// resolve indexes the built flow sets' match keys (a full sync re-indexes everything), rebuilds
// the flow sets whose contested keys changed, and puts every flow set, without the flows another
// one wins, into p.final.
func (s *syncer) resolve(_ context.Context, p *pass) error {
	if p.full {
		s.conflicts.Reset()
		s.conflicts.Reserve(len(p.built))
	}
	p.final = grown(p.final, len(p.built))
	affected := map[flows.Key]bool{}
	for k, fs := range p.built {
		for o := range s.conflicts.Set(k, fs.MatchKeys()) {
			affected[o] = true
		}
	}
	for k := range p.gone {
		for o := range s.conflicts.Set(k, nil) {
			affected[o] = true
		}
	}
	if !p.full {
		for o := range affected {
			if p.built[o] == nil && !p.gone[o] {
				s.buildKey(p, o)
			}
		}
	}
	for k, fs := range p.built {
		f, err := s.conflicts.Resolve(p.st, fs)
		if err != nil {
			p.logger.Error(err, "Flow set could not be rebuilt without its conflicting flows; left out", "key", k.String())
			continue
		}
		p.final[k] = f
	}
	s.metrics.FlowConflicts.Set(float64(s.conflicts.Count()))
	return nil
}

// inventory reads what the bridges hold (full syncs).
func (s *syncer) inventory(ctx context.Context, p *pass) error {
	if !p.full {
		return nil
	}
	p.invs = map[flows.Bridge]flows.Inventory{}
	for _, b := range applyOrder {
		inv, err := s.cfg.Bridges[b].Inventory(ctx)
		if err != nil {
			return fmt.Errorf("read inventory of %s: %w", b, err)
		}
		p.invs[b] = inv
	}
	return nil
}

// drain updates the drains (drain.go), builds their flow sets into p.final and computes the UDP
// conntrack flushes the sync calls for.
func (s *syncer) drain(ctx context.Context, p *pass) error {
	var keys []flows.Key
	if p.full {
		s.maintainDrains(ctx, p.final, p.invs[flows.BrEx])
		for e := range s.drains {
			keys = append(keys, flows.DrainKey(e))
		}
	} else {
		keys = s.drainChanges(p.final, p.gone)
	}
	clear(p.st.Drains)
	for e := range s.drains {
		p.st.Drains[e] = true
	}
	for _, k := range keys {
		s.buildKey(p, k)
		if fs := p.built[k]; fs != nil {
			p.final[k] = fs
		}
	}
	p.flushes = s.udpFlushes(p.final, p.gone, p.full)
	return nil
}

// plan makes one bundle plan per bridge: against the inventories (full; plus the deep repair
// when it is due) or against what was applied (partial).
func (s *syncer) plan(_ context.Context, p *pass) error {
	p.plans = map[flows.Bridge]*flows.Plan{}
	if p.full {
		byBridge := map[flows.Bridge][]*flows.FlowSet{}
		for _, fs := range p.final {
			byBridge[fs.Bridge] = append(byBridge[fs.Bridge], fs)
		}
		if s.cfg.RepairPeriod > 0 {
			if s.lastRepair.IsZero() {
				s.lastRepair = p.now // the first full sync (at start) writes only what differs
			} else if p.now.Sub(s.lastRepair) >= s.cfg.RepairPeriod {
				p.repair = true
			}
		}
		for _, b := range applyOrder {
			if s.planned != nil {
				s.planned(b, byBridge[b])
			}
			plan := flows.FullDiff(b, byBridge[b], p.invs[b])
			if p.repair {
				plan.RepairAll(byBridge[b])
			}
			plan.BucketsPerMessage = s.cfg.BucketsPerMessage
			p.plans[b] = &plan
		}
		return nil
	}
	for _, b := range applyOrder {
		p.plans[b] = &flows.Plan{Bridge: b, BucketsPerMessage: s.cfg.BucketsPerMessage}
	}
	for k, fs := range p.final {
		if c, ok := s.rejected[fs.Bridge][k]; ok && c == fs.Cookie() {
			// Rejected as it is: retried at the next full sync only (no retry storm).
			continue
		}
		if old, ok := s.applied[fs.Bridge][k]; ok {
			p.plans[fs.Bridge].Replace(&old, fs)
		} else {
			p.plans[fs.Bridge].Replace(nil, fs)
		}
	}
	for k := range p.gone {
		for _, b := range applyOrder {
			if old, ok := s.applied[b][k]; ok {
				p.plans[b].Replace(&old, nil)
			}
			s.clearRejected(b, k)
		}
	}
	return nil
}
