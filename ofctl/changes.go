package ofctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// ExtIDAgentFlows is the Interface.external_ids key srcip-agent writes on a pod's port once the
// pod's flow set (flows.KindPod, its spoof guard and delivery for that port's ofport) is in
// br-int: the flow set's cookie ("0x..."). srcip-cni's ADD waits for it (WaitExternalID)
// instead of dumping flows.
const ExtIDAgentFlows = "srcip-agent-flows"

// podIdentity returns the pod a row's external_ids name (PodPort.Namespace, Name): pod-namespace
// and pod-name (srcip-cni, Antrea) or iface-id=<namespace>_<pod> (OVN-Kubernetes).
func podIdentity(ids map[string]string) (namespace, name string, ok bool) {
	if ns, name := ids[ExtIDPodNamespace], ids[ExtIDPodName]; ns != "" && name != "" {
		return ns, name, true
	}
	if ns, name, ok := strings.Cut(ids["iface-id"], "_"); ok && ns != "" && name != "" {
		return ns, name, true
	}
	return "", "", false
}

// onEvent is the cache's event handler: it wakes every waiter (wakeup) and notes a reconnect
// (the cache repopulated: the Open_vSwitch row added, or deleted, again) for the classifier.
func (d *DB) onEvent(table string, addOrDelete bool) {
	if table == tableOpenVSwitch && addOrDelete {
		d.forceFull.Store(true)
	}
	d.wakeMu.Lock()
	close(d.wake)
	d.wake = make(chan struct{})
	d.wakeMu.Unlock()
}

// Wakeup returns a channel that is closed at the next change of any cached row: a waiter checks
// its condition on the cache, then waits on the channel it took before (WaitExternalID).
func (d *DB) Wakeup() <-chan struct{} { return d.wakeup() }

// wakeup returns a channel that is closed at the next cache change.
func (d *DB) wakeup() <-chan struct{} {
	d.wakeMu.Lock()
	defer d.wakeMu.Unlock()
	return d.wake
}

// startClassifier starts (once) the goroutine that sorts cache changes into Changes and
// PodPortChanges.
func (d *DB) startClassifier() {
	d.classifyOnce.Do(func() { go d.classify() })
}

// classify runs until Close: after every batch of cache changes it renders the tables without
// the pod ports (infraView) and signals Changes when that view differs from the last one (or on
// a reconnect, or when the view cannot be read), PodPortChanges always.
func (d *DB) classify() {
	ctx := klog.NewContext(context.Background(), d.logger)
	wake := d.wakeup()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// The baseline is the cache as the caller of Changes or PodPortChanges found it (its
	// initial population included).
	d.forceFull.Store(false)
	last, err := d.infraView(ctx)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("OVSDB not read; the next change is a full change", "err", err.Error())
	}
	bad, down := err != nil, false
	for {
		select {
		case <-d.done:
			return
		case <-tick.C:
			// A lost connection that libovsdb resumed (monitor_cond_since) replays only the
			// changes; a reconnect is still a full sync.
			if !d.c.Connected() {
				down = true
			} else if down {
				down = false
				d.forceFull.Store(true)
				notify(d.changes)
				notify(d.podChanges)
			}
			continue
		case <-wake:
		}
		wake = d.wakeup() // before reading: a change from here on wakes the next round
		view, err := d.infraView(ctx)
		full := d.forceFull.Swap(false) || bad || err != nil || view != last
		if err != nil {
			klog.FromContext(ctx).V(2).Info("OVSDB change not classified; treated as a full change", "err", err.Error())
		}
		if err == nil && view != last {
			if logger := klog.FromContext(ctx).V(4); logger.Enabled() {
				logger.Info("OVSDB changed beyond pod ports", "rows", viewDiff(last, view))
			}
		}
		bad, last = err != nil, view
		if full {
			notify(d.changes)
		}
		notify(d.podChanges)
	}
}

// infraView renders the cached Open_vSwitch, Bridge, Port, Interface and Flow_Table rows
// without the pod ports: Interfaces whose external_ids carry a pod identity (podIdentity), the
// Ports all of whose Interfaces are such (or not cached yet: a Port whose Interface rows are
// still being added), and those Ports in Bridge.ports. Two equal views mean that only pod ports
// changed between them.
func (d *DB) infraView(ctx context.Context) (string, error) {
	var (
		ovss   []ovsRow
		brs    []bridgeRow
		ports  []portRow
		ifaces []ifaceRow
		fts    []flowTableRow
	)
	for _, l := range []any{&ovss, &brs, &ports, &ifaces, &fts} {
		if err := d.c.List(ctx, l); err != nil && !errors.Is(err, client.ErrNotFound) {
			return "", fmt.Errorf("list ovsdb rows: %w", err)
		}
	}
	pod := map[string]bool{} // interface UUID -> carries a pod identity
	for _, i := range ifaces {
		_, _, ok := podIdentity(i.ExternalIDs)
		pod[i.UUID] = ok
	}
	podPort := map[string]bool{}
	for _, p := range ports {
		all := true
		for _, iu := range p.Interfaces {
			if isPod, cached := pod[iu]; cached && !isPod {
				all = false
			}
		}
		podPort[p.UUID] = all
	}
	var rows []string
	add := func(table string, uuid string, v any) {
		b, _ := json.Marshal(v)
		rows = append(rows, table+" "+uuid+" "+string(b))
	}
	for _, o := range ovss {
		o.Bridges = sorted(o.Bridges)
		add(tableOpenVSwitch, o.UUID, o)
	}
	for _, b := range brs {
		b.Ports = sorted(slices.DeleteFunc(slices.Clone(b.Ports), func(u string) bool { return podPort[u] }))
		b.Protocols = sorted(b.Protocols)
		add(tableBridge, b.UUID, b)
	}
	for _, p := range ports {
		if !podPort[p.UUID] {
			p.Interfaces = sorted(p.Interfaces)
			add(tablePort, p.UUID, p)
		}
	}
	for _, i := range ifaces {
		if !pod[i.UUID] {
			add(tableInterface, i.UUID, i)
		}
	}
	for _, f := range fts {
		add(tableFlowTable, f.UUID, f)
	}
	sort.Strings(rows)
	return strings.Join(rows, "\n"), nil
}

// viewDiff returns the rows of b not in a ("+ ...") and of a not in b ("- ..."), at most 8.
func viewDiff(a, b string) []string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	am, bm := in(a), in(b)
	var out []string
	for l := range bm {
		if !am[l] {
			out = append(out, "+ "+l)
		}
	}
	for l := range am {
		if !bm[l] {
			out = append(out, "- "+l)
		}
	}
	slices.Sort(out)
	return out[:min(len(out), 8)]
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// PodPortChanges returns a channel that receives (coalesced: capacity 1) after every batch of
// cache changes, pod-port changes included; a receive means "list PodPorts again". Changes
// receives as well when more than pod ports changed.
func (d *DB) PodPortChanges() <-chan struct{} {
	d.startClassifier()
	return d.podChanges
}

// AckPodFlows writes external_ids:ExtIDAgentFlows=<cookie> on each named Interface (one
// transaction; Interfaces already carrying that value, and names no longer in the cache, are
// skipped). Error: the transaction's.
func (d *DB) AckPodFlows(ctx context.Context, acks map[string]flows.Cookie) error {
	t := &txn{}
	for _, name := range slices.Sorted(maps.Keys(acks)) {
		i := &ifaceRow{Name: name}
		if err := d.c.Get(ctx, i); errors.Is(err, client.ErrNotFound) {
			continue
		} else if err != nil {
			return fmt.Errorf("read interface %s: %w", name, err)
		}
		v := acks[name].String()
		if i.ExternalIDs[ExtIDAgentFlows] == v {
			continue
		}
		ids := maps.Clone(i.ExternalIDs)
		if ids == nil {
			ids = map[string]string{}
		}
		ids[ExtIDAgentFlows] = v
		i.ExternalIDs = ids
		if err := t.add(d.c.Where(i).Update(i, &i.ExternalIDs)); err != nil {
			return fmt.Errorf("acknowledge the flows of %s: %w", name, err)
		}
	}
	if len(t.ops) == 0 {
		return nil
	}
	if err := d.transact(ctx, t); err != nil {
		return fmt.Errorf("acknowledge pod flows: %w", err)
	}
	return nil
}

// WaitExternalID waits until Interface name carries external_ids:key and returns its value. It
// wakes on every cache change (no polling of ovsdb-server, no process), and returns ctx's error,
// wrapped with what it saw last, when ctx ends first.
func (d *DB) WaitExternalID(ctx context.Context, name, key string) (string, error) {
	for {
		wake := d.wakeup()
		i := &ifaceRow{Name: name}
		err := d.c.Get(ctx, i)
		switch {
		case err == nil:
			if v, ok := i.ExternalIDs[key]; ok {
				return v, nil
			}
		case !errors.Is(err, client.ErrNotFound):
			return "", fmt.Errorf("read interface %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			state := "has no external_ids:" + key
			if errors.Is(err, client.ErrNotFound) {
				state = "is not in OVSDB"
			}
			return "", fmt.Errorf("interface %s %s: %w", name, state, ctx.Err())
		case <-wake:
		case <-time.After(time.Second): // a safety net: a missed wake-up costs a second at most
		}
	}
}
