package kubee2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// BenchmarkEndpointSliceToFlow measures the time from an EndpointSlice write (the API round trip
// included) to the new endpoint being in node1's br-ex select group (polled with dump-groups), over
// 200 changes spaced 150 ms apart (above the agent's 100 ms minimum sync interval), with 100 and
// with 1,000 opted-in Services in the cluster. It reports p50 and p99 in
// milliseconds. Run it with `make bench-api` (-benchtime=1x: each run is already 200 changes).
func BenchmarkEndpointSliceToFlow(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				p50, p99, setup := endpointSliceLatency(b, n, 200)
				b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
				b.ReportMetric(setup.Seconds(), "setup-s")
			}
		})
	}
}

// fastClient is a client without client-go's default rate limit (5 QPS), for bulk setup.
func fastClient(b *testing.B) kubernetes.Interface {
	cfg := rest.CopyConfig(cp.RESTConfig)
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func benchSlice(svc string, port int32) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-bench", Namespace: ns, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "srcip-bench"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.2.5"}, NodeName: ptr.To("node2"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
}

func endpointSliceLatency(b *testing.B, services, changes int) (p50, p99, setup time.Duration) {
	ctx := context.Background()
	c := fastClient(b)
	start := time.Now()
	names := make([]string, services)
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("bench-%d-%d", services, i)
				svc := &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{annotation: "true"}},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster,
						Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
				}
				_, err := c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
				if err == nil {
					_, err = c.DiscoveryV1().EndpointSlices(ns).Create(ctx, benchSlice(name, 8080), metav1.CreateOptions{})
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				names[i] = name
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < services; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.Cleanup(func() {
		for _, n := range names {
			_ = c.CoreV1().Services(ns).Delete(ctx, n, metav1.DeleteOptions{})
			_ = c.DiscoveryV1().EndpointSlices(ns).Delete(ctx, n+"-bench", metav1.DeleteOptions{})
		}
	})
	// Wait until node1 has a group for every benchmark Service.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		out, err := theLab.DumpGroups("node1", "br-ex")
		if err == nil && strings.Count(out, "nat(dst=10.244.2.5:8080)") >= services {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("node1 never had %d benchmark groups", services)
		}
		time.Sleep(200 * time.Millisecond)
	}
	setup = time.Since(start)

	lat := make([]time.Duration, 0, changes)
	b.ResetTimer()
	for i := 0; i < changes; i++ {
		// Space the changes by more than the agent's minimum sync interval (100 ms), so that each
		// one measures the path API -> informer -> sync -> bundle, not the rate limit.
		time.Sleep(150 * time.Millisecond)
		name := names[(i*7919)%services]
		port := int32(10000 + i)
		s, err := c.DiscoveryV1().EndpointSlices(ns).Get(ctx, name+"-bench", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		s.Ports[0].Port = ptr.To(port)
		want := fmt.Sprintf("nat(dst=10.244.2.5:%d)", port)
		t0 := time.Now() // from the API write (its round trip included) to the bucket in OVS
		if _, err := c.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		for {
			out, err := theLab.Ofctl("node1", "-O", "OpenFlow15", "dump-groups", "br-ex")
			if err == nil && strings.Contains(out, want) {
				break
			}
			if time.Since(t0) > 30*time.Second {
				b.Fatalf("change %d (%s) never reached OVS", i, want)
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	b.Logf("services=%d changes=%d: p50 %v p99 %v max %v (setup %v)", services, changes, p50, p99, lat[len(lat)-1], setup.Round(time.Millisecond))
	return p50, p99, setup
}
