package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
)

// DefaultManifestResync is how often a ManifestSource re-reads its directory when no file
// notification arrived (a fallback for file systems without inotify).
const DefaultManifestResync = 10 * time.Second

// ManifestSource is the Source of a directory of Kubernetes manifests (*.yaml, *.yml, *.json;
// several documents per file; kind List accepted) holding Nodes, Services, EndpointSlices and
// Pods; other kinds are ignored. It re-reads the directory on file notifications (fsnotify) and
// every Resync. A file that fails to parse is reported in the log and its previous good content
// is kept; an object defined twice keeps its first definition (files in name order).
type ManifestSource struct {
	// Dir is the directory.
	Dir string
	// NodeName, when set, limits Pods to those with spec.nodeName equal to it (as KubeSource's
	// field selector does).
	NodeName string
	// Resync is the fallback re-read period (0: DefaultManifestResync).
	Resync time.Duration
	// Debounce delays a re-read after a notification so that a burst of writes is read once
	// (0: 50ms).
	Debounce time.Duration

	synced atomic.Bool
	mu     sync.Mutex // serialises reloads
	files  map[string]*manifestFile
	cur    map[objectID]runtime.Object
	reads  atomic.Int64
}

var _ Source = (*ManifestSource)(nil)

type manifestFile struct {
	sum  [sha256.Size]byte
	objs []runtime.Object
}

type objectID struct {
	kind, namespace, name string
}

// Start implements Source: it reads the directory once (so the Source has synced when Start
// returns nil) and then watches it.
func (s *ManifestSource) Start(ctx context.Context, h Handler) error {
	logger := klog.FromContext(ctx).WithValues("dir", s.Dir)
	if fi, err := os.Stat(s.Dir); err != nil {
		return fmt.Errorf("manifests directory: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("manifests directory %s: not a directory", s.Dir)
	}
	s.reload(logger, h)
	s.synced.Store(true)

	w, err := fsnotify.NewWatcher()
	if err == nil {
		if err = w.Add(s.Dir); err != nil {
			w.Close()
		}
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if err != nil {
		logger.Error(err, "Watching the manifests directory failed; re-reading it periodically only")
	} else {
		events, errs = w.Events, w.Errors
	}
	go func() {
		if w != nil && err == nil {
			defer w.Close()
		}
		resync := s.Resync
		if resync <= 0 {
			resync = DefaultManifestResync
		}
		debounce := s.Debounce
		if debounce <= 0 {
			debounce = 50 * time.Millisecond
		}
		tick := time.NewTicker(resync)
		defer tick.Stop()
		var soon <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					events = nil
					continue
				}
				logger.V(5).Info("Manifests directory changed", "event", ev.String())
				if soon == nil {
					soon = time.After(debounce)
				}
			case e, ok := <-errs:
				if !ok {
					errs = nil
					continue
				}
				logger.Error(e, "Manifests directory watch error")
			case <-soon:
				soon = nil
				s.reload(logger, h)
			case <-tick.C:
				s.reload(logger, h)
			}
		}
	}()
	return nil
}

// HasSynced implements Source.
func (s *ManifestSource) HasSynced() bool { return s.synced.Load() }

// Events implements Source: problems are logged.
func (s *ManifestSource) Events() EventSink { return logEvents{} }

// reload re-reads the directory and delivers the differences to h.
func (s *ManifestSource) reload(logger klog.Logger, h Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	logger.V(4).Info("Reading the manifests directory", "dir", s.Dir, "read", s.reads.Add(1))
	if s.files == nil {
		s.files = map[string]*manifestFile{}
		s.cur = map[objectID]runtime.Object{}
	}
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		logger.Error(err, "Reading the manifests directory failed; keeping the previous content")
		return
	}
	seen := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !isManifest(name) {
			continue
		}
		path := filepath.Join(s.Dir, name)
		seen[path] = true
		data, err := os.ReadFile(path)
		if err != nil {
			logger.Error(err, "Reading a manifest failed; keeping its previous content", "file", path)
			continue
		}
		sum := sha256.Sum256(data)
		if f := s.files[path]; f != nil && f.sum == sum {
			continue
		}
		objs, err := ParseManifests(data)
		if err != nil {
			logger.Error(err, "Parsing a manifest failed; keeping its previous content", "file", path)
			continue
		}
		s.files[path] = &manifestFile{sum: sum, objs: objs}
		logger.V(2).Info("Manifest read", "file", path, "objects", len(objs))
	}
	for path := range s.files {
		if !seen[path] {
			delete(s.files, path)
			logger.V(2).Info("Manifest removed", "file", path)
		}
	}

	next := map[objectID]runtime.Object{}
	paths := make([]string, 0, len(s.files))
	for p := range s.files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	// Objects without metadata.creationTimestamp get the time this source first saw them, as an
	// API server would set it, so that "the older Service wins" (claims) also holds here.
	now := metav1.Now()
	for _, p := range paths {
		for _, o := range s.files[p].objs {
			if pod, ok := o.(*corev1.Pod); ok && s.NodeName != "" && pod.Spec.NodeName != s.NodeName {
				continue
			}
			id := idOf(o)
			if _, dup := next[id]; dup {
				logger.Info("Object defined twice; keeping the first definition", "file", p, "kind", id.kind, "object", klog.KRef(id.namespace, id.name))
				continue
			}
			if m := o.(metav1.Object); m.GetCreationTimestamp().Time.IsZero() {
				ts := now
				if prev := s.cur[id]; prev != nil {
					ts = prev.(metav1.Object).GetCreationTimestamp()
				}
				o = o.DeepCopyObject()
				o.(metav1.Object).SetCreationTimestamp(ts)
			}
			next[id] = o
		}
	}
	for id, o := range next {
		prev := s.cur[id]
		if prev != nil && equality.Semantic.DeepEqual(prev, o) {
			continue
		}
		deliver(h, prev, o)
	}
	for id, prev := range s.cur {
		if next[id] == nil {
			deliver(h, prev, nil)
		}
	}
	s.cur = next
}

func isManifest(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

func idOf(o runtime.Object) objectID {
	m := o.(metav1.Object)
	return objectID{kind: fmt.Sprintf("%T", o), namespace: m.GetNamespace(), name: m.GetName()}
}

// deliver calls the Handler method of o's type; prev and cur are both nil-able but not both nil.
func deliver(h Handler, prev, cur runtime.Object) {
	o := cur
	if o == nil {
		o = prev
	}
	switch o.(type) {
	case *corev1.Node:
		h.OnNode(typed[corev1.Node](prev), typed[corev1.Node](cur))
	case *corev1.Service:
		h.OnService(typed[corev1.Service](prev), typed[corev1.Service](cur))
	case *discoveryv1.EndpointSlice:
		h.OnEndpointSlice(typed[discoveryv1.EndpointSlice](prev), typed[discoveryv1.EndpointSlice](cur))
	case *corev1.Pod:
		h.OnPod(typed[corev1.Pod](prev), typed[corev1.Pod](cur))
	case *corev1.Namespace:
		h.OnNamespace(typed[corev1.Namespace](prev), typed[corev1.Namespace](cur))
	case *egressv1.EgressGateway:
		h.OnEgressGateway(typed[egressv1.EgressGateway](prev), typed[egressv1.EgressGateway](cur))
	case *networkingv1.ServiceCIDR:
		h.OnServiceCIDR(typed[networkingv1.ServiceCIDR](prev), typed[networkingv1.ServiceCIDR](cur))
	}
}

func typed[T any](o runtime.Object) *T {
	if o == nil {
		return nil
	}
	return any(o).(*T)
}

// ParseManifests parses YAML or JSON documents (separated by "---") and returns the Nodes,
// Services, EndpointSlices and Pods among them (items of a List included). Other kinds are
// skipped. Namespaced objects without a namespace get "default". Any malformed document, or an
// object without a name, fails the whole input.
func ParseManifests(data []byte) ([]runtime.Object, error) {
	var out []runtime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if string(bytes.TrimSpace(js)) == "null" {
			continue // only comments
		}
		objs, err := decodeObject(js)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, objs...)
	}
}

func decodeObject(js []byte) ([]runtime.Object, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	var o runtime.Object
	namespaced := true
	switch {
	case strings.HasSuffix(tm.Kind, "List"):
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(js, &l); err != nil {
			return nil, err
		}
		var out []runtime.Object
		for j, it := range l.Items {
			objs, err := decodeObject(it)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", j, err)
			}
			out = append(out, objs...)
		}
		return out, nil
	case tm.Kind == "Node" && tm.APIVersion == "v1":
		o, namespaced = &corev1.Node{}, false
	case tm.Kind == "Service" && tm.APIVersion == "v1":
		o = &corev1.Service{}
	case tm.Kind == "Pod" && tm.APIVersion == "v1":
		o = &corev1.Pod{}
	case tm.Kind == "EndpointSlice" && tm.APIVersion == "discovery.k8s.io/v1":
		o = &discoveryv1.EndpointSlice{}
	case tm.Kind == "Namespace" && tm.APIVersion == "v1":
		o, namespaced = &corev1.Namespace{}, false
	case tm.Kind == "EgressGateway" && tm.APIVersion == egressv1.SchemeGroupVersion.String():
		o, namespaced = &egressv1.EgressGateway{}, false
	case tm.Kind == "ServiceCIDR" && tm.APIVersion == networkingv1.SchemeGroupVersion.String():
		o, namespaced = &networkingv1.ServiceCIDR{}, false
	case tm.Kind == "":
		return nil, errors.New("object without kind")
	default:
		return nil, nil
	}
	if err := json.Unmarshal(js, o); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	m := o.(metav1.Object)
	if m.GetName() == "" {
		return nil, fmt.Errorf("%s without metadata.name", tm.Kind)
	}
	if namespaced && m.GetNamespace() == "" {
		m.SetNamespace(metav1.NamespaceDefault)
	}
	if !namespaced {
		m.SetNamespace("")
	}
	return []runtime.Object{o}, nil
}
