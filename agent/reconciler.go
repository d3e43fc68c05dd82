package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// ErrNotSynced is returned by Sync while the Source has not delivered its initial content.
var ErrNotSynced = errors.New("state source has not synced yet")

// Event reasons.
const (
	ReasonInvalid  = "SourceIPInvalid"
	ReasonConflict = "SourceIPConflict"
	ReasonWarning  = "SourceIPWarning"
)

// applyOrder is the order bridges are written in within one sync: br-int first, so that the
// backend side of a Service exists before br-ex steers traffic into it.
var applyOrder = []flows.Bridge{flows.BrInt, flows.BrEx}

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	// NodeName is this node's name.
	NodeName string
	// Bridges are the two bridges to write (flows.BrEx and flows.BrInt).
	Bridges map[flows.Bridge]FlowBridge
	// Dataplane gives the ofports and pod ports.
	Dataplane Dataplane
	// NodePortCIDRs restricts the NodePort addresses (--nodeport-addresses); empty: no
	// restriction.
	NodePortCIDRs []netip.Prefix
	// HasSynced reports whether the Source has synced (Source.HasSynced).
	HasSynced func() bool
	// Events receives problems with objects; nil: log only.
	Events EventSink
	// Metrics; nil: a private unregistered set.
	Metrics *Metrics
	// Conntrack is the datapath's connection tracker (br-ex's ovs-vswitchd). nil: no conntrack
	// flushes of removed UDP endpoints and no drain flow sets.
	Conntrack Conntrack
	// DrainPeriod is the longest time a drain flow set (flows.KindServiceDrain) is kept for an
	// entry point that went away while ZoneService still had connections to it; 0:
	// DefaultDrainPeriod.
	DrainPeriod time.Duration
	// RepairPeriod is the period of the deep repair: a full sync at least this long after the
	// previous deep repair re-sends every desired flow with modify_strict and every group with
	// add_or_mod. 0: never.
	RepairPeriod time.Duration
}

// DefaultDrainPeriod is the default ReconcilerConfig.DrainPeriod.
const DefaultDrainPeriod = time.Hour

// Reconciler keeps the node's bridges equal to flows.Build of the cluster state. Its Handler
// methods may be called from any goroutine; Sync must only be called from one goroutine.
type Reconciler struct {
	cfg     ReconcilerConfig
	metrics *Metrics
	kick    atomic.Pointer[func()]

	nodeChanges  *ChangeTracker[string, corev1.Node]
	svcChanges   *ChangeTracker[types.NamespacedName, corev1.Service]
	sliceChanges *ChangeTracker[types.NamespacedName, discoveryv1.EndpointSlice]
	podChanges   *ChangeTracker[types.NamespacedName, corev1.Pod]
	needFull     atomic.Bool

	// Everything below is owned by the goroutine calling Sync.
	initialized bool
	nodes       map[string]*corev1.Node
	services    map[types.NamespacedName]*corev1.Service
	epSlices    map[types.NamespacedName]*discoveryv1.EndpointSlice
	slicesOf    map[types.NamespacedName]map[types.NamespacedName]bool
	pods        map[types.NamespacedName]*corev1.Pod
	podPorts    map[types.NamespacedName]PodPort

	ports       flows.Ports
	npAddrs     []netip.Addr
	nodeModel   map[string]flows.Node
	nodeList    []flows.Node
	podModel    map[types.NamespacedName]flows.Pod
	podList     []flows.Pod
	svcRaw      map[types.NamespacedName][]flows.ServicePort
	svcPorts    map[types.NamespacedName][]flows.ServicePort
	svcList     []flows.ServicePort
	svcListOK   bool
	problems    map[string]string // object key -> last reported problems, to report changes only
	claims      *claims
	groups      *flows.GroupIDs
	groupKeys   map[flows.Key]bool
	applied     map[flows.Bridge]map[flows.Key]flows.Applied
	appliedSize map[flows.Bridge]map[flows.Key]int
	kindCount   map[flows.Kind]int
	coll        *collisions
	// liveEPs counts the applied service-port flow sets that program each entry point.
	liveEPs map[flows.EntryPoint]int
	// drains holds the draining entry points with the time their drain began.
	drains          map[flows.EntryPoint]time.Time
	drainsRecovered bool
	lastRepair      time.Time

	statusMu sync.Mutex
	status   Status
}

// Status is the Reconciler's health, for /readyz.
type Status struct {
	// FullSyncDone is set after the first successful full sync.
	FullSyncDone bool
	// LastSuccess is the time of the last successful sync.
	LastSuccess time.Time
	// FailingSince is the time of the first failure after the last success (zero: not failing).
	FailingSince time.Time
	// LastError is the last sync error (nil after a success).
	LastError error
	// DataplaneError is the error of the last OVSDB read (nil: it succeeded).
	DataplaneError error
}

// NewReconciler returns a Reconciler; call SetTrigger to have changes request syncs.
func NewReconciler(cfg ReconcilerConfig) *Reconciler {
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics(nil)
	}
	r := &Reconciler{
		cfg:          cfg,
		metrics:      m,
		nodeChanges:  NewChangeTracker[string](nodeEqual),
		svcChanges:   NewChangeTracker[types.NamespacedName](serviceEqual),
		sliceChanges: NewChangeTracker[types.NamespacedName](sliceEqual),
		podChanges:   NewChangeTracker[types.NamespacedName](podEqual),
		nodes:        map[string]*corev1.Node{},
		services:     map[types.NamespacedName]*corev1.Service{},
		epSlices:     map[types.NamespacedName]*discoveryv1.EndpointSlice{},
		slicesOf:     map[types.NamespacedName]map[types.NamespacedName]bool{},
		pods:         map[types.NamespacedName]*corev1.Pod{},
		podPorts:     map[types.NamespacedName]PodPort{},
		nodeModel:    map[string]flows.Node{},
		podModel:     map[types.NamespacedName]flows.Pod{},
		svcRaw:       map[types.NamespacedName][]flows.ServicePort{},
		svcPorts:     map[types.NamespacedName][]flows.ServicePort{},
		problems:     map[string]string{},
		claims:       newClaims(),
		groups:       flows.NewGroupIDs(),
		groupKeys:    map[flows.Key]bool{},
		applied:      map[flows.Bridge]map[flows.Key]flows.Applied{},
		appliedSize:  map[flows.Bridge]map[flows.Key]int{},
		kindCount:    map[flows.Kind]int{},
		coll:         newCollisions(),
		liveEPs:      map[flows.EntryPoint]int{},
		drains:       map[flows.EntryPoint]time.Time{},
	}
	if r.cfg.DrainPeriod <= 0 {
		r.cfg.DrainPeriod = DefaultDrainPeriod
	}
	for _, b := range applyOrder {
		r.applied[b] = map[flows.Key]flows.Applied{}
		r.appliedSize[b] = map[flows.Key]int{}
	}
	r.needFull.Store(true)
	return r
}

// SetTrigger sets the function called after every recorded change (the Runner's Run).
func (r *Reconciler) SetTrigger(f func()) { r.kick.Store(&f) }

func (r *Reconciler) trigger() {
	if f := r.kick.Load(); f != nil {
		(*f)()
	}
}

// RequestFullSync makes the next sync a full one and requests it.
func (r *Reconciler) RequestFullSync() {
	r.needFull.Store(true)
	r.trigger()
}

// OnNode implements Handler.
func (r *Reconciler) OnNode(prev, cur *corev1.Node) {
	if r.nodeChanges.Update(objName(prev, cur), prev, cur) {
		r.trigger()
	}
}

// OnService implements Handler.
func (r *Reconciler) OnService(prev, cur *corev1.Service) {
	if r.svcChanges.Update(objKey(prev, cur), prev, cur) {
		r.trigger()
	}
}

// OnEndpointSlice implements Handler.
func (r *Reconciler) OnEndpointSlice(prev, cur *discoveryv1.EndpointSlice) {
	if r.sliceChanges.Update(objKey(prev, cur), prev, cur) {
		r.trigger()
	}
}

// OnPod implements Handler.
func (r *Reconciler) OnPod(prev, cur *corev1.Pod) {
	if r.podChanges.Update(objKey(prev, cur), prev, cur) {
		r.trigger()
	}
}

type metaObject interface {
	GetNamespace() string
	GetName() string
}

func objKey[T any, P interface {
	*T
	metaObject
}](prev, cur P) types.NamespacedName {
	if cur != nil {
		return nn(cur.GetNamespace(), cur.GetName())
	}
	return nn(prev.GetNamespace(), prev.GetName())
}

func objName(prev, cur *corev1.Node) string {
	if cur != nil {
		return cur.Name
	}
	return prev.Name
}

// Status returns the Reconciler's health.
func (r *Reconciler) Status() Status {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	return r.status
}

// Sync brings the bridges to the desired state: a full sync (inventory, flows.FullDiff) when one
// is due, a partial sync of the changed objects otherwise. It writes at most one bundle per
// bridge. On failure the next sync is a full one. It returns ErrNotSynced, and does nothing,
// while the Source has not synced.
func (r *Reconciler) Sync(ctx context.Context) error {
	if r.cfg.HasSynced != nil && !r.cfg.HasSynced() {
		return ErrNotSynced
	}
	full := r.needFull.Swap(false) || !r.initialized
	kind := "partial"
	if full {
		kind = "full"
	}
	start := time.Now()
	err := r.sync(ctx, full)
	r.metrics.SyncDuration.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	if err != nil {
		r.needFull.Store(true)
		r.metrics.SyncFailures.WithLabelValues(kind).Inc()
		if r.status.FailingSince.IsZero() {
			r.status.FailingSince = start
		}
		r.status.LastError = err
		return fmt.Errorf("%s sync: %w", kind, err)
	}
	r.initialized = true
	now := time.Now()
	r.status.LastSuccess, r.status.FailingSince, r.status.LastError = now, time.Time{}, nil
	if full {
		r.status.FullSyncDone = true
	}
	r.metrics.LastSuccess.Set(float64(now.UnixNano()) / 1e9)
	return nil
}

// dirty collects what a sync must rebuild.
type dirty struct {
	global   bool // this node or its ports changed: rebuild everything
	nodes    map[string]bool
	services map[types.NamespacedName]bool
	pods     map[types.NamespacedName]bool
}

func (r *Reconciler) checkout() dirty {
	d := dirty{nodes: map[string]bool{}, services: map[types.NamespacedName]bool{}, pods: map[types.NamespacedName]bool{}}
	for name, c := range r.nodeChanges.Checkout() {
		setOrDelete(r.nodes, name, c.Current)
		if name == r.cfg.NodeName {
			d.global = true
		}
		d.nodes[name] = true
	}
	for name, c := range r.svcChanges.Checkout() {
		setOrDelete(r.services, name, c.Current)
		d.services[name] = true
	}
	for name, c := range r.sliceChanges.Checkout() {
		if old := r.epSlices[name]; old != nil {
			if s := sliceService(old); s.Name != "" {
				delete(r.slicesOf[s], name)
				if len(r.slicesOf[s]) == 0 {
					delete(r.slicesOf, s)
				}
				d.services[s] = true
			}
		}
		setOrDelete(r.epSlices, name, c.Current)
		if s := sliceService(c.Current); s.Name != "" {
			if r.slicesOf[s] == nil {
				r.slicesOf[s] = map[types.NamespacedName]bool{}
			}
			r.slicesOf[s][name] = true
			d.services[s] = true
		}
	}
	for name, c := range r.podChanges.Checkout() {
		setOrDelete(r.pods, name, c.Current)
		d.pods[name] = true
	}
	return d
}

func setOrDelete[K comparable, V any](m map[K]*V, k K, v *V) {
	if v == nil {
		delete(m, k)
	} else {
		m[k] = v
	}
}

func (r *Reconciler) sync(ctx context.Context, full bool) error {
	logger := klog.FromContext(ctx)
	d := r.checkout()

	npAddrs := NodePortAddresses(r.nodes[r.cfg.NodeName], r.cfg.NodePortCIDRs)
	if !slices.Equal(npAddrs, r.npAddrs) {
		d.global = true
		r.npAddrs = npAddrs
		r.claims.nodeAddrs = npAddrs
	}
	if d.global {
		full = true
	}
	if full {
		if err := r.refreshDataplane(ctx); err != nil {
			return err
		}
		// Everything is rebuilt from the caches.
		for name := range r.nodes {
			d.nodes[name] = true
		}
		for name := range r.nodeModel {
			d.nodes[name] = true
		}
		for name := range r.services {
			d.services[name] = true
		}
		for name := range r.svcPorts {
			d.services[name] = true
		}
		for name := range r.pods {
			d.pods[name] = true
		}
		for name := range r.podPorts {
			d.pods[name] = true
		}
		for name := range r.podModel {
			d.pods[name] = true
		}
	}

	touched := map[flows.Key]bool{}
	cidrsChanged := r.updateNodes(logger, d.nodes, touched)
	r.updatePods(logger, d.pods, touched)
	r.updateServices(logger, d.services, touched)
	if cidrsChanged && !full {
		// BuildServicePort keeps only endpoints inside some node's pod CIDRs.
		for _, sps := range r.svcPorts {
			for _, sp := range sps {
				touched[sp.Key()] = true
			}
		}
	}

	st := &flows.State{
		Node:              r.cfg.NodeName,
		Ports:             r.ports,
		Nodes:             r.nodeList,
		NodePortAddresses: r.npAddrs,
		Pods:              r.podList,
	}
	if full {
		st.Services = r.serviceList()
		return r.fullSync(ctx, st)
	}
	// The partial builders read no other Service than the one they build.
	return r.partialSync(ctx, st, touched)
}

func (r *Reconciler) refreshDataplane(ctx context.Context) (err error) {
	defer func() {
		r.statusMu.Lock()
		r.status.DataplaneError = err
		r.statusMu.Unlock()
	}()
	ports, err := r.cfg.Dataplane.EnsureIntegration(ctx)
	if err != nil {
		return fmt.Errorf("ensure integration bridge: %w", err)
	}
	pps, err := r.cfg.Dataplane.PodPorts(ctx)
	if err != nil {
		return fmt.Errorf("list pod ports: %w", err)
	}
	r.ports = ports
	r.podPorts = make(map[types.NamespacedName]PodPort, len(pps))
	for _, pp := range pps {
		r.podPorts[nn(pp.Namespace, pp.Name)] = pp
	}
	return nil
}

// updateNodes reconverts the named nodes and reports whether the set of pod CIDRs changed.
func (r *Reconciler) updateNodes(logger klog.Logger, names map[string]bool, touched map[flows.Key]bool) bool {
	if len(names) == 0 {
		return false
	}
	cidrsChanged := false
	for name := range names {
		old, had := r.nodeModel[name]
		r.updateNode(logger, name)
		nw, has := r.nodeModel[name]
		if had != has || !slices.Equal(old.PodCIDRs, nw.PodCIDRs) {
			cidrsChanged = true
		}
		if name != r.cfg.NodeName {
			touched[flows.Key{Kind: flows.KindNode, Name: name}] = true
		}
	}
	r.nodeList = r.nodeList[:0]
	for _, n := range r.nodeModel {
		r.nodeList = append(r.nodeList, n)
	}
	slices.SortFunc(r.nodeList, func(a, b flows.Node) int { return cmp.Compare(a.Name, b.Name) })
	return cidrsChanged
}

func (r *Reconciler) updateNode(logger klog.Logger, name string) {
	delete(r.nodeModel, name)
	n := r.nodes[name]
	if n == nil {
		r.report(nil, "node/"+name, "", nil)
		return
	}
	fn, err := ConvertNode(n)
	if err != nil {
		r.report(n, "node/"+name, ReasonInvalid, []string{err.Error()})
		logger.V(2).Info("Node skipped", "node", klog.KObj(n), "reason", err.Error())
		return
	}
	r.report(n, "node/"+name, ReasonInvalid, nil)
	r.nodeModel[name] = fn
}

func (r *Reconciler) updatePods(logger klog.Logger, names map[types.NamespacedName]bool, touched map[flows.Key]bool) {
	if len(names) == 0 {
		return
	}
	for name := range names {
		delete(r.podModel, name)
		touched[flows.Key{Kind: flows.KindPod, Namespace: name.Namespace, Name: name.Name}] = true
		pp, ok := r.podPorts[name]
		if !ok {
			continue
		}
		pod := r.pods[name]
		p, ok, problems := LocalPod(pp, pod)
		if pod != nil {
			r.report(pod, "pod/"+name.String(), ReasonInvalid, problems)
		}
		if !ok {
			logger.V(2).Info("Pod port without usable IPv4 address or ofport, skipped", "pod", klog.KRef(name.Namespace, name.Name), "interface", pp.Interface)
			continue
		}
		r.podModel[name] = p
	}
	r.podList = r.podList[:0]
	for _, p := range r.podModel {
		r.podList = append(r.podList, p)
	}
	slices.SortFunc(r.podList, func(a, b flows.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

func (r *Reconciler) updateServices(logger klog.Logger, names map[types.NamespacedName]bool, touched map[flows.Key]bool) {
	if len(names) == 0 {
		return
	}
	convProblems := map[types.NamespacedName][]string{}
	resolveSet := map[types.NamespacedName]bool{}
	for name := range names {
		svc := r.services[name]
		var sps []flows.ServicePort
		var rank claimRank
		if svc != nil {
			var eps []*discoveryv1.EndpointSlice
			for s := range r.slicesOf[name] {
				eps = append(eps, r.epSlices[s])
			}
			slices.SortFunc(eps, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
			sps, convProblems[name] = ServicePorts(svc, eps)
			rank = claimRank{created: svc.CreationTimestamp.Time, name: name}
		}
		if len(sps) == 0 {
			delete(r.svcRaw, name)
		} else {
			r.svcRaw[name] = sps
		}
		resolveSet[name] = true
		for _, o := range r.claims.set(name, rank, sps) {
			resolveSet[o] = true
		}
	}
	for name := range resolveSet {
		for _, sp := range r.svcPorts[name] {
			touched[sp.Key()] = true
		}
		final, conflicts := r.claims.resolve(name, r.svcRaw[name])
		for i := range final {
			k := final[i].Key()
			final[i].GroupID = r.groups.ID(k)
			r.groupKeys[k] = true
			touched[k] = true
		}
		if len(final) == 0 {
			delete(r.svcPorts, name)
		} else {
			r.svcPorts[name] = final
		}
		r.svcListOK = false
		svc := r.services[name]
		if svc == nil {
			r.report(nil, "service/"+name.String(), "", nil)
			continue
		}
		if names[name] {
			r.report(svc, "service/"+name.String(), ReasonInvalid, convProblems[name])
		}
		r.report(svc, "conflict/"+name.String(), ReasonConflict, conflicts)
		if len(convProblems[name])+len(conflicts) > 0 {
			logger.V(2).Info("Service has problems", "service", klog.KObj(svc), "problems", append(convProblems[name], conflicts...))
		}
	}
}

// serviceList returns every converted Service port, sorted by key; it is rebuilt only after a
// Service changed.
func (r *Reconciler) serviceList() []flows.ServicePort {
	if r.svcListOK {
		return r.svcList
	}
	names := make([]types.NamespacedName, 0, len(r.svcPorts))
	for name := range r.svcPorts {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	r.svcList = r.svcList[:0]
	for _, name := range names {
		r.svcList = append(r.svcList, r.svcPorts[name]...)
	}
	r.svcListOK = true
	return r.svcList
}

// report sends problems of one object to the EventSink, only when they differ from the last
// report under the same key (so periodic full syncs do not repeat Events).
func (r *Reconciler) report(obj runtime.Object, key, reason string, problems []string) {
	msg := strings.Join(problems, "; ")
	if r.problems[key] == msg {
		return
	}
	if msg == "" {
		delete(r.problems, key)
		return
	}
	r.problems[key] = msg
	if r.cfg.Events != nil && obj != nil {
		for _, p := range problems {
			r.cfg.Events.Warn(obj, reason, p)
		}
	}
}

func (r *Reconciler) fullSync(ctx context.Context, st *flows.State) error {
	logger := klog.FromContext(ctx)
	desired, err := flows.Build(st)
	if err != nil {
		// Flow sets that do not render are left out; the rest is still applied.
		logger.Error(err, "Some flow sets could not be built")
	}
	// Conflicting flows: index every flow set as built, then rebuild the losers.
	r.coll.reset()
	for k, fs := range desired {
		r.coll.set(k, fs.MatchKeys())
	}
	final := make(map[flows.Key]*flows.FlowSet, len(desired))
	for k, fs := range desired {
		f, err := r.resolveConflicts(fs)
		if err != nil {
			logger.Error(err, "Flow set could not be rebuilt without its conflicting flows; left out", "key", k.String())
			continue
		}
		final[k] = f
	}
	r.metrics.FlowConflicts.Set(float64(r.coll.conflicts()))

	invs := map[flows.Bridge]flows.Inventory{}
	for _, b := range applyOrder {
		inv, err := r.cfg.Bridges[b].Inventory(ctx)
		if err != nil {
			return fmt.Errorf("read inventory of %s: %w", b, err)
		}
		invs[b] = inv
	}
	r.maintainDrains(ctx, final, invs[flows.BrEx])
	flushes := r.udpFlushes(final, nil, true)

	byBridge := map[flows.Bridge][]*flows.FlowSet{}
	for _, fs := range final {
		byBridge[fs.Bridge] = append(byBridge[fs.Bridge], fs)
	}
	now := time.Now()
	repair := false
	if r.cfg.RepairPeriod > 0 {
		if r.lastRepair.IsZero() {
			r.lastRepair = now // the first full sync (at start) writes only what differs
		} else if now.Sub(r.lastRepair) >= r.cfg.RepairPeriod {
			repair = true
		}
	}
	for _, b := range applyOrder {
		plan := flows.FullDiff(b, byBridge[b], invs[b])
		if repair {
			plan.RepairAll(byBridge[b])
		}
		if err := r.apply(ctx, b, &plan); err != nil {
			return err
		}
		next := map[flows.Key]*flows.FlowSet{}
		for _, fs := range byBridge[b] {
			next[fs.Key] = fs
		}
		added := make(map[*flows.FlowSet]bool, len(plan.Add))
		for _, fs := range plan.Add {
			added[fs] = true
		}
		for k, fs := range next {
			// A changed flow set that needed no write (e.g. one left without flows by a conflict)
			// still reports its warnings.
			if old, ok := r.applied[b][k]; !added[fs] && (!ok || old.Cookie != fs.Cookie()) {
				r.reportWarnings(logger.WithValues("bridge", b.String()), fs)
			}
		}
		for k := range r.applied[b] {
			if next[k] == nil {
				r.setApplied(b, k, nil)
			}
		}
		for k, fs := range next {
			r.setApplied(b, k, fs)
		}
		if b == flows.BrEx {
			r.flush(ctx, flushes)
		}
	}
	if repair {
		r.lastRepair = now
		logger.V(2).Info("Deep repair done: every flow re-sent with modify_strict, every group with add_or_mod")
	}
	for k := range r.groupKeys {
		if desired[k] == nil && !r.wantsGroup(k) {
			r.groups.Release(k)
			delete(r.groupKeys, k)
		}
	}
	logger.V(2).Info("Full sync done", "flowSets", len(final))
	return nil
}

// wantsGroup reports whether k is a converted Service port (its group id stays reserved even
// when its flow set failed to build).
func (r *Reconciler) wantsGroup(k flows.Key) bool {
	return slices.ContainsFunc(r.svcPorts[nn(k.Namespace, k.Name)], func(sp flows.ServicePort) bool { return sp.Key() == k })
}

// buildKey builds the flow set of k from the caches (nil: k has none any more).
func (r *Reconciler) buildKey(st *flows.State, k flows.Key) (*flows.FlowSet, error) {
	switch k.Kind {
	case flows.KindExBase:
		return flows.BuildExBase(st)
	case flows.KindIntBase:
		return flows.BuildIntBase(st)
	case flows.KindNode:
		n, ok := r.nodeModel[k.Name]
		if !ok || n.Name == r.cfg.NodeName {
			return nil, nil
		}
		return flows.BuildNode(st, n)
	case flows.KindPod:
		p, ok := r.podModel[nn(k.Namespace, k.Name)]
		if !ok {
			return nil, nil
		}
		return flows.BuildPod(st, p)
	case flows.KindServicePort:
		sps := r.svcPorts[nn(k.Namespace, k.Name)]
		i := slices.IndexFunc(sps, func(sp flows.ServicePort) bool { return sp.Key() == k })
		if i < 0 {
			return nil, nil
		}
		return flows.BuildServicePort(st, &sps[i])
	case flows.KindServiceDrain:
		e, ok := k.DrainEntryPoint()
		if _, draining := r.drains[e]; !ok || !draining {
			return nil, nil
		}
		return flows.BuildServiceDrain(e)
	}
	return nil, fmt.Errorf("unknown flow set kind %s", k.Kind)
}

func (r *Reconciler) partialSync(ctx context.Context, st *flows.State, touched map[flows.Key]bool) error {
	logger := klog.FromContext(ctx)
	plans := map[flows.Bridge]*flows.Plan{}
	for _, b := range applyOrder {
		plans[b] = &flows.Plan{Bridge: b}
	}
	built := map[flows.Key]*flows.FlowSet{}
	gone := map[flows.Key]bool{}
	buildOne := func(k flows.Key) {
		fs, err := r.buildKey(st, k)
		switch {
		case err != nil:
			// Keep what is installed; the next full sync retries.
			logger.Error(err, "Flow set could not be built, keeping the installed one", "key", k.String())
		case fs == nil:
			gone[k] = true
		default:
			built[k] = fs
		}
	}
	// The base pipelines are rebuilt every time: they are cheap and may read any part of st.
	buildOne(flows.Key{Kind: flows.KindExBase})
	buildOne(flows.Key{Kind: flows.KindIntBase})
	for k := range touched {
		buildOne(k)
	}
	// Conflicting flows: flow sets whose contested match keys changed are rebuilt too.
	affected := map[flows.Key]bool{}
	for k, fs := range built {
		for o := range r.coll.set(k, fs.MatchKeys()) {
			affected[o] = true
		}
	}
	for k := range gone {
		for o := range r.coll.set(k, nil) {
			affected[o] = true
		}
	}
	for o := range affected {
		if built[o] == nil && !gone[o] {
			buildOne(o)
		}
	}
	final := make(map[flows.Key]*flows.FlowSet, len(built))
	for k, fs := range built {
		f, err := r.resolveConflicts(fs)
		if err != nil {
			logger.Error(err, "Flow set could not be rebuilt without its conflicting flows, keeping the installed one", "key", k.String())
			continue
		}
		final[k] = f
	}
	// Entry points that went away while connections may remain are drained.
	for _, k := range r.drainChanges(final, gone) {
		buildOne(k)
		if fs := built[k]; fs != nil {
			final[k] = fs
		}
	}
	flushes := r.udpFlushes(final, gone, false)
	for k, fs := range final {
		if old, ok := r.applied[fs.Bridge][k]; ok {
			plans[fs.Bridge].Replace(&old, fs)
		} else {
			plans[fs.Bridge].Replace(nil, fs)
		}
	}
	for k := range gone {
		for _, b := range applyOrder {
			if old, ok := r.applied[b][k]; ok {
				plans[b].Replace(&old, nil)
			}
		}
	}
	for _, b := range applyOrder {
		if err := r.apply(ctx, b, plans[b]); err != nil {
			return err
		}
		for _, fs := range plans[b].Add {
			r.setApplied(b, fs.Key, fs)
		}
		for k := range gone {
			if _, ok := r.applied[b][k]; ok {
				r.setApplied(b, k, nil)
			}
		}
		if b == flows.BrEx {
			r.flush(ctx, flushes)
		}
	}
	for k := range gone {
		if r.groupKeys[k] {
			r.groups.Release(k)
			delete(r.groupKeys, k)
		}
	}
	if n := len(plans[flows.BrEx].Add) + len(plans[flows.BrInt].Add) + len(gone); n > 0 {
		logger.V(2).Info("Partial sync done", "rebuilt", len(touched), "changed", n)
	}
	return nil
}

// apply writes one plan as one bundle (nothing when it is empty) and reports the warnings of
// the flow sets it adds.
func (r *Reconciler) apply(ctx context.Context, b flows.Bridge, plan *flows.Plan) error {
	if plan.Empty() {
		return nil
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
	if err := r.cfg.Bridges[b].Bundle(ctx, lines); err != nil {
		return fmt.Errorf("apply bundle of %d lines to %s: %w", len(lines), b, err)
	}
	r.metrics.BundleLines.WithLabelValues(b.String()).Add(float64(len(lines)))
	for _, fs := range plan.Add {
		r.reportWarnings(logger, fs)
	}
	return nil
}

// reportWarnings reports the warnings of a flow set that was just applied.
func (r *Reconciler) reportWarnings(logger klog.Logger, fs *flows.FlowSet) {
	r.report(r.objectOf(fs.Key), "warnings/"+fs.Key.String(), ReasonWarning, fs.Warnings)
	if len(fs.Warnings) > 0 {
		logger.Info("Flow set built with warnings", "key", fs.Key.String(), "warnings", fs.Warnings)
	}
}

func (r *Reconciler) objectOf(k flows.Key) runtime.Object {
	switch k.Kind {
	case flows.KindServicePort:
		if s := r.services[nn(k.Namespace, k.Name)]; s != nil {
			return s
		}
	case flows.KindPod:
		if p := r.pods[nn(k.Namespace, k.Name)]; p != nil {
			return p
		}
	case flows.KindNode:
		if n := r.nodes[k.Name]; n != nil {
			return n
		}
	}
	return nil
}

// setApplied records fs (nil: nothing) as applied for k on b and keeps the metrics current.
func (r *Reconciler) setApplied(b flows.Bridge, k flows.Key, fs *flows.FlowSet) {
	bl := b.String()
	if old, ok := r.applied[b][k]; ok {
		if k.Kind == flows.KindServicePort {
			for _, e := range old.EntryPoints {
				if r.liveEPs[e]--; r.liveEPs[e] <= 0 {
					delete(r.liveEPs, e)
				}
			}
		}
		r.metrics.AppliedFlows.WithLabelValues(bl).Sub(float64(r.appliedSize[b][k]))
		r.metrics.AppliedGroups.WithLabelValues(bl).Sub(float64(len(old.Groups)))
		r.kindCount[k.Kind]--
		delete(r.applied[b], k)
		delete(r.appliedSize[b], k)
	}
	if fs != nil {
		r.applied[b][k] = flows.AppliedOf(fs)
		if k.Kind == flows.KindServicePort {
			for _, e := range fs.EntryPoints {
				r.liveEPs[e]++
			}
		}
		r.appliedSize[b][k] = len(fs.FlowLines())
		r.metrics.AppliedFlows.WithLabelValues(bl).Add(float64(len(fs.FlowLines())))
		r.metrics.AppliedGroups.WithLabelValues(bl).Add(float64(len(fs.Groups)))
		r.kindCount[k.Kind]++
	}
	r.metrics.DesiredFlowSets.WithLabelValues(k.Kind.String()).Set(float64(r.kindCount[k.Kind]))
}

// Applied returns a copy of what the Reconciler holds as applied on b (for tests and debugging).
// It must be called from the goroutine that calls Sync.
func (r *Reconciler) Applied(b flows.Bridge) map[flows.Key]flows.Applied {
	out := make(map[flows.Key]flows.Applied, len(r.applied[b]))
	for k, v := range r.applied[b] {
		out[k] = v
	}
	return out
}
