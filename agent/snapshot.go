package agent

import (
	"cmp"
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/flowsnap"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

// DefaultSnapshotInterval is the default FlowSnapshotConfig.MinInterval.
const DefaultSnapshotInterval = 2 * time.Second

// FlowSnapshotConfig makes the agent keep a flow snapshot (package flowsnap): the flows and groups
// it has applied, per bridge, as `ovs-ofctl bundle` lines, rendered and written atomically to Path
// by a goroutine of their own after the syncs that changed what is applied, at most every
// MinInterval, and once more when the agent stops. `srcip-agent flow-restore` replays it into an ovs-vswitchd that restarted while no
// agent runs (docs/node-recovery.md). An agent that never completed a sync writes nothing, so a
// restarted agent that cannot reach its API server leaves the last good snapshot alone.
type FlowSnapshotConfig struct {
	// Path is the snapshot file (its directory must exist and be writable).
	Path string
	// BridgeNames are the OVS names of flows.BrEx and flows.BrInt (written into the snapshot).
	BridgeNames map[flows.Bridge]string
	// MinInterval is the shortest time between two writes (0: DefaultSnapshotInterval).
	MinInterval time.Duration
}

// snapshotter keeps every applied flow set (set, from the sync goroutine) and writes the
// snapshot file from its own goroutine (run), which renders each flow set's lines once, off the
// sync path, and then keeps only the lines.
type snapshotter struct {
	cfg    FlowSnapshotConfig
	node   string
	bootID string
	perMsg int
	// metrics gets each write's outcome (FlowSnapshotLastWrite, FlowSnapshotBytes,
	// FlowSnapshotWriteErrors).
	metrics *Metrics

	mu   sync.Mutex
	sets map[flows.Bridge]map[flows.Key]*snapEntry
	gen  uint64 // bumped by every change of sets
	kick chan struct{}
}

// snapEntry is one applied flow set: until run renders it, the flow set itself (fs, never
// modified once applied); then its group lines (written before every flow line of the bridge)
// and its flow lines.
type snapEntry struct {
	cookie        flows.Cookie
	fs            *flows.FlowSet
	groups, flows []string
}

func newSnapshotter(cfg FlowSnapshotConfig, node string, perMsg int, m *Metrics) *snapshotter {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = DefaultSnapshotInterval
	}
	s := &snapshotter{cfg: cfg, node: node, bootID: flowsnap.ReadBootID(), perMsg: perMsg, metrics: m,
		sets: map[flows.Bridge]map[flows.Key]*snapEntry{}, kick: make(chan struct{}, 1)}
	for _, b := range applyOrder {
		s.sets[b] = map[flows.Key]*snapEntry{}
	}
	return s
}

// set records fs (nil: nothing) as applied for k on b. A flow set whose cookie is already
// recorded is not recorded again (the cookie is the fingerprint of its flows and groups).
func (s *snapshotter) set(b flows.Bridge, k flows.Key, fs *flows.FlowSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.sets[b][k]
	switch {
	case fs == nil && ok:
		delete(s.sets[b], k)
	case fs == nil, ok && old.cookie == fs.Cookie():
		return
	default:
		s.sets[b][k] = &snapEntry{cookie: fs.Cookie(), fs: fs}
	}
	s.gen++
}

// changed asks run for a write (after a sync's apply step).
func (s *snapshotter) changed() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// render fills e's lines from its flow set.
func (s *snapshotter) render(b flows.Bridge, e *snapEntry) {
	plan := flows.Plan{Bridge: b, Add: []*flows.FlowSet{e.fs}, BucketsPerMessage: s.perMsg}
	for _, l := range openflow.Text(plan.Messages()) {
		if strings.HasPrefix(l, "group ") {
			e.groups = append(e.groups, l)
		} else {
			e.flows = append(e.flows, l)
		}
	}
}

// snapshot returns the snapshot of what is recorded now and its generation. It renders the flow
// sets recorded since the last call without holding the lock.
func (s *snapshotter) snapshot() (*flowsnap.Snapshot, uint64) {
	type todo struct {
		b flows.Bridge
		k flows.Key
		e *snapEntry
	}
	var pending []todo
	s.mu.Lock()
	for _, b := range applyOrder {
		for k, e := range s.sets[b] {
			if e.fs != nil {
				pending = append(pending, todo{b, k, e})
			}
		}
	}
	s.mu.Unlock()
	done := make([]*snapEntry, len(pending))
	for i, p := range pending {
		r := &snapEntry{cookie: p.e.cookie, fs: p.e.fs}
		s.render(p.b, r)
		r.fs = nil
		done[i] = r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range pending {
		if s.sets[p.b][p.k] == p.e { // not replaced meanwhile
			s.sets[p.b][p.k] = done[i]
		}
	}
	snap := &flowsnap.Snapshot{Node: s.node, BootID: s.bootID, Written: time.Now()}
	for _, b := range applyOrder {
		entries := make([]*snapEntry, 0, len(s.sets[b]))
		for _, e := range s.sets[b] {
			if e.fs != nil { // recorded while this call rendered: render it now
				r := &snapEntry{cookie: e.cookie, fs: e.fs}
				s.render(b, r)
				e = r
			}
			entries = append(entries, e)
		}
		// A stable order: the same applied state gives the same file.
		slices.SortFunc(entries, func(x, y *snapEntry) int { return cmp.Compare(x.cookie, y.cookie) })
		var lines []string
		for _, e := range entries {
			lines = append(lines, e.groups...)
		}
		for _, e := range entries {
			lines = append(lines, e.flows...)
		}
		snap.Bridges = append(snap.Bridges, flowsnap.Bridge{Name: s.cfg.BridgeNames[b], Lines: lines})
	}
	return snap, s.gen
}

// run writes the snapshot after changes, at most every MinInterval, until stop is closed (after
// the last sync); then it writes once more if anything changed since the last write.
func (s *snapshotter) run(ctx context.Context, stop <-chan struct{}) {
	logger := klog.FromContext(ctx).WithValues("path", s.cfg.Path)
	var written uint64
	var last time.Time
	write := func() {
		snap, gen := s.snapshot()
		if gen == written {
			return
		}
		start := time.Now()
		if err := flowsnap.WriteSnapshot(s.cfg.Path, snap); err != nil {
			s.metrics.FlowSnapshotWriteErrors.Inc()
			logger.Error(err, "Could not write the flow snapshot; flow-restore replays an older one, or only the base flow")
			return
		}
		written, last = gen, time.Now()
		s.metrics.FlowSnapshotLastWrite.Set(float64(last.UnixNano()) / 1e9)
		if fi, err := os.Stat(s.cfg.Path); err == nil {
			s.metrics.FlowSnapshotBytes.Set(float64(fi.Size()))
		}
		logger.V(2).Info("Wrote the flow snapshot", "lines", snap.Lines(), "elapsed", time.Since(start).Round(time.Microsecond))
	}
	for {
		select {
		case <-stop:
			write()
			return
		case <-s.kick:
		}
		if wait := s.cfg.MinInterval - time.Since(last); wait > 0 {
			select {
			case <-stop:
				write()
				return
			case <-time.After(wait):
			}
		}
		write()
	}
}
