package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	"github.com/ovs-srcip/ovs-srcip/flows"
)

// model is the agent's view of the cluster for one node. It owns:
//   - the change trackers the Source's handlers write into (safe for concurrent use);
//   - the API object caches (Nodes, Services, EndpointSlices by Service, Pods) and the pod ports
//     read from OVSDB;
//   - their conversion into the pure input of package flows: st, a flows.State whose maps are
//     updated in place, object by object;
//   - the entry-point claims between Services, the Service ports' group ids, and the problems
//     last reported per object (so that periodic syncs do not repeat Events);
//   - which flow-set keys each change makes dirty (update's result).
//
// Everything but the trackers is owned by the goroutine calling Reconciler.Sync.
type model struct {
	node    string
	npCIDRs []netip.Prefix
	events  EventSink
	// sel decides which Services are served (--preserve-source-ip).
	sel Selector

	nodeChanges  *ChangeTracker[string, corev1.Node]
	svcChanges   *ChangeTracker[types.NamespacedName, corev1.Service]
	sliceChanges *ChangeTracker[types.NamespacedName, discoveryv1.EndpointSlice]
	podChanges   *ChangeTracker[types.NamespacedName, corev1.Pod]
	egwChanges   *ChangeTracker[string, egressv1.EgressGateway]
	nsChanges    *ChangeTracker[string, corev1.Namespace]
	// cidrChanges are the ServiceCIDR objects' changes (admission: never an entry point).
	cidrChanges *ChangeTracker[string, networkingv1.ServiceCIDR]
	// podPortChanges are the pod ports' changes by pod (podPortSource; OnPodPorts).
	podPortChanges *ChangeTracker[types.NamespacedName, []PodPort]

	nodes    map[string]*corev1.Node
	services map[types.NamespacedName]*corev1.Service
	epSlices map[types.NamespacedName]*discoveryv1.EndpointSlice
	// slicesOf are the EndpointSlices of each Service (a set, each once; almost always one, so a
	// slice rather than a map per Service).
	slicesOf map[types.NamespacedName][]types.NamespacedName
	pods     map[types.NamespacedName]*corev1.Pod
	podPorts map[types.NamespacedName][]PodPort // several while a predecessor's port lingers
	// podPortOf are the ports st.Pods was built from (ChoosePodPort), by key: their Interfaces
	// are the ones whose flows are acknowledged to srcip-cni (Reconciler.ackPodFlows).
	podPortOf map[flows.Key]PodPort
	// podAcked are the acknowledgements this agent wrote (ackPodFlows), by Interface: the echo
	// of a write (PodPort.Acked set) is no change (podPortsEqual), so the model's PodPort may
	// still show the Acked it had before.
	podAcked   map[string]flows.Cookie
	egws       map[string]*egressv1.EgressGateway
	namespaces map[string]*corev1.Namespace
	// serviceCIDRs are the ServiceCIDR objects (networking.k8s.io/v1), by name.
	serviceCIDRs map[string]*networkingv1.ServiceCIDR

	// Egress: the cluster networks never sent to a gateway, how the active gateway is chosen,
	// the policies as last converted, each local pod's last egress assignment.
	egressClusterCIDRs []netip.Prefix
	portPool           PortPool
	// localPortBlocks: no status writer (manifests mode): the port blocks of this node's pods
	// are allocated here (localBlocks, per policy) instead of read from the policies' status.
	localPortBlocks bool
	localBlocks     map[string][]egressv1.PortBlock
	chooseGateway   GatewayChooser
	election        GatewayElection
	egressPolicies  []*EgressPolicy
	podEgress       map[flows.Key]*flows.PodEgress
	podEgress6      map[flows.Key]*flows.PodEgress

	// nextHops reads the next hops of this node's routes (ReconcilerConfig.RouteNextHops; nil:
	// none are known).
	nextHops func(context.Context) ([]netip.Addr, error)

	st       *flows.State
	svcRaw   map[types.NamespacedName][]flows.ServicePort // converted, before claims
	svcKeys  map[types.NamespacedName][]flows.Key         // the Service's ports in st.Services
	claims   *claims
	admit    *admission
	groups   *flows.GroupIDs
	problems map[string]string // object key -> last reported problems
	// refused, svcProblems and conflicts are, per Service, the entry points admission refused,
	// the conversion problems and the entry-point conflicts it lost (for Reconciler.Report).
	refused     map[types.NamespacedName][]RefusedEntry
	svcProblems map[types.NamespacedName][]string
	conflicts   map[types.NamespacedName][]string
	// declines are, per Service, what of it the agent declines (Selector.Declines: the whole
	// Service, SCTP ports); svcWarnings the endpoints whose nodeName disagrees with their pod
	// CIDR (for Reconciler.Report).
	declines    map[types.NamespacedName][]string
	svcWarnings map[types.NamespacedName][]string

	// now is the model's clock (time.Now; tests set it); updateTime is its reading at the start
	// of the running update. affinityNext is, per Service with a sessionAffinity port, when the
	// next affinity period starts (flows.AffinityPeriodAt): the Service is reconverted then.
	now          func() time.Time
	updateTime   time.Time
	affinityNext map[types.NamespacedName]time.Time
}

func newModel(node string, npCIDRs, externalIPCIDRs []netip.Prefix, nodePortRange [2]uint16, mode PreserveMode, events EventSink) *model {
	m := &model{
		node: node, npCIDRs: npCIDRs, events: events, sel: Selector{Mode: mode, ExternalIPCIDRs: externalIPCIDRs, Node: node},
		portPool: DefaultPortPool, localPortBlocks: true,
		nodeChanges:    NewChangeTracker[string](nodeEqual),
		svcChanges:     NewChangeTracker[types.NamespacedName](serviceEqual),
		sliceChanges:   NewChangeTracker[types.NamespacedName](sliceEqual),
		podChanges:     NewChangeTracker[types.NamespacedName](podEqual),
		egwChanges:     NewChangeTracker[string](egressGatewayEqual),
		nsChanges:      NewChangeTracker[string](namespaceEqual),
		cidrChanges:    NewChangeTracker[string](serviceCIDREqual),
		serviceCIDRs:   map[string]*networkingv1.ServiceCIDR{},
		podPortChanges: NewChangeTracker[types.NamespacedName](podPortsEqual),
		podPortOf:      map[flows.Key]PodPort{},
		podAcked:       map[string]flows.Cookie{},
		egws:           map[string]*egressv1.EgressGateway{},
		namespaces:     map[string]*corev1.Namespace{},
		podEgress:      map[flows.Key]*flows.PodEgress{},
		podEgress6:     map[flows.Key]*flows.PodEgress{},
		nodes:          map[string]*corev1.Node{},
		services:       map[types.NamespacedName]*corev1.Service{},
		epSlices:       map[types.NamespacedName]*discoveryv1.EndpointSlice{},
		slicesOf:       map[types.NamespacedName][]types.NamespacedName{},
		pods:           map[types.NamespacedName]*corev1.Pod{},
		podPorts:       map[types.NamespacedName][]PodPort{},
		st:             flows.NewState(node, flows.Ports{}, nil, nil, nil, nil),
		svcRaw:         map[types.NamespacedName][]flows.ServicePort{},
		svcKeys:        map[types.NamespacedName][]flows.Key{},
		claims:         newClaims(),
		admit:          newAdmission(externalIPCIDRs, nodePortRange),
		groups:         flows.NewGroupIDs(),
		problems:       map[string]string{},
		refused:        map[types.NamespacedName][]RefusedEntry{},
		svcProblems:    map[types.NamespacedName][]string{},
		conflicts:      map[types.NamespacedName][]string{},
		declines:       map[types.NamespacedName][]string{},
		now:            time.Now,
		affinityNext:   map[types.NamespacedName]time.Time{},
		svcWarnings:    map[types.NamespacedName][]string{},
	}
	m.admit.served = func(name types.NamespacedName) bool {
		ok, _, _ := m.sel.Select(m.services[name])
		return ok
	}
	return m
}

// changes is what one model update found: the flow-set keys whose own object changed (trigger
// flows.OwnObject, gone objects included) and the facts that dirty whole kinds.
type changes struct {
	keys map[flows.Key]bool
	// full: this node, its NodePort addresses or the OVSDB ports changed, or a full sync was
	// asked for: every flow set is rebuilt.
	full bool
	// podCIDRs: some node's pod CIDRs changed (trigger flows.PodCIDRs).
	podCIDRs bool
}

// dirtyObjects collects the objects an update reconverts.
type dirtyObjects struct {
	nodes    map[string]bool
	services map[types.NamespacedName]bool
	pods     map[types.NamespacedName]bool
	// serviceCIDRs says whether a ServiceCIDR object changed.
	serviceCIDRs bool
}

// update checks the trackers out into the caches, re-reads OVSDB (dp) when a full sync is due,
// and reconverts the changed objects into st. full asks for a full sync; the result says whether
// one is needed.
func (m *model) update(ctx context.Context, dp Dataplane, full bool) (changes, error) {
	logger := klog.FromContext(ctx)
	d, nodeSelf := m.checkout()
	m.updateTime = m.now()
	for name, next := range m.affinityNext {
		// A new affinity period: the Service's groups get the period's hash basis.
		if !m.updateTime.Before(next) {
			d.services[name] = true
		}
	}
	ch := changes{keys: map[flows.Key]bool{}, full: full || nodeSelf}
	npAddrs := NodePortAddresses(m.nodes[m.node], m.npCIDRs)
	if !slices.Equal(npAddrs, m.st.NodePortAddresses) {
		ch.full = true
		m.st.NodePortAddresses = npAddrs
	}
	if ch.full && m.nextHops != nil {
		// The routes' next hops are read at every full sync (admission: never an entry point).
		if hops, err := m.nextHops(ctx); err != nil {
			logger.Error(err, "Reading the node's routes failed; admission keeps the next hops it had")
		} else if m.admit.setNextHops(hops) {
			for name := range m.services {
				d.services[name] = true
			}
		}
	}
	if n := m.nodes[m.node]; n != nil {
		// This node's zone (its own Node's change is a full sync: every Service is reconverted).
		m.sel.Zone = n.Labels[corev1.LabelTopologyZone]
	}
	if d.serviceCIDRs && m.admit.setServiceCIDRs(m.admit.flagServiceCIDRs, m.convertServiceCIDRs()) {
		for name := range m.services {
			d.services[name] = true
		}
	}
	m.admissionChanges(d)
	if ch.full {
		if err := m.refreshDataplane(ctx, dp); err != nil {
			return ch, err
		}
		for name := range m.nodes {
			d.nodes[name] = true
		}
		for name := range m.st.Nodes {
			d.nodes[name] = true
		}
		for name := range m.services {
			d.services[name] = true
		}
		for name := range m.svcKeys {
			d.services[name] = true
		}
		for name := range m.pods {
			d.pods[name] = true
		}
		for name := range m.podPorts {
			d.pods[name] = true
		}
		for k := range m.st.Pods {
			d.pods[nn(k.Namespace, k.Name)] = true
		}
	}
	ch.keys = grown(ch.keys, len(d.services))
	ch.podCIDRs = m.updateNodes(logger, d.nodes, ch.keys)
	m.updatePods(logger, d.pods, ch.keys)
	m.updateServices(logger, d.services, ch.keys)
	m.updateEgress(logger, ch.keys)
	return ch, nil
}

// admissionChanges updates the admission's view of node addresses, pod CIDRs, ClusterIPs,
// nodePorts and LoadBalancer IPs and marks the Services whose admitted entry points may change
// with them: every Service when a node address or pod CIDR changed, every Service with
// externalIPs when a LoadBalancer IP changed, the Services asking for an address that became or
// stopped being a ClusterIP, and those sharing a nodePort with a changed Service.
func (m *model) admissionChanges(d dirtyObjects) {
	if len(d.nodes) > 0 && m.admit.setNodes(m.nodes) {
		for name := range m.services {
			d.services[name] = true
		}
	}
	changed := make([]types.NamespacedName, 0, len(d.services))
	for name := range d.services {
		changed = append(changed, name)
	}
	lbChanged := false
	for _, name := range changed {
		lb, affected := m.admit.setService(name, m.services[name])
		lbChanged = lb || lbChanged
		for _, o := range affected {
			if m.services[o] != nil {
				d.services[o] = true
			}
		}
	}
	if lbChanged {
		for name := range m.admit.extUsers {
			d.services[name] = true
		}
	}
}

// checkout moves the trackers' changes into the caches and returns the changed objects, and
// whether this node's own Node object changed.
func (m *model) checkout() (d dirtyObjects, nodeSelf bool) {
	d = dirtyObjects{nodes: map[string]bool{}, services: map[types.NamespacedName]bool{}, pods: map[types.NamespacedName]bool{}}
	for name, c := range m.nodeChanges.Checkout() {
		setOrDelete(m.nodes, name, c.Current)
		nodeSelf = nodeSelf || name == m.node
		d.nodes[name] = true
	}
	svcs, sls := m.svcChanges.Checkout(), m.sliceChanges.Checkout()
	m.services, m.epSlices, m.slicesOf = grown(m.services, len(svcs)), grown(m.epSlices, len(sls)), grown(m.slicesOf, len(sls))
	d.services = grown(d.services, len(svcs)+len(sls))
	for name, c := range svcs {
		setOrDelete(m.services, name, c.Current)
		d.services[name] = true
	}
	for name, c := range sls {
		if old := m.epSlices[name]; old != nil {
			if s := sliceService(old); s.Name != "" {
				if rest := slices.DeleteFunc(m.slicesOf[s], func(o types.NamespacedName) bool { return o == name }); len(rest) == 0 {
					delete(m.slicesOf, s)
				} else {
					m.slicesOf[s] = rest
				}
				d.services[s] = true
			}
		}
		setOrDelete(m.epSlices, name, c.Current)
		if s := sliceService(c.Current); s.Name != "" {
			if !slices.Contains(m.slicesOf[s], name) {
				m.slicesOf[s] = append(m.slicesOf[s], name)
			}
			d.services[s] = true
		}
	}
	for name, c := range m.podChanges.Checkout() {
		setOrDelete(m.pods, name, c.Current)
		d.pods[name] = true
	}
	for name, c := range m.podPortChanges.Checkout() {
		if c.Current == nil {
			delete(m.podPorts, name)
		} else {
			m.podPorts[name] = *c.Current
		}
		d.pods[name] = true
	}
	for name, c := range m.egwChanges.Checkout() {
		setOrDelete(m.egws, name, c.Current)
	}
	for name, c := range m.nsChanges.Checkout() {
		setOrDelete(m.namespaces, name, c.Current)
	}
	for name, c := range m.cidrChanges.Checkout() {
		setOrDelete(m.serviceCIDRs, name, c.Current)
		d.serviceCIDRs = true
	}
	return d, nodeSelf
}

// nextAffinityPeriod is when the earliest next affinity period of any Service starts (zero: no
// Service has a sessionAffinity port): a sync then gives those Services' groups the new basis.
func (m *model) nextAffinityPeriod() time.Time {
	var first time.Time
	for _, t := range m.affinityNext {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// convertServiceCIDRs parses every ServiceCIDR object's spec.cidrs. A value that does not parse
// (the API server validates them, a manifests directory does not) is left out and reported on
// the object with a SourceIPInvalid Event.
func (m *model) convertServiceCIDRs() map[string][]netip.Prefix {
	out := make(map[string][]netip.Prefix, len(m.serviceCIDRs))
	for name, o := range m.serviceCIDRs {
		var problems []string
		for _, s := range o.Spec.CIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				problems = append(problems, fmt.Sprintf("spec.cidrs %q is not a CIDR: left out of the Service CIDRs the agent refuses LoadBalancer IPs and externalIPs in (%v)", s, err))
				continue
			}
			out[name] = append(out[name], p.Masked())
		}
		m.report(o, "servicecidr/"+name, ReasonInvalid, problems)
	}
	for key := range m.problems {
		if name, ok := strings.CutPrefix(key, "servicecidr/"); ok && m.serviceCIDRs[name] == nil {
			delete(m.problems, key)
		}
	}
	return out
}

// grown returns m, or when m is empty a map with room for n entries: a first sync fills the
// model's maps with every object at once, and a map grown step by step rehashes ~log2(n) times.
func grown[K comparable, V any](m map[K]V, n int) map[K]V {
	if len(m) == 0 && n > len(m) {
		return make(map[K]V, n)
	}
	return m
}

func setOrDelete[K comparable, V any](m map[K]*V, k K, v *V) {
	if v == nil {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// refreshDataplane reads the ofports and the pod ports from OVSDB.
func (m *model) refreshDataplane(ctx context.Context, dp Dataplane) error {
	ports, err := dp.EnsureIntegration(ctx)
	if err != nil {
		return fmt.Errorf("ensure integration bridge: %w", err)
	}
	pps, err := dp.PodPorts(ctx)
	if err != nil {
		return fmt.Errorf("list pod ports: %w", err)
	}
	m.st.Ports = ports
	m.podPorts = make(map[types.NamespacedName][]PodPort, len(pps))
	for _, pp := range pps {
		name := nn(pp.Namespace, pp.Name)
		m.podPorts[name] = append(m.podPorts[name], pp)
	}
	return nil
}

// updateNodes reconverts the named nodes, marks their keys and reports whether the set of pod
// CIDRs changed. This node comes first: another node whose underlay address is not of this
// node's underlay family (flows.State.TunnelRefusal) cannot be tunnelled to and is refused like
// an invalid one (an Event, a log line); a change of this node's own underlay family is a full
// sync, which reconverts every node.
func (m *model) updateNodes(logger klog.Logger, names map[string]bool, touched map[flows.Key]bool) bool {
	cidrsChanged := false
	order := make([]string, 0, len(names))
	if names[m.node] {
		order = append(order, m.node)
	}
	for name := range names {
		if name != m.node {
			order = append(order, name)
		}
	}
	for _, name := range order {
		old, had := m.st.Nodes[name]
		delete(m.st.Nodes, name)
		fn, err := flows.Node{}, error(nil)
		n := m.nodes[name]
		if n != nil {
			fn, err = ConvertNode(n)
			if _, selfKnown := m.st.Nodes[m.node]; err == nil && name != m.node && selfKnown {
				if why := m.st.TunnelRefusal(fn); why != "" {
					err = errors.New(why + ", so the node is not programmed")
				}
			}
		}
		if n == nil {
			m.report(nil, "node/"+name, "", nil)
		} else if err != nil {
			// At the default level when the problem is new (an Event was sent): a Node this
			// node cannot tunnel to (no InternalIP, or one of the other underlay family) is a
			// refusal an operator must see.
			if m.report(n, "node/"+name, ReasonInvalid, []string{err.Error()}) {
				logger.Info("Node skipped", "node", klog.KObj(n), "reason", err.Error())
			} else {
				logger.V(2).Info("Node skipped", "node", klog.KObj(n), "reason", err.Error())
			}
		} else {
			m.report(n, "node/"+name, ReasonInvalid, nil)
			m.st.Nodes[name] = fn
		}
		nw, has := m.st.Nodes[name]
		if had != has || !slices.Equal(old.PodCIDRs, nw.PodCIDRs) {
			cidrsChanged = true
		}
		if name != m.node {
			markObject(touched, "Node", "", name)
		}
	}
	return cidrsChanged
}

// updatePods reconverts the named pods (pod port joined with its Pod object) and marks their keys.
func (m *model) updatePods(logger klog.Logger, names map[types.NamespacedName]bool, touched map[flows.Key]bool) {
	for name := range names {
		k := flows.Key{Kind: flows.KindPod, Namespace: name.Namespace, Name: name.Name}
		delete(m.st.Pods, k)
		delete(m.podPortOf, k)
		markObject(touched, "Pod", name.Namespace, name.Name)
		pod := m.pods[name]
		pp, ok, ignored := ChoosePodPort(m.podPorts[name], pod)
		if pod != nil {
			m.report(pod, "stale-ports/"+name.String(), ReasonWarning, ignored)
		}
		if len(ignored) > 0 {
			logger.V(2).Info("Pod ports ignored", "pod", klog.KRef(name.Namespace, name.Name), "ignored", ignored)
		}
		if !ok {
			continue
		}
		if pod == nil {
			// A port without its Pod object (a port the CNI left behind, a hostile OVSDB writer,
			// or a Pod the source has not delivered yet) gets no flows: the identity in
			// external_ids is only trusted with the Pod that names this node (and, when the port
			// carries one, the same UID: ChoosePodPort). status.podIPs is not needed.
			logger.V(2).Info("Pod port without a Pod object, skipped", "pod", klog.KRef(name.Namespace, name.Name), "interface", pp.Interface)
			continue
		}
		p, ok, problems := LocalPod(pp, pod)
		if pod != nil {
			m.report(pod, "pod/"+name.String(), ReasonInvalid, problems)
		}
		if !ok {
			logger.V(2).Info("Pod port without usable IP address or ofport, skipped", "pod", klog.KRef(name.Namespace, name.Name), "interface", pp.Interface)
			continue
		}
		m.st.Pods[k] = p
		m.podPortOf[k] = pp
		if pp.Acked == 0 {
			// A port without an acknowledgement (new, or re-created under the same name) gets
			// one, whatever this agent wrote on its predecessor.
			delete(m.podAcked, pp.Interface)
		}
	}
}

// converted is one Service's ports as ServicePorts converts them, with its problems.
type converted struct {
	sps      []flows.ServicePort
	problems []string
}

// parallelConvertMin is the number of Services from which convertServices spreads
// ServicePorts (pure: it reads the Service and its slices) over GOMAXPROCS goroutines: a full
// sync converts every Service of the cluster.
var parallelConvertMin = 512

// convertServices converts the named Services that exist, with their EndpointSlices sorted by
// name (Selector.ServicePorts).
func (m *model) convertServices(names map[types.NamespacedName]bool) map[types.NamespacedName]converted {
	type job struct {
		name types.NamespacedName
		svc  *corev1.Service
		eps  []*discoveryv1.EndpointSlice
	}
	jobs := make([]job, 0, len(names))
	for name := range names {
		svc := m.services[name]
		if svc == nil {
			continue
		}
		var eps []*discoveryv1.EndpointSlice
		for _, s := range m.slicesOf[name] {
			eps = append(eps, m.epSlices[s])
		}
		slices.SortFunc(eps, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
		jobs = append(jobs, job{name, svc, eps})
	}
	results := make([]converted, len(jobs))
	convert := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			results[i].sps, results[i].problems = m.sel.ServicePorts(jobs[i].svc, jobs[i].eps)
		}
	}
	if workers := goruntime.GOMAXPROCS(0); len(jobs) < parallelConvertMin || workers < 2 {
		convert(0, len(jobs))
	} else {
		var wg sync.WaitGroup
		per := (len(jobs) + workers - 1) / workers
		for lo := 0; lo < len(jobs); lo += per {
			wg.Go(func() { convert(lo, min(lo+per, len(jobs))) })
		}
		wg.Wait()
	}
	out := make(map[types.NamespacedName]converted, len(jobs))
	for i, j := range jobs {
		out[j.name] = results[i]
	}
	return out
}

// updateServices reconverts the named Services, re-resolves the entry-point claims of every
// Service they compete with, assigns group ids and marks the keys of every port that changed.
func (m *model) updateServices(logger klog.Logger, names map[types.NamespacedName]bool, touched map[flows.Key]bool) {
	convProblems := make(map[types.NamespacedName][]string, len(names))
	resolveSet := make(map[types.NamespacedName]bool, len(names))
	m.svcRaw, m.svcKeys = grown(m.svcRaw, len(names)), grown(m.svcKeys, len(names))
	m.claims.reserve(len(names))
	m.groups.Reserve(len(names))
	m.st.ReserveServices(len(names))
	converted := m.convertServices(names)
	for name := range names {
		svc := m.services[name]
		var sps []flows.ServicePort
		var rank claimRank
		if svc != nil {
			c := converted[name]
			sps, convProblems[name] = c.sps, c.problems
			m.reportDeclines(name, svc)
			m.report(svc, "endpoint-nodes/"+name.String(), ReasonWarning, m.setWarnings(name, endpointNodes(sps, m.admit.podCIDROwner)))
			var refused []string
			sps, refused, m.refused[name] = m.admit.admit(name, sps)
			if len(m.refused[name]) == 0 {
				delete(m.refused, name)
			}
			if !m.quiet(refused) {
				m.report(svc, "refused/"+name.String(), ReasonRefused, refused)
			}
			rank = claimRank{created: svc.CreationTimestamp.Time, name: name}
		}
		if len(sps) == 0 {
			delete(m.svcRaw, name)
		} else {
			m.svcRaw[name] = sps
		}
		resolveSet[name] = true
		for _, o := range m.claims.set(name, rank, sps) {
			resolveSet[o] = true
		}
	}
	for name := range resolveSet {
		for _, k := range m.svcKeys[name] {
			touched[k] = true
			m.st.DeleteService(k)
		}
		delete(m.svcKeys, name)
		delete(m.affinityNext, name)
		final, conflicts := m.claims.resolve(name, m.svcRaw[name])
		for i := range final {
			k := final[i].Key()
			final[i].GroupID = m.groups.ID(k)
			if s := final[i].AffinitySeconds; s > 0 {
				var next time.Time
				final[i].AffinityPeriod, next = flows.AffinityPeriodAt(m.updateTime, s)
				if cur, ok := m.affinityNext[name]; !ok || next.Before(cur) {
					m.affinityNext[name] = next
				}
			}
			touched[k] = true
			m.st.SetService(final[i])
			m.svcKeys[name] = append(m.svcKeys[name], k)
		}
		svc := m.services[name]
		if svc == nil {
			m.report(nil, "service/"+name.String(), "", nil)
			m.report(nil, "refused/"+name.String(), "", nil)
			m.report(nil, "declined/"+name.String(), "", nil)
			m.report(nil, "endpoint-nodes/"+name.String(), "", nil)
			delete(m.declines, name)
			delete(m.svcWarnings, name)
			delete(m.refused, name)
			delete(m.svcProblems, name)
			delete(m.conflicts, name)
			continue
		}
		changed := false
		if names[name] && !m.quiet(convProblems[name]) {
			changed = m.report(svc, "service/"+name.String(), ReasonInvalid, convProblems[name])
		}
		if !m.quiet(conflicts) {
			changed = m.report(svc, "conflict/"+name.String(), ReasonConflict, conflicts) || changed
		}
		if len(conflicts) == 0 {
			delete(m.conflicts, name)
		} else {
			m.conflicts[name] = conflicts
		}
		if names[name] {
			if len(convProblems[name]) == 0 {
				delete(m.svcProblems, name)
			} else {
				m.svcProblems[name] = convProblems[name]
			}
		}
		if probs := append(slices.Clone(convProblems[name]), conflicts...); len(probs) > 0 {
			// At the default level only when the problems changed (a new Event was sent).
			if changed {
				logger.Info("Service has problems", "service", klog.KObj(svc), "problems", probs)
			} else {
				logger.V(2).Info("Service has problems", "service", klog.KObj(svc), "problems", probs)
			}
		}
	}
}

// reportDeclines records and reports (SourceIPDeclined) what of svc the agent declines.
func (m *model) reportDeclines(name types.NamespacedName, svc *corev1.Service) {
	whole, ports := m.sel.Declines(svc)
	var msgs []string
	if whole != "" {
		msgs = append(msgs, whole)
	}
	for _, p := range ports {
		msgs = append(msgs, p.Reason)
	}
	if len(msgs) == 0 {
		delete(m.declines, name)
	} else {
		m.declines[name] = msgs
	}
	m.report(svc, "declined/"+name.String(), ReasonDeclined, msgs)
}

// setWarnings records the endpoint warnings of Service name and returns them.
func (m *model) setWarnings(name types.NamespacedName, warnings []string) []string {
	if len(warnings) == 0 {
		delete(m.svcWarnings, name)
	} else {
		m.svcWarnings[name] = warnings
	}
	return warnings
}

// markObject marks dirty the key of every kind whose flow sets serve the object (KindSpec.Object)
// and are rebuilt when it changes (flows.OwnObject): the keys named by the object's namespace and
// name. (Service ports are keyed by port as well; updateServices marks them.)
func markObject(touched map[flows.Key]bool, object, namespace, name string) {
	for _, spec := range flows.Kinds() {
		if spec.Object == object && spec.Triggers&flows.OwnObject != 0 {
			touched[flows.Key{Kind: spec.Kind, Namespace: namespace, Name: name}] = true
		}
	}
}

// releaseGroups frees the group ids of the given Service-port keys that st no longer holds; it
// runs after the bundle that deleted their groups.
func (m *model) releaseGroups(keys []flows.Key) {
	for _, k := range keys {
		if k.Kind != flows.KindServicePort {
			continue
		}
		if _, ok := m.st.Services[k]; !ok {
			m.groups.Release(k)
		}
	}
}

// report sends problems of one object to the EventSink, only when they differ from the last
// report under the same key (so periodic full syncs do not repeat Events). It reports whether
// new problems were sent.
// quiet reports whether report would do nothing for problems whatever its key: there are none,
// and none is recorded under any key. A full sync reports on every Service and flow set; this
// saves building their keys.
func (m *model) quiet(problems []string) bool { return len(problems) == 0 && len(m.problems) == 0 }

func (m *model) report(obj runtime.Object, key, reason string, problems []string) bool {
	msg := strings.Join(problems, "; ")
	if m.problems[key] == msg {
		return false
	}
	if msg == "" {
		delete(m.problems, key)
		return false
	}
	m.problems[key] = msg
	if m.events != nil && obj != nil {
		for _, p := range problems {
			m.events.Warn(obj, reason, p)
		}
	}
	return true
}

// objectOf returns the API object a flow set serves (KindSpec.Object; nil: none).
func (m *model) objectOf(k flows.Key) runtime.Object {
	spec, _ := flows.Spec(k.Kind)
	var obj runtime.Object
	switch spec.Object {
	case "Service":
		if s := m.services[nn(k.Namespace, k.Name)]; s != nil {
			obj = s
		}
	case "Pod":
		if p := m.pods[nn(k.Namespace, k.Name)]; p != nil {
			obj = p
		}
	case "Node":
		if n := m.nodes[k.Name]; n != nil {
			obj = n
		}
	}
	return obj
}
