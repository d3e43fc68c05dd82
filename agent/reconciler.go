package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	"github.com/ovs-srcip/ovs-srcip/flows"
)

// ErrNotSynced is returned by Sync while the Source has not delivered its initial content.
var ErrNotSynced = errors.New("state source has not synced yet")

// Event reasons.
const (
	ReasonInvalid  = "SourceIPInvalid"
	ReasonConflict = "SourceIPConflict"
	// ReasonPortBlocksExhausted: an EgressGateway's pods wait for a source-port block.
	ReasonPortBlocksExhausted = "PortBlocksExhausted"
	ReasonWarning             = "SourceIPWarning"
	// ReasonRejected: Open vSwitch rejected the object's flows; the rest of the node's changes
	// were applied (docs/field-cases.md#c33).
	ReasonRejected = "SourceIPRejected"
	// ReasonDeclined: a Service port is left to the host because an endpoint is outside every
	// node's pod CIDRs, e.g. a hostNetwork endpoint (docs/field-cases.md#c34); or, on an
	// EgressGateway, this node declines to be the gateway of an egress IP (an IPv6 one in a
	// secondary NIC's IPv6 subnet: EgressIPState.Declined).
	ReasonDeclined = "SourceIPDeclined"
)

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
	// ExternalIPCIDRs are the ranges externalIPs may be served from (--external-ip-cidrs);
	// empty: no externalIP is served (see admission).
	ExternalIPCIDRs []netip.Prefix
	// ServiceCIDRs are the cluster's Service CIDRs (--service-cidrs, the API server's
	// --service-cluster-ip-range): no LoadBalancer IP or externalIP inside them is served. Empty:
	// only the ClusterIPs of the Services the agent sees are refused.
	ServiceCIDRs []netip.Prefix
	// SCTP says why this node declines SCTP Service ports (SCTPSupport of br-ex's datapath
	// type and ovs-vswitchd's version, detected at start); "": a generic reason.
	SCTP string
	// RouteNextHops returns the next hops (gateways) of this node's routes, read at every full
	// sync: no LoadBalancer IP or externalIP equal to one is served. nil: none are refused.
	RouteNextHops func(context.Context) ([]netip.Addr, error)
	// EgressClusterCIDRs are the cluster's Service and node networks, never sent to an egress
	// gateway (--egress-cluster-cidrs; pod CIDRs and node InternalIPs are always excluded).
	EgressClusterCIDRs []netip.Prefix
	// NonMasqueradeCIDRs are the routed pods' CIDRs (flows.NonMasqueradeSet of
	// --non-masquerade-cidrs and --masquerade-link-local; docs/routed-pods.md): destinations pods
	// reach with their own IP, sources that reach pods by their IP through any node. Nil: off.
	NonMasqueradeCIDRs []netip.Prefix
	// EgressPortPool is how the EgressGateways' source-port blocks are cut (zero:
	// DefaultPortPool; docs/egress.md "Port blocks").
	EgressPortPool PortPool
	// PreserveSourceIP says which Services are served (--preserve-source-ip; Selector.Select):
	// PreserveAnnotated (also ""), those annotated "true"; PreserveAll, every eligible Service
	// not annotated "false".
	PreserveSourceIP PreserveMode
	// ChooseGateway picks the active gateway of an egress IP (nil: StatusGateway).
	ChooseGateway GatewayChooser
	// Election elects the gateways (a Lease per egress IP); it replaces ChooseGateway when set.
	Election GatewayElection
	// Announcer sends the gratuitous ARP of an egress IP this node becomes the gateway of, after
	// the sync that installed its ARP answer (nil: none).
	Announcer Announcer
	// EgressStatus receives the converted policies after every successful sync (nil: no status
	// is written, e.g. manifests mode).
	EgressStatus EgressStatusSink
	// NodePortRange is the cluster's NodePort range, inclusive (--service-node-port-range);
	// zero: DefaultNodePortRange. NodePorts outside it are refused (see admission).
	NodePortRange [2]uint16
	// Manifests is the agent's --manifests directory, only reported (Report.Flags); "" with the
	// Kubernetes API.
	Manifests string
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
	// ZoneLimitPercent bounds each conntrack zone of the pipeline (flows.Zones) to this percentage
	// of the datapath's conntrack maximum, so that a flood on one entry point (a SYN flood
	// commits one entry per SYN) cannot fill the table the other zones and paths share
	// (docs/field-cases.md#c35). Set at every full sync when Conntrack is a ConntrackLimiter.
	// 0: no limits (existing limits are lifted).
	ZoneLimitPercent int
	// RepairPeriod is the period of the deep repair: a full sync at least this long after the
	// previous deep repair re-sends every desired flow with modify_strict and every group with
	// add_or_mod. 0: never.
	RepairPeriod time.Duration
	// BucketsPerMessage is the most group buckets one OpenFlow message carries; larger groups
	// are written as add_or_mod plus insert_bucket messages in the same bundle (0:
	// flows.DefaultBucketsPerMessage).
	BucketsPerMessage int
	// ReleaseMemory makes the Reconciler return the memory its first full sync freed to the
	// operating system (runtime/debug.FreeOSMemory) as soon as that sync is done, on another
	// goroutine (the process's memory, not a test's).
	ReleaseMemory bool
	// FlowSnapshot, when set, keeps a flow snapshot of what is applied (FlowSnapshotConfig;
	// written by Agent.Run's goroutine). nil: none.
	FlowSnapshot *FlowSnapshotConfig
}

// DefaultDrainPeriod is the default ReconcilerConfig.DrainPeriod.
const DefaultDrainPeriod = time.Hour

// Reconciler keeps the node's bridges equal to the flow sets built from the cluster state. It is
// the Source's Handler (its methods may be called from any goroutine: they only record changes)
// and runs syncs from one goroutine (Sync). It owns the two halves of a sync and the health they
// report: the model (caches, conversion, claims, which objects dirty which keys; model.go) and
// the syncer (build -> resolve conflicts -> drains -> plan -> apply; syncer.go).
type Reconciler struct {
	cfg      ReconcilerConfig
	metrics  *Metrics
	kick     atomic.Pointer[func()]
	needFull atomic.Bool
	// pendingSince is when the oldest object change that no sync has applied yet arrived
	// (Unix ns; 0: none).
	pendingSince atomic.Int64
	// affinityTimer requests a sync when the next affinity period starts (affinityAt; armAffinity).
	affinityMu    sync.Mutex
	affinityAt    time.Time
	affinityTimer *time.Timer
	// memReleased is closed once the memory of the first full sync is returned
	// (ReconcilerConfig.ReleaseMemory).
	memReleased chan struct{}
	// memHeld is the heap held from the OS before and after that release (bytes; tests).
	memHeld [2]uint64

	// Owned by the goroutine calling Sync.
	initialized bool
	model       *model
	syncer      *syncer

	statusMu sync.Mutex
	status   Status
	// syncMu is held by Sync and by Report (which reads the model and the syncer).
	syncMu sync.Mutex

	// announced are the egress IPs this node answers for and has announced, with the br-ex
	// port announced on (sync goroutine): a move to another uplink (docs/egress.md "Secondary
	// NICs") is announced again.
	announced map[netip.Addr]int
}

// Status is the Reconciler's health, for /readyz.
type Status struct {
	// FullSyncDone is set after the first successful full sync.
	FullSyncDone bool
	// LastSuccess is the time of the last successful sync; LastFullSuccess of the last
	// successful full sync.
	LastSuccess     time.Time
	LastFullSuccess time.Time
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
	if cfg.DrainPeriod <= 0 {
		cfg.DrainPeriod = DefaultDrainPeriod
	}
	r := &Reconciler{cfg: cfg, metrics: m,
		model:  newModel(cfg.NodeName, cfg.NodePortCIDRs, cfg.ExternalIPCIDRs, cfg.NodePortRange, cfg.PreserveSourceIP, cfg.Events),
		syncer: newSyncer(cfg, m), memReleased: make(chan struct{})}
	r.model.egressClusterCIDRs = cfg.EgressClusterCIDRs
	r.model.st.NonMasqueradeCIDRs = cfg.NonMasqueradeCIDRs
	r.model.portPool = cfg.EgressPortPool
	r.model.localPortBlocks = cfg.EgressStatus == nil
	if r.model.portPool.Size == 0 {
		r.model.portPool = DefaultPortPool
	}
	r.model.admit.setServiceCIDRs(cfg.ServiceCIDRs, nil)
	r.model.nextHops = cfg.RouteNextHops
	r.model.sel.SCTP = cfg.SCTP
	r.model.chooseGateway = cfg.ChooseGateway
	r.model.election = cfg.Election
	r.announced = map[netip.Addr]int{}
	r.syncer.warn = func(fs *flows.FlowSet) {
		if r.model.quiet(fs.Warnings) {
			return
		}
		reason := ReasonWarning
		if fs.Declined != "" {
			reason = ReasonDeclined
		}
		r.model.report(r.model.objectOf(fs.Key), "warnings/"+fs.Key.String(), reason, fs.Warnings)
	}
	r.syncer.reject = func(k flows.Key, problem string) {
		var problems []string
		if problem != "" {
			problems = []string{problem}
		}
		r.model.report(r.model.objectOf(k), "rejected/"+k.String(), ReasonRejected, problems)
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

// armAffinity makes sure a sync runs when the next affinity period starts (next; zero: none is
// due): the sessionAffinity ports' groups then get the new period's hash basis.
func (r *Reconciler) armAffinity(next time.Time) {
	r.affinityMu.Lock()
	defer r.affinityMu.Unlock()
	if next.Equal(r.affinityAt) {
		return
	}
	if r.affinityTimer != nil {
		r.affinityTimer.Stop()
		r.affinityTimer = nil
	}
	r.affinityAt = next
	if !next.IsZero() {
		r.affinityTimer = time.AfterFunc(time.Until(next), r.trigger)
	}
}

// changed requests a sync for a changed object and notes when the oldest change not yet in
// the bridges arrived (srcip_agent_change_to_flows_seconds).
func (r *Reconciler) changed() {
	r.pendingSince.CompareAndSwap(0, time.Now().UnixNano())
	r.trigger()
}

// keepPending puts back since, the arrival of the oldest change of a sync that failed, unless
// an older one is pending: a change that arrived during that sync must not replace it.
func (r *Reconciler) keepPending(since int64) {
	for {
		cur := r.pendingSince.Load()
		if cur != 0 && cur <= since {
			return
		}
		if r.pendingSince.CompareAndSwap(cur, since) {
			return
		}
	}
}

// RequestFullSync makes the next sync a full one and requests it.
func (r *Reconciler) RequestFullSync() {
	r.needFull.Store(true)
	r.trigger()
}

// OnNode implements Handler.
func (r *Reconciler) OnNode(prev, cur *corev1.Node) {
	if r.model.nodeChanges.Update(objName(prev, cur), prev, cur) {
		r.changed()
	}
}

// OnService implements Handler.
func (r *Reconciler) OnService(prev, cur *corev1.Service) {
	if r.model.svcChanges.Update(objKey(prev, cur), prev, cur) {
		r.changed()
	}
}

// OnEndpointSlice implements Handler.
func (r *Reconciler) OnEndpointSlice(prev, cur *discoveryv1.EndpointSlice) {
	if r.model.sliceChanges.Update(objKey(prev, cur), prev, cur) {
		r.changed()
	}
}

// OnPod implements Handler.
func (r *Reconciler) OnPod(prev, cur *corev1.Pod) {
	if r.model.podChanges.Update(objKey(prev, cur), prev, cur) {
		r.changed()
	}
}

// OnEgressGateway implements Handler.
func (r *Reconciler) OnEgressGateway(prev, cur *egressv1.EgressGateway) {
	if r.model.egwChanges.Update(clusterName(prev, cur), prev, cur) {
		r.changed()
	}
}

// OnServiceCIDR implements Handler.
func (r *Reconciler) OnServiceCIDR(prev, cur *networkingv1.ServiceCIDR) {
	if r.model.cidrChanges.Update(clusterName(prev, cur), prev, cur) {
		r.changed()
	}
}

// OnNamespace implements Handler.
func (r *Reconciler) OnNamespace(prev, cur *corev1.Namespace) {
	if r.model.nsChanges.Update(clusterName(prev, cur), prev, cur) {
		r.changed()
	}
}

// EgressPolicies returns the EgressGateways as the last sync converted them (conflicts,
// gateways); only for the goroutine that runs Sync, or after it stopped.
func (r *Reconciler) EgressPolicies() []*EgressPolicy { return r.model.EgressPolicies() }

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

// clusterName is the name of a cluster-scoped object that changed from prev to cur (either may
// be nil, not both).
func clusterName[T any, P interface {
	*T
	GetName() string
}](prev, cur P) string {
	if cur != nil {
		return cur.GetName()
	}
	return prev.GetName()
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
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	full := r.needFull.Swap(false) || !r.initialized
	start := time.Now()
	since := r.pendingSince.Swap(0)
	full, err := r.sync(ctx, full)
	if err != nil && since != 0 {
		r.keepPending(since) // still pending
	} else if since != 0 && r.initialized {
		r.metrics.ChangeToFlows.Observe(time.Since(time.Unix(0, since)).Seconds())
	}
	kind := "partial"
	if full {
		kind = "full"
	}
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
	r.afterSync(ctx)
	r.armAffinity(r.model.nextAffinityPeriod())
	now := time.Now()
	r.status.LastSuccess, r.status.FailingSince, r.status.LastError = now, time.Time{}, nil
	if full {
		if !r.status.FullSyncDone && r.cfg.ReleaseMemory {
			// The first full sync holds every flow set of the cluster at once (at 10k Services
			// the heap peaks at about three times what stays live); hand what it freed back to
			// the node now rather than over the runtime's slow background scavenging. Off the
			// sync's path: readiness does not wait for it.
			go func() {
				defer close(r.memReleased)
				r.memHeld[0], r.memHeld[1] = releaseMemory(klog.FromContext(ctx))
			}()
		}
		r.status.FullSyncDone = true
		r.status.LastFullSuccess = now
	}
	r.metrics.LastSuccess.Set(float64(now.UnixNano()) / 1e9)
	return nil
}

// releaseMemory runs a garbage collection and returns the freed heap to the operating system,
// and logs how much the heap the process holds shrank; it returns that heap before and after
// (bytes).
func releaseMemory(logger klog.Logger) (before, after uint64) {
	before = heapHeld()
	start := time.Now()
	debug.FreeOSMemory()
	after = heapHeld()
	logger.Info("Returned the first full sync's memory to the operating system",
		"heapHeldBeforeMB", before>>20, "heapHeldAfterMB", after>>20, "took", time.Since(start).Round(time.Millisecond).String())
	return before, after
}

// heapHeld is the heap memory the Go runtime holds from the operating system and has not
// returned (runtime/metrics: heap objects, unused heap and free heap not yet released).
func heapHeld() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	var n uint64
	for _, x := range s {
		if x.Value.Kind() == metrics.KindUint64 {
			n += x.Value.Uint64()
		}
	}
	return n
}

// sync updates the model, runs the syncer's pipeline and releases the group ids of Service ports
// that are gone. It reports whether the sync was a full one.
func (r *Reconciler) sync(ctx context.Context, full bool) (bool, error) {
	start := time.Now()
	ch, err := r.model.update(ctx, r.cfg.Dataplane, full)
	kind := "partial"
	if ch.full {
		kind = "full"
	}
	r.syncer.steps = r.syncer.steps[:0]
	r.syncer.observeStep("model", kind, time.Since(start))
	if ch.full {
		r.statusMu.Lock()
		r.status.DataplaneError = err
		r.statusMu.Unlock()
	}
	if err != nil {
		return ch.full, err
	}
	gone, err := r.syncer.run(ctx, r.model.st, ch)
	if err != nil {
		return ch.full, err
	}
	if ch.full {
		gone = r.model.groups.Held()
		logger := klog.FromContext(ctx)
		if !r.initialized {
			logger.Info("First full sync done", append([]any{"took", time.Since(start).Round(time.Millisecond).String()}, r.syncer.stepsKV()...)...)
		} else {
			logger.V(2).Info("Full sync steps", r.syncer.stepsKV()...)
		}
	}
	r.model.releaseGroups(gone)
	return ch.full, nil
}

// afterSync runs after every successful sync: a gratuitous ARP (IPv4) or an unsolicited
// Neighbor Advertisement (IPv6) for each egress IP this node has just become the gateway of (its ARP answer is installed now, C25) or whose uplink changed
// (C38), the acknowledgement of the pods whose flows are in (ackPodFlows), the election's
// Synced (Leases given up are released now that the answers are gone), and the policies to the
// status writer.
func (r *Reconciler) afterSync(ctx context.Context) {
	st := r.model.st
	for ip := range r.announced {
		if e, ok := st.Egress[ip]; !ok || e.Gateway != r.cfg.NodeName {
			delete(r.announced, ip)
		}
	}
	for ip, e := range st.Egress {
		port := st.UplinkFor(ip)
		prev, had := r.announced[ip]
		if e.Gateway != r.cfg.NodeName || (had && prev == port) {
			continue
		}
		if !had {
			r.flushEgressConntrack(ctx, ip)
		}
		r.announced[ip] = port
		if r.cfg.Announcer == nil {
			continue
		}
		logger := klog.FromContext(ctx).WithValues("egressIP", ip)
		how := "gratuitous ARP"
		if ip.Is6() {
			how = "unsolicited Neighbor Advertisement"
		}
		// Twice: one lost frame must not leave the router on the old gateway.
		for range 2 {
			if err := r.cfg.Announcer.AnnounceIP(ctx, ip, st.Ports.ExMAC, port); err != nil {
				logger.Error(err, "Announcing the egress IP failed; neighbours learn the new gateway when their entry expires", "how", how)
				break
			}
		}
		logger.Info("Egress gateway: announced the egress IP ("+how+")", "mac", st.Ports.ExMAC.String())
	}
	r.ackPodFlows(ctx)
	if r.cfg.Election != nil {
		r.cfg.Election.Synced()
	}
	if r.cfg.EgressStatus != nil {
		r.cfg.EgressStatus.Publish(r.model.EgressPolicies())
	}
}

// flushEgressConntrack deletes this node's SNAT entries of egress IP ip (TCP and UDP entries of
// ZoneEgress or ZoneEgress6 whose reply tuple goes to ip) when the node has just become its
// gateway: entries left from an earlier term as its gateway are stale (the sessions moved to
// another gateway at a failover, and their FIN never passed here), and with port blocks a new
// connection of the same pod to the same server can get the same translated tuple again. Seen in
// TestRollingUpgrade's repeated rolls before this flush: each of 5 unanswered new connections
// used the translated port of an egress stream closed 44-152 s before (the gateway role moves
// between node2 and node3 at every roll); the server answered its SYNs, no SYN-ACK reached the pod.
// Running sessions of ip lose nothing: they are re-committed from their next packet, as at a
// failover. Errors are logged.
func (r *Reconciler) flushEgressConntrack(ctx context.Context, ip netip.Addr) {
	if r.cfg.Conntrack == nil {
		return
	}
	zone := flows.ZoneEgress
	if ip.Is6() {
		zone = flows.ZoneEgress6
	}
	for _, p := range []flows.Protocol{flows.TCP, flows.UDP} {
		if err := r.cfg.Conntrack.FlushConntrack(ctx, flows.ConntrackFilter{Zone: zone, Protocol: p, ReplyDst: ip}); err != nil {
			klog.FromContext(ctx).Error(err, "Egress gateway: flushing the egress IP's conntrack entries of an earlier term failed; a new connection that meets one may go unanswered", "egressIP", ip, "protocol", p)
		}
	}
}

// SetEgressStatus sets the status writer (ReconcilerConfig.EgressStatus); call before Run.
// With a writer the pods' port blocks come from the policies' status (its allocation).
func (r *Reconciler) SetEgressStatus(s EgressStatusSink) {
	r.cfg.EgressStatus = s
	r.model.localPortBlocks = s == nil
}
