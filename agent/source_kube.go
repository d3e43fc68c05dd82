package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	egressclient "github.com/ovs-srcip/ovs-srcip/client/clientset/versioned"
	egressinformers "github.com/ovs-srcip/ovs-srcip/client/informers/externalversions"
)

// KubeSource is the Source of a Kubernetes cluster: shared informers on Nodes, Services,
// discovery/v1 EndpointSlices and this node's Pods (field selector spec.nodeName). Problems are
// recorded as Kubernetes Events on the object.
type KubeSource struct {
	client   kubernetes.Interface
	egress   egressclient.Interface
	nodeName string

	mu     sync.Mutex
	regs   []cache.ResourceEventHandlerRegistration
	events EventSink
}

var _ Source = (*KubeSource)(nil)

// NewKubeSource returns a KubeSource for the node nodeName.
func NewKubeSource(client kubernetes.Interface, nodeName string) *KubeSource {
	return &KubeSource{client: client, nodeName: nodeName, events: logEvents{}}
}

// WithEgress makes the source watch EgressGateways through c (and Namespaces, whose labels
// their namespaceSelector reads); without it no EgressGateway is seen.
func (s *KubeSource) WithEgress(c egressclient.Interface) *KubeSource {
	s.egress = c
	return s
}

// Start implements Source.
func (s *KubeSource) Start(ctx context.Context, h Handler) error {
	strip := informers.WithTransform(trimObject)
	all := informers.NewSharedInformerFactoryWithOptions(s.client, 0, strip)
	local := informers.NewSharedInformerFactoryWithOptions(s.client, 0, strip,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", s.nodeName).String()
		}))
	var regs []cache.ResourceEventHandlerRegistration
	add := func(inf cache.SharedIndexInformer, hf cache.ResourceEventHandlerFuncs) error {
		reg, err := inf.AddEventHandler(hf)
		if err != nil {
			return fmt.Errorf("add event handler: %w", err)
		}
		regs = append(regs, reg)
		return nil
	}
	if err := add(all.Core().V1().Nodes().Informer(), handlerFuncs(h.OnNode)); err != nil {
		return err
	}
	if err := add(all.Core().V1().Services().Informer(), handlerFuncs(h.OnService)); err != nil {
		return err
	}
	if err := add(all.Discovery().V1().EndpointSlices().Informer(), handlerFuncs(h.OnEndpointSlice)); err != nil {
		return err
	}
	if err := add(local.Core().V1().Pods().Informer(), handlerFuncs(h.OnPod)); err != nil {
		return err
	}
	var egw egressinformers.SharedInformerFactory
	if s.served(ctx, networkingv1.SchemeGroupVersion.String(), "servicecidrs") {
		// ServiceCIDRs (GA in Kubernetes 1.33) give admission the cluster's Service CIDRs without
		// --service-cidrs; an older API server has none, and the flag is all admission knows.
		if err := add(all.Networking().V1().ServiceCIDRs().Informer(), handlerFuncs(h.OnServiceCIDR)); err != nil {
			return err
		}
	} else {
		klog.FromContext(ctx).Info("The API server serves no ServiceCIDRs (networking.k8s.io/v1, Kubernetes 1.33 and later): admission knows the Service CIDRs from --service-cidrs only")
	}
	if s.egress != nil && !s.served(ctx, v1alpha1.SchemeGroupVersion.String(), "egressgateways") {
		// Without the CRD an informer would never sync and hold back every sync of this node:
		// run without egress gateways instead (deploy/ installs the CRD).
		klog.FromContext(ctx).Info("The EgressGateway CRD (egressgateways.ovs-srcip.io) is not installed: egress gateways are off until the agent restarts after it is (kubectl apply -k deploy/crds)")
	} else if s.egress != nil {
		if err := add(all.Core().V1().Namespaces().Informer(), handlerFuncs(h.OnNamespace)); err != nil {
			return err
		}
		egw = egressinformers.NewSharedInformerFactoryWithOptions(s.egress, 0, egressinformers.WithTransform(stripManagedFields))
		if err := add(egw.OvsSrcip().V1alpha1().EgressGateways().Informer(), handlerFuncs(h.OnEgressGateway)); err != nil {
			return err
		}
	}

	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "srcip-agent", Host: s.nodeName})
	go func() {
		<-ctx.Done()
		b.Shutdown()
	}()

	s.mu.Lock()
	s.regs = regs
	s.events = kubeEvents{rec: rec}
	s.mu.Unlock()
	all.Start(ctx.Done())
	local.Start(ctx.Done())
	if egw != nil {
		egw.Start(ctx.Done())
	}
	return nil
}

// HasSynced implements Source: every informer has listed and its handler has seen the list.
func (s *KubeSource) HasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.regs) == 0 {
		return false
	}
	for _, r := range s.regs {
		if !r.HasSynced() {
			return false
		}
	}
	return true
}

// Events implements Source.
func (s *KubeSource) Events() EventSink {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events
}

// handlerFuncs adapts a typed Handler method to informer callbacks, unwrapping delete tombstones.
func handlerFuncs[T any](on func(prev, cur *T)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(*T); ok {
				on(nil, o)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*T)
			c, ok2 := cur.(*T)
			if ok1 && ok2 {
				on(o, c)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(*T); ok {
				on(o, nil)
			}
		},
	}
}

// kubeEvents records Warning Events through client-go's event recorder (which aggregates and
// rate-limits them).
type kubeEvents struct{ rec record.EventRecorder }

func (k kubeEvents) Warn(obj runtime.Object, reason, message string) {
	logEvents{}.Warn(obj, reason, message)
	k.rec.Event(obj, corev1.EventTypeWarning, reason, message)
}

// logEvents only logs (manifests mode, and before the recorder exists).
type logEvents struct{}

func (logEvents) Warn(obj runtime.Object, reason, message string) {
	logger := klog.Background()
	if m, ok := obj.(metav1.Object); ok {
		logger = logger.WithValues("object", klog.KObj(m), "kind", fmt.Sprintf("%T", obj))
	}
	logger.Info("Warning", "reason", reason, "message", message)
}

// trimObject is the informers' transform: it drops from every cached object what the agent never
// reads, before the object enters the cache, so that the caches (the agent's largest memory at 10k
// Services) hold only the fields used: metadata.managedFields and ownerReferences, annotations other
// than ovs-srcip.io/* (one shared map per single annotation: annotationSets), a Service's
// labels other than service.kubernetes.io/service-proxy-name (Eligible), its selector and
// status conditions, an EndpointSlice's labels other than kubernetes.io/service-name and its
// endpoints' hostname, targetRef, zone and deprecatedTopology (the hints are kept), a Node's images, node info,
// capacity, allocatable, volumes and conditions other than Ready. Conversions (convert.go), the
// equality checks (equal.go) and the Events' object references read nothing of it.
func trimObject(obj any) (any, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return obj, nil // a tombstone: its object was trimmed when it was cached
	}
	m.SetManagedFields(nil)
	m.SetOwnerReferences(nil)
	if a := m.GetAnnotations(); len(a) > 0 {
		var keep map[string]string
		for k, v := range a {
			if strings.HasPrefix(k, AnnotationPrefix) {
				if keep == nil {
					keep = map[string]string{}
				}
				keep[k] = v
			}
		}
		if len(keep) == 1 {
			keep = annotationSets.intern(keep)
		}
		m.SetAnnotations(keep)
	}
	switch o := obj.(type) {
	case *corev1.Service:
		var keep map[string]string
		for _, l := range []string{LabelServiceProxyName, LabelHeadless} {
			if v, ok := o.Labels[l]; ok {
				if keep == nil {
					keep = map[string]string{}
				}
				keep[l] = v
			}
		}
		o.Labels = keep
		// Never read: the selector is the EndpointSlice controller's business, the conditions
		// kube-proxy's and the cloud's.
		o.Spec.Selector, o.Status.Conditions = nil, nil
	case *discoveryv1.EndpointSlice:
		if svc, ok := o.Labels[discoveryv1.LabelServiceName]; ok {
			o.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
		} else {
			o.Labels = nil
		}
		for i := range o.Endpoints {
			e := &o.Endpoints[i]
			// The hints stay: endpointsFor honours them (trafficDistribution, topology mode).
			e.Hostname, e.TargetRef, e.Zone, e.DeprecatedTopology = nil, nil, nil, nil
		}
		compactEndpoints(o)
	case *corev1.Node:
		o.Status.Images, o.Status.VolumesInUse, o.Status.VolumesAttached = nil, nil, nil
		o.Status.NodeInfo, o.Status.DaemonEndpoints = corev1.NodeSystemInfo{}, corev1.NodeDaemonEndpoints{}
		o.Status.Capacity, o.Status.Allocatable = nil, nil
		o.Status.Conditions = slices.DeleteFunc(o.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type != corev1.NodeReady })
	}
	return obj, nil
}

// compactEndpoints re-lays a decoded EndpointSlice's endpoints in fewer, exactly sized
// allocations, with the same values: the endpoints in one slice of their length (decoding grows
// it by appending), every endpoint's addresses in one shared backing array, the conditions'
// booleans pointing to shared true and false values, and the node names to one string per
// name (nodeNames). At 10k EndpointSlices of 10 endpoints this is about a third of the
// EndpointSlice cache. The cache's objects are never modified (client-go's rule), so sharing
// the pointed-to values is safe.
func compactEndpoints(o *discoveryv1.EndpointSlice) {
	n := 0
	for _, e := range o.Endpoints {
		n += len(e.Addresses)
	}
	eps := make([]discoveryv1.Endpoint, len(o.Endpoints))
	addrs := make([]string, 0, n)
	for i, e := range o.Endpoints {
		from := len(addrs)
		addrs = append(addrs, e.Addresses...)
		if e.Addresses != nil {
			e.Addresses = addrs[from:len(addrs):len(addrs)]
		}
		e.Conditions.Ready = sharedBool(e.Conditions.Ready)
		e.Conditions.Serving = sharedBool(e.Conditions.Serving)
		e.Conditions.Terminating = sharedBool(e.Conditions.Terminating)
		e.NodeName = nodeNames.intern(e.NodeName)
		eps[i] = e
	}
	if o.Endpoints != nil {
		o.Endpoints = eps
	}
}

var sharedTrue, sharedFalse = true, false

// sharedBool returns a pointer to a shared value equal to *b (nil: nil).
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &sharedTrue
	default:
		return &sharedFalse
	}
}

// nodeNames are the node names of the cached EndpointSlices' endpoints, one string each.
var nodeNames = interner{max: 1 << 14}

// interner hands out one shared *string per distinct value, for at most max values (then a
// value not seen yet is returned as it is): safe for concurrent use.
type interner struct {
	mu  sync.Mutex
	max int
	m   map[string]*string
}

// intern returns the shared pointer for *s (nil: nil).
func (in *interner) intern(s *string) *string {
	if s == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if p, ok := in.m[*s]; ok {
		return p
	}
	if len(in.m) >= in.max {
		return s
	}
	if in.m == nil {
		in.m = map[string]*string{}
	}
	in.m[*s] = s
	return s
}

// annotationSets are the cached objects' ovs-srcip.io annotations when there is one: at 10k
// opted-in Services one map of one entry instead of 10k.
var annotationSets = mapInterner{max: 256}

// mapInterner hands out one shared map per distinct single-entry map, for at most max of them
// (then a map not seen yet is returned as it is): safe for concurrent use.
type mapInterner struct {
	mu  sync.Mutex
	max int
	m   map[[2]string]map[string]string
}

// intern returns the shared map equal to m, which has exactly one entry.
func (in *mapInterner) intern(m map[string]string) map[string]string {
	var key [2]string
	for k, v := range m {
		key = [2]string{k, v}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if s, ok := in.m[key]; ok {
		return s
	}
	if len(in.m) >= in.max {
		return m
	}
	if in.m == nil {
		in.m = map[[2]string]map[string]string{}
	}
	in.m[key] = m
	return m
}

// served reports whether the API server serves resource (plural, e.g. "egressgateways") in the
// group version gv (e.g. "ovs-srcip.io/v1alpha1"), by discovery. On an error other than "not
// found" it assumes it does: the informer then retries as any other does, rather than a feature
// being switched off by a transient failure.
func (s *KubeSource) served(ctx context.Context, gv, resource string) bool {
	list, err := s.client.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return false
		}
		klog.FromContext(ctx).Error(err, "Discovery failed; watching the resource anyway", "groupVersion", gv, "resource", resource)
		return true
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true
		}
	}
	return false
}

// stripManagedFields drops metadata.managedFields (the EgressGateway informer's transform: the
// agent reads every other field of a policy).
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}
