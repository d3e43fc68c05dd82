package agent

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// Drains (the drain step of syncer.run). When an entry point stops being served by any Service
// port (annotation removed, Service or port deleted, externalTrafficPolicy changed, IP removed),
// its established TCP connections would lose the ExServiceLB flow that leads them to ct(nat) and be answered by the host with a
// reset. The syncer keeps a drain flow set (flows.BuildServiceDrain) for each such TCP entry
// point until ZoneService holds no live connection to it any more (checked once per full sync
// with one conntrack dump) or Config.DrainPeriod has passed. UDP entry points are not drained:
// the conntrack entries of a removed UDP Service port are flushed (see udpFlushes), as kube-proxy
// does. Drains survive an agent restart: the first full sync keeps the drain of every entry point
// that ZoneService still has connections to and whose drain cookie the bridge holds (a drain's
// cookie depends only on its entry point).

// drainable reports whether an entry point that went away gets a drain flow set.
func (s *syncer) drainable(e flows.EntryPoint) bool {
	return s.cfg.Conntrack != nil && e.Protocol == flows.TCP
}

// drainChanges updates the drains after a partial sync computed the new service-port flow sets
// (final) and the flow sets that are gone, and returns the drain keys to rebuild.
func (s *syncer) drainChanges(final map[flows.Key]*flows.FlowSet, gone map[flows.Key]bool) []flows.Key {
	delta := map[flows.EntryPoint]int{}
	var removed []flows.EntryPoint
	change := func(k flows.Key, nw []flows.EntryPoint) {
		old := s.applied[flows.BrEx][k]
		for _, e := range old.EntryPoints {
			delta[e]--
			if !slices.Contains(nw, e) {
				removed = append(removed, e)
			}
		}
		for _, e := range nw {
			delta[e]++
		}
	}
	for k, fs := range final {
		if k.Kind == flows.KindServicePort {
			change(k, fs.EntryPoints)
		}
	}
	for k := range gone {
		if k.Kind == flows.KindServicePort {
			change(k, nil)
		}
	}
	var out []flows.Key
	now := time.Now()
	for _, e := range removed {
		if _, ok := s.drains[e]; !ok && s.drainable(e) && s.liveEPs[e]+delta[e] <= 0 {
			s.drains[e] = now
			out = append(out, flows.DrainKey(e))
		}
	}
	for e, d := range delta {
		if _, ok := s.drains[e]; ok && d > 0 && s.liveEPs[e]+d > 0 {
			delete(s.drains, e) // served again
			out = append(out, flows.DrainKey(e))
		}
	}
	s.metrics.DrainingEntryPoints.Set(float64(len(s.drains)))
	return out
}

// maintainDrains runs in every full sync before the plans are made: it starts the drains of
// entry points that the applied service-port flow sets served and final does not, recovers the
// drains of a previous agent at the first full sync, ends the drains whose entry point has no
// live ZoneService connection any more (one conntrack dump), that are served again or older than
// DrainPeriod. The drain step of the sync then builds the drain flow sets into final.
func (s *syncer) maintainDrains(ctx context.Context, final map[flows.Key]*flows.FlowSet, invEx flows.Inventory) {
	if s.cfg.Conntrack == nil {
		return
	}
	logger := klog.FromContext(ctx)
	now := time.Now()
	live := map[flows.EntryPoint]bool{}
	for _, fs := range final {
		if fs.Key.Kind == flows.KindServicePort {
			for _, e := range fs.EntryPoints {
				live[e] = true
			}
		}
	}
	for k, a := range s.applied[flows.BrEx] {
		if k.Kind != flows.KindServicePort {
			continue
		}
		for _, e := range a.EntryPoints {
			if _, ok := s.drains[e]; !ok && !live[e] && s.drainable(e) {
				s.drains[e] = now
			}
		}
	}
	var dsts map[flows.EntryPoint]int
	dumped := false
	dump := func() {
		if dumped {
			return
		}
		dumped = true
		// Both families' Service zones (ZoneService, ZoneService6): entry points of the two
		// families never collide, so one map holds both dumps.
		for _, zone := range []uint16{flows.ZoneService, flows.ZoneService6} {
			d, err := s.cfg.Conntrack.ConntrackDestinations(ctx, zone)
			if err != nil {
				s.metrics.ConntrackOps.WithLabelValues("dump", "error").Inc()
				logger.Error(err, "Could not read a service conntrack zone; drains are kept until their maximum period", "zone", zone)
				dsts = nil
				return
			}
			s.metrics.ConntrackOps.WithLabelValues("dump", "ok").Inc()
			if dsts == nil {
				dsts = d
				continue
			}
			for e, n := range d {
				dsts[e] += n
			}
		}
	}
	if !s.drainsRecovered {
		s.drainsRecovered = true
		has := false
		for c := range invEx.Flows {
			if c.Kind() == flows.KindServiceDrain {
				has = true
				break
			}
		}
		if has {
			dump()
			for e, n := range dsts {
				if n == 0 || live[e] || !s.drainable(e) {
					continue
				}
				if fs, err := flows.BuildServiceDrain(e); err == nil && invEx.Flows[fs.Cookie()] > 0 {
					s.drains[e] = now
				}
			}
			logger.V(2).Info("Recovered drains of the previous agent", "drains", len(s.drains))
		}
	}
	if len(s.drains) > 0 {
		dump()
	}
	for e, since := range s.drains {
		switch {
		case live[e]:
		case now.Sub(since) > s.cfg.DrainPeriod:
			logger.Info("Drain ended: maximum drain period reached", "entryPoint", e.String(), "connections", dsts[e])
		case dsts != nil && dsts[e] == 0:
			logger.V(2).Info("Drain ended: no connection left", "entryPoint", e.String())
		default:
			continue
		}
		delete(s.drains, e)
	}
	s.metrics.DrainingEntryPoints.Set(float64(len(s.drains)))
}

// flushReq is one conntrack flush: the UDP entries from entry point origDst DNATed to endpoint.
type flushReq struct {
	key               flows.Key // the service port whose endpoint went away
	endpoint, origDst netip.AddrPort
}

// udpFlushes returns the conntrack flushes that applying final (and removing gone) calls for: for
// every UDP service-port flow set, every endpoint it had applied and no longer programs, behind
// every entry point it had applied. A full sync (full) compares every applied service port.
func (s *syncer) udpFlushes(final map[flows.Key]*flows.FlowSet, gone map[flows.Key]bool, full bool) []flushReq {
	if s.cfg.Conntrack == nil {
		return nil
	}
	var out []flushReq
	check := func(k flows.Key) {
		old, ok := s.applied[flows.BrEx][k]
		if !ok || k.Kind != flows.KindServicePort || len(old.Endpoints) == 0 {
			return
		}
		var keep []netip.AddrPort
		if fs := final[k]; fs != nil {
			keep = fs.Endpoints
		} else if !full && !gone[k] {
			return // not rebuilt
		}
		for _, ep := range old.Endpoints {
			if slices.Contains(keep, ep) {
				continue
			}
			for _, e := range old.EntryPoints {
				if e.Protocol == flows.UDP {
					out = append(out, flushReq{key: k, endpoint: ep, origDst: e.Addr})
				}
			}
		}
	}
	if full {
		for k := range s.applied[flows.BrEx] {
			check(k)
		}
		return out
	}
	// A partial sync looks at what it rebuilt or removed only, not at every applied flow set.
	for k := range final {
		check(k)
	}
	for k := range gone {
		if final[k] == nil {
			check(k)
		}
	}
	return out
}

// flush runs the flushes; failures are logged and counted, never fatal.
func (s *syncer) flush(ctx context.Context, reqs []flushReq) {
	logger := klog.FromContext(ctx)
	for _, q := range reqs {
		if err := s.cfg.Conntrack.FlushConntrack(ctx, flows.ConntrackFilter{Zone: flows.FamilyOf(q.endpoint.Addr()).ServiceZone(), Protocol: flows.UDP, ReplySrc: q.endpoint, OrigDst: q.origDst}); err != nil {
			s.metrics.ConntrackOps.WithLabelValues("flush", "error").Inc()
			logger.Error(err, "Could not flush the UDP conntrack entries of a removed endpoint", "endpoint", q.endpoint, "entryPoint", q.origDst)
			continue
		}
		s.metrics.ConntrackOps.WithLabelValues("flush", "ok").Inc()
	}
	if len(reqs) > 0 {
		logger.V(2).Info("Flushed UDP conntrack entries of removed endpoints", "flushes", len(reqs))
	}
}
