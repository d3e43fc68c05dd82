package agent

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
)

// GatewayElection elects the active gateway node of each egress IP (Config.Election). The
// Reconciler calls Campaign and then Choose at every model update, and Synced after every
// successful sync, all from the sync goroutine.
type GatewayElection interface {
	// Campaign gives the egress IPs this node is eligible for (Ready, matching the policy's
	// gatewayNodeSelector, not refused); the node runs for exactly these. An IP left out is given
	// up at once: Choose no longer returns this node for it, and its Lease is released after the
	// next successful sync (when this node's flows no longer answer for it).
	Campaign(ips []netip.Addr)
	// Choose returns the active gateway of ip among eligible (sorted node names), "" for none.
	Choose(policy *egressv1.EgressGateway, ip netip.Addr, eligible []string) string
	// Synced is called after every successful sync.
	Synced()
}

// Lease timing defaults of LeaseElection (client-go leaderelection: a holder that cannot renew
// within RenewDeadline steps down; a candidate takes over a Lease not renewed for
// LeaseDuration; candidates retry every RetryPeriod).
const (
	DefaultLeaseDuration = 6 * time.Second
	DefaultRenewDeadline = 4 * time.Second
	DefaultRetryPeriod   = time.Second
)

// LeasePrefix starts the name of every gateway-election Lease: "egress-<IPv4 dotted quad>".
const LeasePrefix = "egress-"

// LeaseName is the name of the coordination.k8s.io/v1 Lease that elects the gateway of ip
// (IPv4 "egress-192.0.2.50"; IPv6 colons become dashes, "egress-2001-db8-0-2--50", and a name
// that would end in a dash, an address ending in "::", gets a final "0": a Lease name is a DNS
// subdomain, which ends with an alphanumeric. No other address's canonical form ends in "::0",
// so names stay distinct.)
func LeaseName(ip netip.Addr) string {
	n := LeasePrefix + strings.ReplaceAll(ip.String(), ":", "-")
	if strings.HasSuffix(n, "-") {
		n += "0"
	}
	return n
}

// LeaseElection is the GatewayElection of a Kubernetes cluster: one Lease per egress IP
// (LeaseName) in Namespace, held through client-go leaderelection with this node's name as the
// holder identity. The node runs for the egress IPs it is eligible for; every agent reads the
// holders from a Lease informer and routes to the holder when it is eligible. A node is the
// gateway only while its own elector leads: a node that restarts and finds its name in the
// Lease is not the gateway until it renewed it (C26), and one that cannot renew stops being
// the gateway at its RenewDeadline, before anyone else can take the Lease (C25).
type LeaseElection struct {
	client    kubernetes.Interface
	namespace string
	node      string
	// LeaseDuration, RenewDeadline and RetryPeriod: see DefaultLeaseDuration (zero: defaults).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	mu        sync.Mutex
	ctx       context.Context
	trigger   func()
	synced    cache.InformerSynced
	holders   map[string]string // Lease name -> spec.holderIdentity
	leading   map[netip.Addr]bool
	campaigns map[netip.Addr]*campaign
	release   []*campaign // stopped campaigns whose Lease is released after the next sync
	stopped   bool        // StepDown ran: no new campaigns
}

type campaign struct {
	ip     netip.Addr
	cancel context.CancelFunc
	done   chan struct{}
	// Guarded by LeaseElection.mu: the running elector, the cancel of its context, and whether
	// nudge cancelled it (then run starts the next one at once).
	le     *leaderelection.LeaderElector
	stopLE context.CancelFunc
	nudged bool
}

var _ GatewayElection = (*LeaseElection)(nil)

// NewLeaseElection returns the election of node through client, with its Leases in namespace.
// Call Start before the first Campaign.
func NewLeaseElection(client kubernetes.Interface, namespace, node string) *LeaseElection {
	return &LeaseElection{client: client, namespace: namespace, node: node,
		holders: map[string]string{}, leading: map[netip.Addr]bool{}, campaigns: map[netip.Addr]*campaign{}}
}

// SetTrigger sets the function called when a holder or this node's leadership changes (the
// Reconciler's sync request).
func (e *LeaseElection) SetTrigger(f func()) {
	e.mu.Lock()
	e.trigger = f
	e.mu.Unlock()
}

func (e *LeaseElection) kick() {
	e.mu.Lock()
	f := e.trigger
	e.mu.Unlock()
	if f != nil {
		f()
	}
}

// Start starts the Lease informer of Namespace; campaigns run until ctx is done (or StepDown).
func (e *LeaseElection) Start(ctx context.Context) error {
	if e.LeaseDuration <= 0 {
		e.LeaseDuration = DefaultLeaseDuration
	}
	if e.RenewDeadline <= 0 {
		e.RenewDeadline = DefaultRenewDeadline
	}
	if e.RetryPeriod <= 0 {
		e.RetryPeriod = DefaultRetryPeriod
	}
	f := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(e.namespace),
		informers.WithTransform(stripManagedFields))
	inf := f.Coordination().V1().Leases().Informer()
	set := func(obj any, gone bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || !strings.HasPrefix(l.Name, LeasePrefix) {
			return
		}
		h := ""
		if !gone && l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		e.mu.Lock()
		changed := e.holders[l.Name] != h
		if h == "" {
			delete(e.holders, l.Name)
		} else {
			e.holders[l.Name] = h
		}
		e.mu.Unlock()
		if changed {
			klog.FromContext(ctx).V(2).Info("Egress Lease holder", "lease", l.Name, "holder", h)
			if h == "" {
				e.nudge(l.Name)
			}
			e.kick()
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { set(o, false) },
		UpdateFunc: func(_, o any) { set(o, false) },
		DeleteFunc: func(o any) { set(o, true) },
	})
	if err != nil {
		return err
	}
	e.mu.Lock()
	// Campaigns outlive ctx: on shutdown StepDown ends them after this node's answers are gone
	// (a campaign ended by ctx would stop leading before the flows are removed).
	e.ctx = context.WithoutCancel(ctx)
	e.synced = reg.HasSynced
	e.mu.Unlock()
	f.Start(ctx.Done())
	return nil
}

// HasSynced reports whether the Lease informer has listed.
func (e *LeaseElection) HasSynced() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.synced != nil && e.synced()
}

// Holder returns the holder of ip's Lease as the informer last saw it ("" none).
func (e *LeaseElection) Holder(ip netip.Addr) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.holders[LeaseName(ip)]
}

// Leading reports whether this node's elector currently leads ip's Lease.
func (e *LeaseElection) Leading(ip netip.Addr) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading[ip]
}

// Campaign implements GatewayElection.
func (e *LeaseElection) Campaign(ips []netip.Addr) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil || e.stopped {
		return
	}
	want := map[netip.Addr]bool{}
	for _, ip := range ips {
		want[ip] = true
		if e.campaigns[ip] == nil {
			ctx, cancel := context.WithCancel(e.ctx)
			c := &campaign{ip: ip, cancel: cancel, done: make(chan struct{})}
			e.campaigns[ip] = c
			go e.run(ctx, c)
		}
	}
	for ip, c := range e.campaigns {
		if !want[ip] {
			c.cancel()
			delete(e.campaigns, ip)
			e.leading[ip] = false
			e.release = append(e.release, c)
		}
	}
}

// Choose implements GatewayElection: this node while its elector leads ip's Lease and it is
// eligible; else the Lease holder when it is eligible and not this node; else "".
func (e *LeaseElection) Choose(_ *egressv1.EgressGateway, ip netip.Addr, eligible []string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leading[ip] && slices.Contains(eligible, e.node) {
		return e.node
	}
	h := e.holders[LeaseName(ip)]
	if h == "" || h == e.node || !slices.Contains(eligible, h) {
		return ""
	}
	return h
}

// Synced implements GatewayElection: the Leases of the campaigns given up before this sync are
// released (holder cleared), now that this node's flows no longer answer for them.
func (e *LeaseElection) Synced() {
	e.mu.Lock()
	rel := e.release
	e.release = nil
	ctx := e.ctx
	e.mu.Unlock()
	for _, c := range rel {
		go func() {
			<-c.done
			e.releaseLease(ctx, c.ip)
		}()
	}
}

// nudge makes the campaign for the Lease name, when this node runs one and does not lead it, try
// to acquire it now: the Lease was released (holder cleared: a gateway that stepped down,
// releaseLease) or deleted. A waiting elector tries only every RetryPeriod, jittered up to
// 2.2 x RetryPeriod (client-go's JitterFactor), and each of those seconds is an egress outage
// after a graceful step-down; so the waiting elector is cancelled and run starts a new one,
// whose first try is immediate. An elector that may have acquired the Lease meanwhile is left
// alone (its OnStartedLeading, should it still come, is ignored once cancelled: setLeading).
func (e *LeaseElection) nudge(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for ip, c := range e.campaigns {
		if LeaseName(ip) != name || e.leading[ip] || c.le == nil || c.stopLE == nil || c.le.IsLeader() {
			continue
		}
		c.nudged = true
		c.stopLE()
		c.stopLE = nil
	}
}

// run campaigns for c.ip until ctx is done: one leaderelection.LeaderElector at a time, a new
// one after a lost Lease (RetryPeriod later) or at once after nudge.
func (e *LeaseElection) run(ctx context.Context, c *campaign) {
	defer close(c.done)
	logger := klog.FromContext(ctx).WithValues("egressIP", c.ip, "lease", LeaseName(c.ip))
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          e.lock(c.ip),
			LeaseDuration: e.LeaseDuration,
			RenewDeadline: e.RenewDeadline,
			RetryPeriod:   e.RetryPeriod,
			Name:          LeaseName(c.ip),
			Callbacks: leaderelection.LeaderCallbacks{
				// lctx ends with this elector (and with ctx): a cancelled elector never sets leading.
				OnStartedLeading: func(lctx context.Context) {
					logger.Info("Egress gateway: this node holds the Lease")
					e.setLeading(lctx, c.ip, true)
				},
				OnStoppedLeading: func() { e.setLeading(ctx, c.ip, false) },
			},
		})
		if err != nil {
			logger.Error(err, "Egress gateway election cannot run")
			return
		}
		lctx, stop := context.WithCancel(ctx)
		e.mu.Lock()
		c.le, c.stopLE, c.nudged = le, stop, false
		e.mu.Unlock()
		le.Run(lctx)
		stop()
		e.mu.Lock()
		nudged := c.nudged
		c.le, c.stopLE, c.nudged = nil, nil, false
		e.mu.Unlock()
		if nudged {
			logger.V(2).Info("Egress Lease released: trying to acquire it now")
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(e.RetryPeriod):
		}
	}
}

func (e *LeaseElection) lock(ip netip.Addr) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.namespace, Name: LeaseName(ip)},
		Client:     e.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.node},
	}
}

// setLeading records this node's leadership of ip; a change requests a sync. A campaign that
// was given up (ctx done) never sets leading.
func (e *LeaseElection) setLeading(ctx context.Context, ip netip.Addr, on bool) {
	e.mu.Lock()
	if on && ctx.Err() != nil {
		e.mu.Unlock()
		return
	}
	changed := e.leading[ip] != on
	e.leading[ip] = on
	e.mu.Unlock()
	if changed {
		if !on {
			klog.FromContext(ctx).Info("Egress gateway: this node no longer holds the Lease", "egressIP", ip)
		}
		e.kick()
	}
}

// releaseLease clears the holder of ip's Lease when it is still this node and no campaign for
// ip runs again (what leaderelection's ReleaseOnCancel does, after this node's flows are gone):
// the other candidates take it at their next retry instead of after LeaseDuration.
func (e *LeaseElection) releaseLease(ctx context.Context, ip netip.Addr) {
	e.mu.Lock()
	again := e.campaigns[ip] != nil
	e.mu.Unlock()
	if again {
		return
	}
	logger := klog.FromContext(ctx).WithValues("egressIP", ip, "lease", LeaseName(ip))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	l := e.lock(ip)
	rec, _, err := l.Get(ctx)
	if err != nil {
		logger.V(2).Info("Egress Lease not released", "err", err)
		return
	}
	if rec.HolderIdentity != e.node {
		return
	}
	now := metav1.NewTime(time.Now())
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, AcquireTime: now, RenewTime: now,
	}); err != nil {
		logger.Error(err, "Egress Lease not released; the other candidates take it when it expires")
		return
	}
	logger.Info("Egress gateway: Lease released")
}

// StepDown ends every campaign (agent shutdown): this node stops being the gateway of every
// egress IP, sync removes its answers (one sync of the bridges), its Leases are released, and
// when another node holds them within wait, sync runs once more so this node's own pods follow
// it (ctx must not be the cancelled context of the agent). Errors of sync are logged.
func (e *LeaseElection) StepDown(ctx context.Context, sync func(context.Context) error, wait time.Duration) {
	logger := klog.FromContext(ctx)
	e.mu.Lock()
	e.stopped = true
	var held []netip.Addr
	var all []*campaign
	for ip, c := range e.campaigns {
		c.cancel()
		all = append(all, c)
		if e.leading[ip] {
			held = append(held, ip)
		}
		e.leading[ip] = false
	}
	e.campaigns = map[netip.Addr]*campaign{}
	e.mu.Unlock()
	for _, c := range all {
		<-c.done
	}
	if len(held) == 0 {
		return
	}
	if err := sync(ctx); err != nil {
		logger.Error(err, "Step down: sync failed; the flows may still answer for the egress IPs", "egressIPs", held)
	}
	for _, ip := range held {
		e.releaseLease(ctx, ip)
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		moved := true
		for _, ip := range held {
			// The informer stopped with the agent's context: read the Leases.
			rec, _, err := e.lock(ip).Get(ctx)
			if err != nil || rec.HolderIdentity == "" || rec.HolderIdentity == e.node {
				moved = false
				continue
			}
			e.mu.Lock()
			e.holders[LeaseName(ip)] = rec.HolderIdentity
			e.mu.Unlock()
		}
		if moved {
			if err := sync(ctx); err != nil {
				logger.Error(err, "Step down: sync towards the new gateways failed")
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
