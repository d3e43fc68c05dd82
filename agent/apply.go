package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/openflow"
	"k8s.io/klog/v2"
)

// The apply step of syncer.run: write each bridge's plan as one bundle (isolating what Open
// vSwitch rejects), record what is applied, report warnings and rejections.

// apply writes each bridge's plan as one bundle, records what is now applied, and runs the
// conntrack flushes once br-ex no longer sends to the removed endpoints.
func (s *syncer) apply(ctx context.Context, p *pass) error {
	if s.snap != nil {
		// What is recorded as applied is what the bridges hold, also after a failed bundle.
		defer s.snap.changed()
	}
	for _, b := range applyOrder {
		plan := p.plans[b]
		write := s.write
		if p.full && coldBridge(p.invs[b]) {
			write = s.writeCold
		}
		bad, err := write(ctx, b, plan)
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
	n := 0
	for _, fs := range p.final {
		if fs.Bridge == b {
			n++
		}
	}
	next := make(map[flows.Key]*flows.FlowSet, n)
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
	s.applied[b], s.appliedSize[b] = grown(s.applied[b], len(next)), grown(s.appliedSize[b], len(next))
	for k, fs := range next {
		s.setApplied(b, k, fs)
		s.clearRejected(b, k)
	}
}

// coldChunk is the most flow sets one bundle carries when a full sync writes into a bridge that
// holds none of the agent's flows (writeCold).
var coldChunk = 1000

// coldBridge reports whether inv holds none of the agent's flow sets (learned flows aside): a new
// bridge, or one whose Open vSwitch restarted without its flows.
func coldBridge(inv flows.Inventory) bool {
	for c := range inv.Flows {
		if c.Owned() && !c.Learned() {
			return false
		}
	}
	return true
}

// writeCold applies a full sync's plan into a cold bridge (coldBridge) as bundles of at most
// coldChunk flow sets, ordered by kind, then one bundle of the deletes; each is written (and
// its rejections isolated) as write does. The plan is then not atomic as a whole, each flow set
// still is: a cold bridge has no pipeline of the agent that a partly written one could be
// inconsistent with, and the encoding of only two chunks is held at a time (at 10k Service ports
// the whole plan's is tens of MB). For an EncodedBundler bridge the next chunk's messages are
// encoded on another goroutine while the switch commits the current one.
func (s *syncer) writeCold(ctx context.Context, b flows.Bridge, plan *flows.Plan) ([]*flows.FlowSet, error) {
	if len(plan.Add)+len(plan.Repair) <= coldChunk {
		return s.write(ctx, b, plan)
	}
	// Base kinds first (the registry's kind numbers put them before Service ports).
	slices.SortStableFunc(plan.Add, func(a, b *flows.FlowSet) int { return int(a.Key.Kind) - int(b.Key.Kind) })
	var chunks []*flows.Plan
	for part := range slices.Chunk(plan.Add, coldChunk) {
		chunks = append(chunks, &flows.Plan{Bridge: b, Add: part, BucketsPerMessage: plan.BucketsPerMessage})
	}
	for part := range slices.Chunk(plan.Repair, coldChunk) {
		chunks = append(chunks, &flows.Plan{Bridge: b, Repair: part, BucketsPerMessage: plan.BucketsPerMessage})
	}
	chunks = append(chunks, &flows.Plan{Bridge: b, DeleteCookies: plan.DeleteCookies, DeleteGroups: plan.DeleteGroups})
	_, encodes := s.cfg.Bridges[b].(EncodedBundler)
	render := func(p *flows.Plan) <-chan *openflow.Encoded {
		ch := make(chan *openflow.Encoded, 1)
		go func() {
			msgs := p.Messages() // reads the flow sets only
			if encodes && len(msgs) > 0 {
				ch <- openflow.EncodeAll(msgs)
				return
			}
			ch <- &openflow.Encoded{Msgs: msgs}
		}()
		return ch
	}
	var bad []*flows.FlowSet
	next := render(chunks[0])
	for i, c := range chunks {
		enc := <-next
		if i+1 < len(chunks) {
			next = render(chunks[i+1])
		}
		nb, err := s.writeMessages(ctx, b, c, enc)
		if err != nil {
			return nil, err
		}
		bad = append(bad, nb...)
	}
	return bad, nil
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
	return s.writeMessages(ctx, b, plan, &openflow.Encoded{Msgs: plan.Messages()})
}

// writeMessages is write with the plan's messages (plan.Messages()) already made, and for an
// EncodedBundler bridge encoded (enc.Types not nil).
func (s *syncer) writeMessages(ctx context.Context, b flows.Bridge, plan *flows.Plan, enc *openflow.Encoded) ([]*flows.FlowSet, error) {
	if plan.Empty() {
		return nil, nil
	}
	msgs := enc.Msgs
	logger := klog.FromContext(ctx).WithValues("bridge", b.String())
	if plan.Changes() {
		logger.V(2).Info("Applying bundle", "add", len(plan.Add), "deleteCookies", len(plan.DeleteCookies), "deleteGroups", len(plan.DeleteGroups), "repair", len(plan.Repair), "messages", len(msgs))
	} else {
		// A deep repair that changes nothing the agent knows of (it restores drift in place).
		logger.V(2).Info("Applying repair bundle", "repair", len(plan.Repair), "messages", len(msgs))
	}
	if v := logger.V(9); v.Enabled() {
		v.Info("Bundle", "lines", strings.Join(openflow.Text(msgs), "\n"))
	}
	var bad []*flows.FlowSet
	var err error
	if eb, ok := s.cfg.Bridges[b].(EncodedBundler); ok && enc.Types != nil {
		err = eb.BundleEncoded(ctx, enc)
	} else {
		err = s.cfg.Bridges[b].Bundle(ctx, msgs)
	}
	if err != nil {
		if !rejected(err) || len(plan.Add)+len(plan.Repair) == 0 {
			return nil, fmt.Errorf("apply bundle of %d messages to %s: %w", len(msgs), b, err)
		}
		logger.Info("Open vSwitch rejected the bundle; isolating the flow sets it rejects", "messages", len(msgs), "err", err)
		var ierr error
		bad, ierr = s.isolate(ctx, b, plan)
		if ierr != nil {
			return nil, fmt.Errorf("apply bundle of %d messages to %s (isolating the rejected flow sets): %w", len(msgs), b, ierr)
		}
	} else {
		s.metrics.BundleLines.WithLabelValues(b.String()).Add(float64(len(msgs)))
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
		msgs := sub.Messages()
		err := br.Bundle(ctx, msgs)
		if err == nil {
			s.metrics.BundleLines.WithLabelValues(b.String()).Add(float64(len(msgs)))
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
	if msgs := del.Messages(); len(msgs) > 0 {
		if err := br.Bundle(ctx, msgs); err != nil {
			return nil, err
		}
		s.metrics.BundleLines.WithLabelValues(b.String()).Add(float64(len(msgs)))
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
	if s.snap != nil {
		s.snap.set(b, k, fs)
	}
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
		if m := s.appliedByKind[k.Kind]; m[k] <= 1 {
			delete(m, k)
		} else {
			m[k]--
		}
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
		s.appliedSize[b][k] = len(fs.Flows)
		s.metrics.AppliedFlows.WithLabelValues(bl).Add(float64(len(fs.Flows)))
		s.metrics.AppliedGroups.WithLabelValues(bl).Add(float64(len(fs.Groups)))
		s.kindCount[k.Kind]++
		if s.appliedByKind[k.Kind] == nil {
			s.appliedByKind[k.Kind] = map[flows.Key]int{}
		}
		s.appliedByKind[k.Kind][k]++
	}
	if fs != nil && fs.Declined != "" {
		s.declined[k] = fs.Declined
	} else {
		delete(s.declined, k)
	}
	s.metrics.DeclinedServicePorts.Set(float64(len(s.declined)))
	s.metrics.DesiredFlowSets.WithLabelValues(k.Kind.String()).Set(float64(s.kindCount[k.Kind]))
}
