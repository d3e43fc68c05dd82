package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// liveEPs counts the applied service-port flow sets that program each entry point.
	liveEPs map[flows.EntryPoint]int
	// declined holds the applied service-port flow sets that decline their port (C34).
	declined map[flows.Key]bool
	// drains holds the draining entry points with the time their drain began.
	drains          map[flows.EntryPoint]time.Time
	drainsRecovered bool
	lastRepair      time.Time
	// rejected holds, per bridge, the keys whose flow set Open vSwitch rejected, with the cookie
	// of the rejected flow set: partial syncs do not send that flow set again (a changed one is
	// tried), full syncs retry every one.
	rejected map[flows.Bridge]map[flows.Key]flows.Cookie
	// warn reports the warnings of an applied flow set as Events (set by the Reconciler).
	warn func(*flows.FlowSet)
	// reject reports (reason non-empty) or clears (nil) the rejection of a key's flow set (set by
	// the Reconciler: an Event on the object).
	reject func(k flows.Key, problem string)
}

func newSyncer(cfg ReconcilerConfig, m *Metrics) *syncer {
	s := &syncer{cfg: cfg, metrics: m, conflicts: flows.NewConflicts(),
		applied:     map[flows.Bridge]map[flows.Key]flows.Applied{},
		appliedSize: map[flows.Bridge]map[flows.Key]int{},
		kindCount:   map[flows.Kind]int{},
		liveEPs:     map[flows.EntryPoint]int{},
		declined:    map[flows.Key]bool{},
		drains:      map[flows.EntryPoint]time.Time{},
		rejected:    map[flows.Bridge]map[flows.Key]flows.Cookie{},
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
}

// run is one sync: build -> resolve conflicts -> (full: read inventories) -> drains -> plan ->
// apply and record -> (full: conntrack zone limits). A partial sync builds the keys that ch makes dirty and plans against what it
// applied; a full sync builds every key and plans against the bridges' inventories. It returns
// the keys that have no flow set any more (partial syncs), whose group ids may now be released.
func (s *syncer) run(ctx context.Context, st *flows.State, ch changes) ([]flows.Key, error) {
	p := &pass{logger: klog.FromContext(ctx), full: ch.full, ch: ch, st: st,
		built: map[flows.Key]*flows.FlowSet{}, gone: map[flows.Key]bool{},
		final: map[flows.Key]*flows.FlowSet{}, bad: map[flows.Key]*flows.FlowSet{}, now: time.Now()}
	for _, step := range []func(context.Context, *pass) error{
		s.build, s.resolve, s.inventory, s.drain, s.plan, s.apply, s.zoneLimits,
	} {
		if err := step(ctx, p); err != nil {
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
func dirtyKeys(p *pass, applied map[flows.Bridge]map[flows.Key]flows.Applied) map[flows.Key]bool {
	keys := map[flows.Key]bool{}
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
			for _, m := range applied {
				for k := range m {
					if k.Kind == spec.Kind {
						keys[k] = true
					}
				}
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
	switch {
	case err != nil:
		p.logger.Error(err, "Flow set could not be built; left out (a partial sync keeps the installed one)", "key", k.String())
	case fs == nil:
		p.gone[k] = true
	default:
		p.built[k] = fs
	}
}

func (s *syncer) build(_ context.Context, p *pass) error {
	for k := range dirtyKeys(p, s.applied) {
		s.buildKey(p, k)
	}
	return nil
}

// resolve indexes the built flow sets' match keys (a full sync re-indexes everything), rebuilds
// the flow sets whose contested keys changed, and puts every flow set, without the flows another
// one wins, into p.final.
func (s *syncer) resolve(_ context.Context, p *pass) error {
	if p.full {
		s.conflicts.Reset()
	}
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

// apply writes each bridge's plan as one bundle, records what is now applied, and runs the
// conntrack flushes once br-ex no longer sends to the removed endpoints.
func (s *syncer) apply(ctx context.Context, p *pass) error {
	for _, b := range applyOrder {
		plan := p.plans[b]
		bad, err := s.write(ctx, b, plan)
		if err != nil {
			return err
		}
		for _, fs := range bad {
			p.bad[fs.Key] = fs
		}
		if p.full {
			s.recordFull(p, b, plan)
		} else {
			for _, fs := range plan.Add {
				if p.bad[fs.Key] != fs {
					s.setApplied(b, fs.Key, fs)
				}
			}
			for k := range p.gone {
				if _, ok := s.applied[b][k]; ok {
					s.setApplied(b, k, nil)
				}
			}
		}
		if b == flows.BrEx {
			// A rejected service port still sends to its old endpoints: keep their entries.
			s.flush(ctx, slices.DeleteFunc(p.flushes, func(q flushReq) bool { return p.bad[q.key] != nil }))
		}
	}
	if p.repair {
		s.lastRepair = p.now
		p.logger.V(2).Info("Deep repair done: every flow re-sent with modify_strict, every group with add_or_mod")
	}
	if p.full {
		p.logger.V(2).Info("Full sync done", "flowSets", len(p.final))
	} else if n := len(p.plans[flows.BrEx].Add) + len(p.plans[flows.BrInt].Add) + len(p.gone); n > 0 {
		p.logger.V(2).Info("Partial sync done", "rebuilt", len(p.built), "changed", n)
	}
	return nil
}

// recordFull records the outcome of a full sync's bundle on b: every final flow set of b is
// applied, every other key is not.
func (s *syncer) recordFull(p *pass, b flows.Bridge, plan *flows.Plan) {
	next := map[flows.Key]*flows.FlowSet{}
	for k, fs := range p.final {
		if fs.Bridge == b && p.bad[k] != fs {
			next[k] = fs
		}
	}
	added := make(map[*flows.FlowSet]bool, len(plan.Add))
	for _, fs := range plan.Add {
		added[fs] = true
	}
	for k, fs := range next {
		// A changed flow set that needed no write (e.g. one left without flows by a conflict)
		// still reports its warnings.
		if old, ok := s.applied[b][k]; !added[fs] && (!ok || old.Cookie != fs.Cookie()) {
			s.reportWarnings(p.logger.WithValues("bridge", b.String()), fs)
		}
	}
	for k := range s.applied[b] {
		// A rejected flow set's installed version (if its old cookie was kept) stays recorded.
		if next[k] == nil && (p.bad[k] == nil || p.bad[k].Bridge != b) {
			s.setApplied(b, k, nil)
		}
	}
	for k, fs := range next {
		s.setApplied(b, k, fs)
		s.clearRejected(b, k)
	}
}

// write applies one plan as one bundle (nothing when it is empty) and reports the warnings of
// the flow sets it adds. When Open vSwitch rejects the bundle (ofctl.Error.Rejected: an OpenFlow
// error, not an unreachable switch), write isolates the flow sets it rejects (isolate) and applies
// everything else; it returns those flow sets, which are reported and not recorded as applied.
// Any other failure is returned as an error (nothing applied; the sync fails and is retried).
func (s *syncer) write(ctx context.Context, b flows.Bridge, plan *flows.Plan) ([]*flows.FlowSet, error) {
	if plan.Empty() {
		return nil, nil
	}
	logger := klog.FromContext(ctx).WithValues("bridge", b.String())
	lines := plan.Lines()
	if plan.Changes() {
		logger.V(2).Info("Applying bundle", "add", len(plan.Add), "deleteCookies", len(plan.DeleteCookies), "deleteGroups", len(plan.DeleteGroups), "repair", len(plan.Repair), "lines", len(lines))
	} else {
		// A deep repair that changes nothing the agent knows of (it restores drift in place).
		logger.V(2).Info("Applying repair bundle", "repair", len(plan.Repair), "lines", len(lines))
	}
	if v := logger.V(9); v.Enabled() {
		v.Info("Bundle", "lines", strings.Join(lines, "\n"))
	}
	var bad []*flows.FlowSet
	if err := s.cfg.Bridges[b].Bundle(ctx, lines); err != nil {
		if !rejected(err) || len(plan.Add)+len(plan.Repair) == 0 {
			return nil, fmt.Errorf("apply bundle of %d lines to %s: %w", len(lines), b, err)
		}
		logger.Info("Open vSwitch rejected the bundle; isolating the flow sets it rejects", "lines", len(lines), "err", err)
		var ierr error
		bad, ierr = s.isolate(ctx, b, plan)
		if ierr != nil {
			return nil, fmt.Errorf("apply bundle of %d lines to %s (isolating the rejected flow sets): %w", len(lines), b, ierr)
		}
	} else {
		s.metrics.BundleLines.WithLabelValues(b.String()).Add(float64(len(lines)))
	}
	isBad := make(map[*flows.FlowSet]bool, len(bad))
	for _, fs := range bad {
		isBad[fs] = true
	}
	for _, fs := range plan.Add {
		if !isBad[fs] {
			s.clearRejected(b, fs.Key)
			s.reportWarnings(logger, fs)
		}
	}
	return bad, nil
}

// rejected reports whether err says that the switch refused what it was sent (an error with a
// Rejected method that returns true, like *ofctl.Error), so that sending less can succeed.
func rejected(err error) bool {
	var r interface{ Rejected() bool }
	return errors.As(err, &r) && r.Rejected()
}

// isolate applies a plan that Open vSwitch rejected as a whole, without the flow sets it rejects:
// the added and repaired flow sets are applied in bundles of halves, recursively (bisection: k bad
// flow sets among n cost about 2k·log2(n) bundles), a single flow set that is still rejected is
// recorded in s.rejected and reported (Event, metric, log); then the deletes are applied in one
// bundle, except the cookies and groups that a rejected key has installed, which stay (a partial
// sync keeps the installed version, as when a flow set cannot be built). A failure that is not a
// rejection stops it with an error. The plan is no longer atomic as a whole, each part is.
func (s *syncer) isolate(ctx context.Context, b flows.Bridge, plan *flows.Plan) ([]*flows.FlowSet, error) {
	type item struct {
		fs     *flows.FlowSet
		repair bool
	}
	items := make([]item, 0, len(plan.Add)+len(plan.Repair))
	for _, fs := range plan.Add {
		items = append(items, item{fs: fs})
	}
	for _, fs := range plan.Repair {
		items = append(items, item{fs: fs, repair: true})
	}
	br := s.cfg.Bridges[b]
	var bad []*flows.FlowSet
	var try func([]item) error
	try = func(part []item) error {
		if len(part) == 0 {
			return nil
		}
		sub := &flows.Plan{Bridge: b, BucketsPerMessage: plan.BucketsPerMessage}
		for _, it := range part {
			if it.repair {
				sub.Repair = append(sub.Repair, it.fs)
			} else {
				sub.Add = append(sub.Add, it.fs)
			}
		}
		lines := sub.Lines()
		err := br.Bundle(ctx, lines)
		if err == nil {
			s.metrics.BundleLines.WithLabelValues(b.String()).Add(float64(len(lines)))
			return nil
		}
		if !rejected(err) {
			return err
		}
		if len(part) == 1 {
			bad = append(bad, part[0].fs)
			s.markRejected(ctx, b, part[0].fs, err)
			return nil
		}
		mid := len(part) / 2
		if err := try(part[:mid]); err != nil {
			return err
		}
		return try(part[mid:])
	}
	if err := try(items); err != nil {
		return nil, err
	}
	keepCookie, keepGroup := map[flows.Cookie]bool{}, map[uint32]bool{}
	for _, fs := range bad {
		if old, ok := s.applied[b][fs.Key]; ok {
			keepCookie[old.Cookie] = true
			for _, g := range old.Groups {
				keepGroup[g] = true
			}
		}
	}
	del := &flows.Plan{Bridge: b,
		DeleteCookies: slices.DeleteFunc(slices.Clone(plan.DeleteCookies), func(c flows.Cookie) bool { return keepCookie[c] }),
		DeleteGroups:  slices.DeleteFunc(slices.Clone(plan.DeleteGroups), func(g uint32) bool { return keepGroup[g] })}
	if lines := del.Lines(); len(lines) > 0 {
		if err := br.Bundle(ctx, lines); err != nil {
			return nil, err
		}
		s.metrics.BundleLines.WithLabelValues(b.String()).Add(float64(len(lines)))
	}
	return bad, nil
}

// markRejected records that Open vSwitch rejected fs (err is its answer) and reports it once per
// rejected version: a log line, srcip_agent_rejected_flow_sets_total, and an Event on the object.
func (s *syncer) markRejected(ctx context.Context, b flows.Bridge, fs *flows.FlowSet, err error) {
	if s.rejected[b][fs.Key] == fs.Cookie() {
		return // the same version again (a full sync's retry): already reported
	}
	s.rejected[b][fs.Key] = fs.Cookie()
	s.metrics.RejectedFlowSets.WithLabelValues(fs.Key.Kind.String()).Inc()
	s.metrics.RejectedNow.Set(float64(s.rejectedCount()))
	msg := firstLine(err.Error(), 300)
	klog.FromContext(ctx).Error(err, "Open vSwitch rejected a flow set; the rest of the bundle is applied, this one is retried at the next full sync",
		"bridge", b.String(), "key", fs.Key.String(), "cookie", fs.Cookie().String())
	if s.reject != nil {
		s.reject(fs.Key, "Open vSwitch rejected the flows of "+fs.Key.String()+" (the installed version, if any, is kept; retried at the next full sync): "+msg)
	}
}

// clearRejected forgets a rejection of k on b (applied, or gone).
func (s *syncer) clearRejected(b flows.Bridge, k flows.Key) {
	if _, ok := s.rejected[b][k]; !ok {
		return
	}
	delete(s.rejected[b], k)
	s.metrics.RejectedNow.Set(float64(s.rejectedCount()))
	if s.reject != nil {
		s.reject(k, "")
	}
}

func (s *syncer) rejectedCount() int {
	n := 0
	for _, m := range s.rejected {
		n += len(m)
	}
	return n
}

// firstLine returns the first line of s, at most n bytes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// reportWarnings reports the warnings of a flow set that was just applied (set by the
// Reconciler: Events go to the object the model knows for the key).
func (s *syncer) reportWarnings(logger klog.Logger, fs *flows.FlowSet) {
	if s.warn != nil {
		s.warn(fs)
	}
	if len(fs.Warnings) > 0 {
		logger.Info("Flow set built with warnings", "key", fs.Key.String(), "warnings", fs.Warnings)
	}
}

// setApplied records fs (nil: nothing) as applied for k on b and keeps the metrics current.
func (s *syncer) setApplied(b flows.Bridge, k flows.Key, fs *flows.FlowSet) {
	bl := b.String()
	if old, ok := s.applied[b][k]; ok {
		if k.Kind == flows.KindServicePort {
			for _, e := range old.EntryPoints {
				if s.liveEPs[e]--; s.liveEPs[e] <= 0 {
					delete(s.liveEPs, e)
				}
			}
		}
		s.metrics.AppliedFlows.WithLabelValues(bl).Sub(float64(s.appliedSize[b][k]))
		s.metrics.AppliedGroups.WithLabelValues(bl).Sub(float64(len(old.Groups)))
		s.kindCount[k.Kind]--
		delete(s.applied[b], k)
		delete(s.appliedSize[b], k)
	}
	if fs != nil {
		s.applied[b][k] = flows.AppliedOf(fs)
		if k.Kind == flows.KindServicePort {
			for _, e := range fs.EntryPoints {
				s.liveEPs[e]++
			}
		}
		s.appliedSize[b][k] = len(fs.FlowLines())
		s.metrics.AppliedFlows.WithLabelValues(bl).Add(float64(len(fs.FlowLines())))
		s.metrics.AppliedGroups.WithLabelValues(bl).Add(float64(len(fs.Groups)))
		s.kindCount[k.Kind]++
	}
	if fs != nil && fs.Declined != "" {
		s.declined[k] = true
	} else {
		delete(s.declined, k)
	}
	s.metrics.DeclinedServicePorts.Set(float64(len(s.declined)))
	s.metrics.DesiredFlowSets.WithLabelValues(k.Kind.String()).Set(float64(s.kindCount[k.Kind]))
}
