package main

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The synthetic cluster: nodes node1..nodeN (node1 is the lab's node, the one the agent and
// kube-proxy serve), and opted-in NodePort Services svc-00000... in namespace perf, each with one
// EndpointSlice (written by the benchmark, as an EndpointSlice controller would) of E ready
// endpoints on E different nodes.

const (
	perfNS     = "perf"
	annotation = "ovs-srcip.io/preserve-source-ip"
	firstPort  = 8080
)

type service struct {
	name      string
	clusterIP string // the IPv4 one (spec.clusterIP)
	nodePort  int32
	slice     *discoveryv1.EndpointSlice // as last written
}

type cluster struct {
	c         kubernetes.Interface
	nodes     int
	endpoints int
	mu        sync.Mutex
	svcs      []*service
	dual      bool // the Nodes are dual-stack (setNodesDual)
	dualSvcs  int  // Services 0..dualSvcs-1 are dual-stack with an IPv6 EndpointSlice (setDualStack)
}

func nodeName(k int) string { return fmt.Sprintf("node%d", k) }

// nodeObj is Node k: InternalIP 192.0.2.(10+k) and pod CIDR 10.244.k.0/24 (node1 is the lab's
// node); dual-stack (dual) also 2001:db8:0:2::(10+k) (the lab's IPv6 underlay, test/lab) and
// 2001:db8:244:k::/64 (hex k), the IPv6 entry second (kubelet and kube-controller-manager order).
func nodeObj(k int, dual bool) *corev1.Node {
	cidrs := []string{fmt.Sprintf("10.244.%d.0/24", k)}
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.0.2.%d", 10+k)}}
	if dual {
		cidrs = append(cidrs, fmt.Sprintf("2001:db8:244:%x::/64", k))
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8:0:2::%d", 10+k)})
	}
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: nodeName(k), Labels: map[string]string{"kubernetes.io/hostname": nodeName(k), "kubernetes.io/os": "linux"}},
		Spec:       corev1.NodeSpec{PodCIDR: cidrs[0], PodCIDRs: cidrs},
		Status: corev1.NodeStatus{
			Addresses:  append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: nodeName(k)}),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
		},
	}
}

// createNodes writes the namespace and node1..nodeN, IPv4-only.
func (cl *cluster) createNodes(ctx context.Context) error {
	if _, err := cl.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: perfNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	return cl.writeNodes(ctx, false)
}

// writeNodes creates node1..nodeN of one kind (dual: dual-stack), with their status.
func (cl *cluster) writeNodes(ctx context.Context, dual bool) error {
	for k := 1; k <= cl.nodes; k++ {
		n := nodeObj(k, dual)
		st := n.Status
		created, err := cl.c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		created.Status = st
		if _, err := cl.c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", n.Name, err)
		}
	}
	cl.dual = dual
	return nil
}

// setNodesDual makes every Node dual-stack (dual) or IPv4-only again: deleted and created anew,
// since a Node's spec.podCIDRs cannot change once set. Only while no agent runs.
func (cl *cluster) setNodesDual(ctx context.Context, dual bool) error {
	if cl.dual == dual {
		return nil
	}
	for k := 1; k <= cl.nodes; k++ {
		if err := cl.c.CoreV1().Nodes().Delete(ctx, nodeName(k), metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete node %s: %w", nodeName(k), err)
		}
	}
	return cl.writeNodes(ctx, dual)
}

// endpointIP is the pod IP of endpoint j of Service i: on node (i*E+j)%N+1, E consecutive nodes.
func (cl *cluster) endpoint(i, j int) (node string, ip netip.Addr) {
	g := i*cl.endpoints + j
	k := g%cl.nodes + 1
	host := (g/cl.nodes)%250 + 2
	return nodeName(k), netip.AddrFrom4([4]byte{10, 244, byte(k), byte(host)})
}

func (cl *cluster) slice(i int, name string, port int32) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-perf", Namespace: perfNS, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "srcip-perf"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
	}
	for j := 0; j < cl.endpoints; j++ {
		node, ip := cl.endpoint(i, j)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip.String()}, NodeName: ptr.To(node),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}})
	}
	return s
}

// grow creates Services (and their EndpointSlices) until there are n, with 32 writers.
func (cl *cluster) grow(ctx context.Context, n int) error {
	from := len(cl.svcs)
	if n <= from {
		return nil
	}
	add := make([]*service, n-from)
	work := make(chan int)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("svc-%05d", i)
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: perfNS, Annotations: map[string]string{annotation: "true"}},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
						Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(firstPort)}}},
				}
				created, err := cl.c.CoreV1().Services(perfNS).Create(ctx, svc, metav1.CreateOptions{})
				var sl *discoveryv1.EndpointSlice
				if err == nil {
					sl, err = cl.c.DiscoveryV1().EndpointSlices(perfNS).Create(ctx, cl.slice(i, name, firstPort), metav1.CreateOptions{})
				}
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					continue
				}
				add[i-from] = &service{name: name, clusterIP: created.Spec.ClusterIP, nodePort: created.Spec.Ports[0].NodePort, slice: sl}
			}
		}()
	}
	for i := from; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	cl.svcs = append(cl.svcs, add...)
	return nil
}

// setPort writes Service i's EndpointSlice with the target port p (the change every latency
// measurement makes: every endpoint gets a new port, so every bucket of the Service changes).
func (cl *cluster) setPort(ctx context.Context, i int, p int32) error {
	s := cl.svcs[i]
	sl := s.slice.DeepCopy()
	sl.Ports[0].Port = ptr.To(p)
	out, err := cl.c.DiscoveryV1().EndpointSlices(perfNS).Update(ctx, sl, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	cl.mu.Lock()
	s.slice = out
	cl.mu.Unlock()
	return nil
}
