package agent

import (
	"fmt"
	"reflect"
	"runtime"
	"runtime/metrics"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkCachedObjects measures the live heap that 10k EndpointSlices (10 endpoints each,
// over 50 nodes) and 10k NodePort Services, as test/perf writes them and the API server returns
// them, hold once decoded from protobuf and passed through the informers' transform
// (trimObject): slices-MB and services-MB.
func BenchmarkCachedObjects(b *testing.B) {
	t := b
	const n = 10000
	var sliceBytes, svcBytes [][]byte
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%05d", i)
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-perf", Namespace: "perf", UID: types.UID(fmt.Sprintf("9f1c2d3e-4b5a-6c7d-8e9f-%012d", i)), ResourceVersion: fmt.Sprint(100000 + i), Generation: 1,
				CreationTimestamp: metav1.Now(), Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "srcip-perf"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "perf", Operation: "Update", APIVersion: "discovery.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: make([]byte, 600)}}}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))}},
		}
		for j := 0; j < 10; j++ {
			node := (i+j)%50 + 1
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 100+node/250, node%250, i%250+2)}, NodeName: ptr.To(fmt.Sprintf("node%d", node)),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}})
		}
		b, _ := s.Marshal()
		sliceBytes = append(sliceBytes, b)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "perf", UID: types.UID(fmt.Sprintf("8f1c2d3e-4b5a-6c7d-8e9f-%012d", i)), ResourceVersion: fmt.Sprint(200000 + i),
				CreationTimestamp: metav1.Now(), Annotations: map[string]string{"ovs-srcip.io/preserve-source-ip": "true"}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
				ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, i%250), ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250)},
				IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack), SessionAffinity: corev1.ServiceAffinityNone,
				InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
				Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: int32(20000 + i)}}},
		}
		b, _ = svc.Marshal()
		svcBytes = append(svcBytes, b)
	}
	var slicesMB, servicesMB float64
	for b.Loop() {
		tr := struct{ fn func(any) (any, error) }{trimObject}
		before := liveHeap()
		var keep []any
		for _, b := range sliceBytes {
			s := &discoveryv1.EndpointSlice{}
			if err := s.Unmarshal(b); err != nil {
				t.Fatal(err)
			}
			o, _ := tr.fn(s)
			keep = append(keep, o)
		}
		mid := liveHeap()
		for _, b := range svcBytes {
			s := &corev1.Service{}
			if err := s.Unmarshal(b); err != nil {
				t.Fatal(err)
			}
			o, _ := tr.fn(s)
			keep = append(keep, o)
		}
		after := liveHeap()
		slicesMB, servicesMB = float64(mid-before)/1e6, float64(after-mid)/1e6
		runtime.KeepAlive(keep)
	}
	b.ReportMetric(slicesMB, "slices-MB")
	b.ReportMetric(servicesMB, "services-MB")
}

// TestCompactEndpoints: the compacted EndpointSlice holds the same values.
func TestCompactEndpoints(t *testing.T) {
	s := &discoveryv1.EndpointSlice{
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1", "10.0.0.9"}, NodeName: ptr.To("n1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(false), Terminating: ptr.To(true)},
				Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z"}}}},
			{NodeName: ptr.To("n1")},
			{Addresses: []string{}, NodeName: ptr.To("n2"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
	}
	want := s.DeepCopy()
	compactEndpoints(s)
	if !equality.Semantic.DeepEqual(want, s) || !reflect.DeepEqual(want, s) {
		t.Fatalf("compacted\n%+v\nwant\n%+v", s, want)
	}
	if s.Endpoints[0].NodeName != s.Endpoints[1].NodeName {
		t.Error("node names not shared")
	}
	empty := &discoveryv1.EndpointSlice{}
	compactEndpoints(empty)
	if empty.Endpoints != nil {
		t.Error("nil endpoints became non-nil")
	}
}

// TestTrimSharesAnnotations: Services with the same single ovs-srcip.io annotation share one
// map after the transform, and keep their values.
func TestTrimSharesAnnotations(t *testing.T) {
	mk := func(v string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationPreserveSourceIP: v, "other": "x"}},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "a"}}}
	}
	a, _ := trimObject(mk("true"))
	b, _ := trimObject(mk("true"))
	c, _ := trimObject(mk("false"))
	sa, sb, sc := a.(*corev1.Service), b.(*corev1.Service), c.(*corev1.Service)
	if !reflect.DeepEqual(sa.Annotations, map[string]string{AnnotationPreserveSourceIP: "true"}) || !reflect.DeepEqual(sc.Annotations, map[string]string{AnnotationPreserveSourceIP: "false"}) {
		t.Fatalf("annotations %v, %v", sa.Annotations, sc.Annotations)
	}
	if reflect.ValueOf(sa.Annotations).UnsafePointer() != reflect.ValueOf(sb.Annotations).UnsafePointer() {
		t.Error("equal annotations not shared")
	}
	if sa.Spec.Selector != nil {
		t.Error("selector kept")
	}
}
