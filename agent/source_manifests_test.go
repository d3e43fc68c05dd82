package agent

import (
	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"

	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/klog/v2/ktesting"
)

// recordingHandler records "kind op ns/name" per call.
type recordingHandler struct {
	mu  sync.Mutex
	log []string
	svc map[string]*corev1.Service
}

func (h *recordingHandler) add(kind string, prev, cur interface {
	GetNamespace() string
	GetName() string
}, isNil [2]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	op, o := "update", cur
	switch {
	case isNil[0]:
		op = "add"
	case isNil[1]:
		op, o = "delete", prev
	}
	h.log = append(h.log, kind+" "+op+" "+o.GetNamespace()+"/"+o.GetName())
}

func (h *recordingHandler) OnNode(p, c *corev1.Node) {
	h.add("Node", p, c, [2]bool{p == nil, c == nil})
}
func (h *recordingHandler) OnService(p, c *corev1.Service) {
	h.mu.Lock()
	if h.svc == nil {
		h.svc = map[string]*corev1.Service{}
	}
	if c != nil {
		h.svc[c.Name] = c
	} else {
		delete(h.svc, p.Name)
	}
	h.mu.Unlock()
	h.add("Service", p, c, [2]bool{p == nil, c == nil})
}
func (h *recordingHandler) OnEndpointSlice(p, c *discoveryv1.EndpointSlice) {
	h.add("EndpointSlice", p, c, [2]bool{p == nil, c == nil})
}
func (h *recordingHandler) OnPod(p, c *corev1.Pod) { h.add("Pod", p, c, [2]bool{p == nil, c == nil}) }
func (h *recordingHandler) OnNamespace(p, c *corev1.Namespace) {
	h.add("Namespace", p, c, [2]bool{p == nil, c == nil})
}
func (h *recordingHandler) OnServiceCIDR(p, c *networkingv1.ServiceCIDR) {
	h.add("ServiceCIDR", p, c, [2]bool{p == nil, c == nil})
}
func (h *recordingHandler) OnEgressGateway(p, c *egressv1.EgressGateway) {
	h.add("EgressGateway", p, c, [2]bool{p == nil, c == nil})
}

func (h *recordingHandler) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.log
	h.log = nil
	return out
}

func (h *recordingHandler) pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.log)
}

func (h *recordingHandler) service(name string) *corev1.Service {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.svc[name]
}

const manifestA = `# two documents and an ignored kind
apiVersion: v1
kind: Node
metadata: {name: node1}
status:
  addresses: [{type: InternalIP, address: 192.168.0.1}]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  annotations: {ovs-srcip.io/preserve-source-ip: "true"}
spec:
  type: NodePort
  ports: [{name: http, port: 80, nodePort: 30080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: ignored}
`

const manifestB = `apiVersion: v1
kind: List
items:
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: web-a, namespace: default, labels: {kubernetes.io/service-name: web}}
  addressType: IPv4
  endpoints: [{addresses: [10.244.1.5]}]
  ports: [{name: http, port: 8080}]
- apiVersion: v1
  kind: Pod
  metadata: {name: web-0}
  spec: {nodeName: node1}
- apiVersion: v1
  kind: Pod
  metadata: {name: elsewhere}
  spec: {nodeName: node2}
`

func startManifests(t *testing.T, dir string) (*ManifestSource, *recordingHandler) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	s := &ManifestSource{Dir: dir, NodeName: "node1", Resync: time.Hour, Debounce: 20 * time.Millisecond}
	h := &recordingHandler{}
	require.NoError(t, s.Start(ctx, h))
	require.True(t, s.HasSynced())
	return s, h
}

func writeFile(t *testing.T, path, content string) {
	tmp := path + ".tmp~"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

func TestManifestSourceInitialAndChange(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), manifestA)
	writeFile(t, filepath.Join(dir, "b.yml"), manifestB)
	_, h := startManifests(t, dir)
	assert.ElementsMatch(t, []string{
		"Node add /node1", "Service add default/web", "EndpointSlice add default/web-a", "Pod add default/web-0",
	}, h.take())

	// A change is delivered within a bounded time (fsnotify; the resync is an hour).
	start := time.Now()
	writeFile(t, filepath.Join(dir, "a.yaml"), stringsReplace(manifestA, "nodePort: 30080", "nodePort: 30081"))
	require.Eventually(t, func() bool {
		s := h.service("web")
		return s != nil && s.Spec.Ports[0].NodePort == 30081
	}, 5*time.Second, 10*time.Millisecond)
	t.Logf("change delivered after %v", time.Since(start))
	assert.Equal(t, []string{"Service update default/web"}, h.take(), "only the changed object")

	// Removing a file deletes its objects.
	require.NoError(t, os.Remove(filepath.Join(dir, "b.yml")))
	require.Eventually(t, func() bool { return h.pending() > 0 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	assert.ElementsMatch(t, []string{"EndpointSlice delete default/web-a", "Pod delete default/web-0"}, h.take())
}

func TestManifestSourceBrokenFileKeepsOldContent(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), manifestA)
	s, h := startManifests(t, dir)
	h.take()
	reads := s.Reads()

	writeFile(t, filepath.Join(dir, "a.yaml"), manifestA+"\n---\nkind: [unclosed\n")
	require.Eventually(t, func() bool { return s.Reads() > reads }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	assert.Empty(t, h.take(), "a broken file keeps its previous objects")
	assert.NotNil(t, h.service("web"))

	// Fixing it applies the new content.
	writeFile(t, filepath.Join(dir, "a.yaml"), stringsReplace(manifestA, "name: web", "name: web2"))
	require.Eventually(t, func() bool { return h.service("web2") != nil }, 5*time.Second, 10*time.Millisecond)
	assert.Nil(t, h.service("web"))
}

func TestManifestSourceMissingDir(t *testing.T) {
	s := &ManifestSource{Dir: filepath.Join(t.TempDir(), "nope")}
	require.Error(t, s.Start(context.Background(), &recordingHandler{}))
	assert.False(t, s.HasSynced())
}

func TestParseManifestsErrors(t *testing.T) {
	_, err := ParseManifests([]byte("apiVersion: v1\nkind: Service\nmetadata: {}\n"))
	assert.Error(t, err, "no name")
	_, err = ParseManifests([]byte("metadata: {name: x}\n"))
	assert.Error(t, err, "no kind")
	objs, err := ParseManifests([]byte("---\n# only a comment\n---\n"))
	assert.NoError(t, err)
	assert.Empty(t, objs)
}

// Objects without a creationTimestamp get the time the source first saw them (kept across
// changes), so that a Service added later is younger than one already there ("the older Service
// wins" also holds without an API server).
func TestManifestSourceCreationTimestamps(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), manifestA)
	_, h := startManifests(t, dir)
	web := h.service("web")
	require.NotNil(t, web)
	require.False(t, web.CreationTimestamp.Time.IsZero())
	time.Sleep(1100 * time.Millisecond)
	writeFile(t, filepath.Join(dir, "c.yaml"), stringsReplace(stringsReplace(manifestA, "name: web", "name: aaa-late"), "nodePort: 30080", "nodePort: 30082"))
	require.Eventually(t, func() bool { return h.service("aaa-late") != nil }, 5*time.Second, 10*time.Millisecond)
	assert.True(t, h.service("aaa-late").CreationTimestamp.After(web.CreationTimestamp.Time), "the later Service is younger")
	writeFile(t, filepath.Join(dir, "a.yaml"), stringsReplace(manifestA, "nodePort: 30080", "nodePort: 30081"))
	require.Eventually(t, func() bool {
		s := h.service("web")
		return s != nil && s.Spec.Ports[0].NodePort == 30081
	}, 5*time.Second, 10*time.Millisecond)
	assert.True(t, h.service("web").CreationTimestamp.Equal(&web.CreationTimestamp), "a change keeps the first-seen time")
}
