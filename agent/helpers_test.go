package agent

import (
	"context"
	"maps"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// Test IP conventions: nodes 192.168.0.0/24 (node1 = .1 is "this" node), pod CIDRs
// 10.244.<n>.0/24, LoadBalancer and external IPs 198.51.100.0/24, clients 203.0.113.0/24.

const thisNode = "node1"

func makeNode(name, ip, podCIDR string, mods ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: ip},
			{Type: corev1.NodeHostName, Address: name},
		}},
	}
	for _, m := range mods {
		m(n)
	}
	return n
}

// makeService returns an opted-in NodePort Service with one TCP port "http" (80 -> nodePort).
func makeService(ns, name string, nodePort int32, mods ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{AnnotationPreserveSourceIP: "true"}},
		Spec: corev1.ServiceSpec{
			Type:                  corev1.ServiceTypeNodePort,
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: nodePort}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

type epOpt func(*discoveryv1.Endpoint)

func notReady(e *discoveryv1.Endpoint) { e.Conditions.Ready = ptr.To(false) }
func terminating(serving bool) epOpt {
	return func(e *discoveryv1.Endpoint) {
		e.Conditions.Ready = ptr.To(false)
		e.Conditions.Serving = ptr.To(serving)
		e.Conditions.Terminating = ptr.To(true)
	}
}

func ep(ip, node string, opts ...epOpt) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(node)}
	for _, o := range opts {
		o(&e)
	}
	return e
}

// makeSlice returns an IPv4 EndpointSlice of Service svc with port "http"/TCP/8080.
func makeSlice(ns, svc, name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// fakeDataplane is an in-memory Dataplane.
type fakeDataplane struct {
	ports      flows.Ports
	podPorts   []PodPort
	changes    chan struct{}
	podChanges chan struct{}
	fail       atomic.Bool
	// ensured counts EnsureIntegration calls (one per full sync's OVSDB read).
	ensured atomic.Int32
	// acks are the AckPodFlows calls' acknowledgements, merged (interface -> cookie).
	ackMu    sync.Mutex
	acks     map[string]flows.Cookie
	ackCalls int
}

func newFakeDataplane() *fakeDataplane {
	return &fakeDataplane{
		ports: flows.Ports{ExUplink: 1, ExPatch: 2, IntPatch: 1, IntTunnel: 2,
			ExMAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}},
		changes: make(chan struct{}, 1), podChanges: make(chan struct{}, 1),
		acks: map[string]flows.Cookie{},
	}
}

func (d *fakeDataplane) EnsureIntegration(context.Context) (flows.Ports, error) {
	d.ensured.Add(1)
	if d.fail.Load() {
		return flows.Ports{}, errFakeDataplane
	}
	return d.ports, nil
}

func (d *fakeDataplane) PodPorts(context.Context) ([]PodPort, error) { return d.podPorts, nil }
func (d *fakeDataplane) Changes() <-chan struct{}                    { return d.changes }
func (d *fakeDataplane) PodPortChanges() <-chan struct{}             { return d.podChanges }

func (d *fakeDataplane) AckPodFlows(_ context.Context, acks map[string]flows.Cookie) error {
	d.ackMu.Lock()
	defer d.ackMu.Unlock()
	maps.Copy(d.acks, acks)
	d.ackCalls++
	return nil
}

// ack returns the acknowledged cookie of interface name (0: none).
func (d *fakeDataplane) ack(name string) flows.Cookie {
	d.ackMu.Lock()
	defer d.ackMu.Unlock()
	return d.acks[name]
}

var errFakeDataplane = &net.OpError{Op: "dial", Err: net.UnknownNetworkError("fake")}

// recordingEvents collects Warn calls.
type recordingEvents struct{ msgs []string }

func (r *recordingEvents) Warn(obj runtime.Object, reason, message string) {
	r.msgs = append(r.msgs, reason+": "+message)
}

func metaNS(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }

func stringsReplace(s, old, new string) string { return strings.Replace(s, old, new, 1) }
