package agent

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

// nullBridge accepts every bundle in O(1): it isolates the Reconciler's own cost from
// ofctltest.Fake's, whose atomic Bundle copies the whole bridge (O(flows)).
type nullBridge struct {
	lines int
	// onBundle, when set, is called with each bundle before it is counted.
	onBundle func(msgs []openflow.Message)
}

func (n *nullBridge) Bundle(_ context.Context, lines []openflow.Message) error {
	if n.onBundle != nil {
		n.onBundle(lines)
	}
	n.lines += len(lines)
	return nil
}

func (n *nullBridge) Inventory(context.Context) (flows.Inventory, error) {
	return flows.Inventory{}, nil
}

// encodingBridge is a nullBridge that takes bundles encoded ahead (EncodedBundler), as
// ofctl.OpenFlow on its native connection does: a cold full sync into it encodes every
// message (openflow.EncodeAll), then drops the bytes.
type encodingBridge struct{ nullBridge }

func (n *encodingBridge) BundleEncoded(ctx context.Context, e *openflow.Encoded) error {
	if e.Err != nil {
		return e.Err
	}
	return n.Bundle(ctx, e.Msgs)
}

// BenchmarkPartialSync measures one sync after one Service's endpoints changed, among n opted-in
// Services. With bridge=null the cost must not grow with n; bridge=fake adds ofctltest.Fake's
// whole-bridge copy per bundle.
func BenchmarkPartialSync(b *testing.B) {
	for _, bridge := range []string{"fake", "null"} {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("bridge=%s/services=%d", bridge, n), func(b *testing.B) {
				f := newFixture(b)
				if bridge == "null" {
					f.r.cfg.Bridges = map[flows.Bridge]FlowBridge{flows.BrEx: &nullBridge{}, flows.BrInt: &nullBridge{}}
				}
				f.seed(f.r, n)
				require.NoError(b, f.sync())
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					name := fmt.Sprintf("svc%d", i%n)
					f.r.OnEndpointSlice(nil, makeSlice("ns1", name, fmt.Sprintf("%s-bench-%d", name, i), ep(fmt.Sprintf("10.244.2.%d", i%200+1), "node2")))
					if err := f.sync(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkColdFullSync measures the first full sync of n opted-in Services x 10 endpoints on 10
// of 50 nodes into null bridges (a cold bridge: written in chunks), from objects already in the
// Reconciler: its time; before-MB and after-MB, the live heap (runtime/metrics
// /memory/classes/heap/objects:bytes after a GC) before and after it and when br-ex's first
// bundle is written (every flow set is built then); and peak-heap-MB, the largest heap (live and
// not yet collected objects, sampled every millisecond) during it. The timed sync includes the
// forced GC at br-ex's first bundle. model-ms, build-ms, resolve-ms and apply-ms are the mean
// times of those steps (the forced GC is in apply's).
//
// With COLD_HEAP_PROFILE=FILE in the environment the heap profile (go tool pprof) at br-ex's
// first bundle is written to FILE.
//
// bridge=null takes the messages as they are; bridge=encoding (encodingBridge) also encodes
// them into OpenFlow, the agent's cost on the native path.
func BenchmarkColdFullSync(b *testing.B) {
	for _, bc := range []struct {
		name string
		n    int
		dual bool
	}{{"null", 1000, false}, {"null", 10000, false}, {"encoding", 10000, false}, {"encoding", 10000, true}} {
		n := bc.n
		name := fmt.Sprintf("bridge=%s/services=%d", bc.name, n)
		if bc.dual {
			name += "/dual-stack"
		}
		b.Run(name, func(b *testing.B) {
			var lines int
			var ex, in *nullBridge
			var peak, base, after, mid uint64
			steps, runs := map[string]time.Duration{}, map[string]int{}
			heap := func() uint64 {
				runtime.GC()
				s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
				metrics.Read(s)
				return s[0].Value.Uint64()
			}
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f := newFixture(b)
				f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
					onBundle := func([]openflow.Message) {
						if mid == 0 {
							mid = heap()
							if fn := os.Getenv("COLD_HEAP_PROFILE"); fn != "" {
								f, _ := os.Create(fn)
								_ = pprof.WriteHeapProfile(f)
								f.Close()
							}
						}
					}
					ex, in = &nullBridge{onBundle: onBundle}, &nullBridge{}
					c.Bridges = map[flows.Bridge]FlowBridge{flows.BrEx: ex, flows.BrInt: in}
					if bc.name == "encoding" {
						eex, ein := &encodingBridge{nullBridge{onBundle: onBundle}}, &encodingBridge{}
						ex, in = &eex.nullBridge, &ein.nullBridge
						c.Bridges = map[flows.Bridge]FlowBridge{flows.BrEx: eex, flows.BrInt: ein}
					}
					c.NodePortRange = [2]uint16{20000, 32767}
				})
				if bc.dual {
					seedLargeDualStack(f.r, n, 10, 50)
				} else {
					seedLarge(f.r, n, 10, 50)
				}
				base, mid = heap(), 0
				done := make(chan struct{})
				sampled := make(chan uint64)
				go func() {
					s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
					var max uint64
					t := time.NewTicker(time.Millisecond)
					defer t.Stop()
					for {
						metrics.Read(s)
						max = maxU(max, s[0].Value.Uint64())
						select {
						case <-done:
							sampled <- max
							return
						case <-t.C:
						}
					}
				}()
				b.StartTimer()
				if err := f.sync(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				lines = ex.lines + in.lines
				for _, st := range f.r.syncer.steps {
					steps[st.name] += st.d
					runs[st.name]++
				}
				close(done)
				peak = maxU(peak, <-sampled)
				after = heap()
				runtime.KeepAlive(f)
			}
			b.ReportMetric(float64(lines), "bundle-messages")
			b.ReportMetric(float64(base)/1e6, "before-MB")
			b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
			b.ReportMetric(float64(mid)/1e6, "at-first-br-ex-bundle-MB")
			b.ReportMetric(float64(after)/1e6, "after-MB")
			for _, step := range []string{"model", "build", "resolve", "apply"} {
				b.ReportMetric(float64(steps[step].Microseconds())/1e3/float64(max(runs[step], 1)), step+"-ms")
			}
		})
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// seedLarge gives r nodes Nodes (node1 is this node) and n opted-in NodePort Services, each with
// one EndpointSlice of eps ready endpoints on eps different nodes.
func seedLarge(r *Reconciler, n, eps, nodes int) {
	for i := 1; i <= nodes; i++ {
		r.OnNode(nil, makeNode(fmt.Sprintf("node%d", i), fmt.Sprintf("192.168.%d.%d", i/250, i%250), fmt.Sprintf("10.%d.%d.0/24", 100+i/250, i%250)))
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc%d", i)
		// A ClusterIP each, as the API server allocates (admission indexes them).
		cip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		r.OnService(nil, makeService("ns1", name, int32(20000+i), func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = cip, []string{cip} }))
		var es []discoveryv1.Endpoint
		for j := 0; j < eps; j++ {
			node := (i+j)%nodes + 1
			es = append(es, ep(fmt.Sprintf("10.%d.%d.%d", 100+node/250, node%250, i%250+2), fmt.Sprintf("node%d", node)))
		}
		r.OnEndpointSlice(nil, makeSlice("ns1", name, name+"-a", es...))
	}
}

// seedLargeDualStack is seedLarge on a dual-stack cluster: every Node has an IPv6 InternalIP and
// pod CIDR beside its IPv4 ones, and every Service is PreferDualStack (ipFamilies IPv4, IPv6)
// with an IPv6 EndpointSlice of the same eps endpoints beside its IPv4 one: twice the Service
// flow sets and groups of seedLarge (issue 22: cold start and memory within 2x of IPv4).
func seedLargeDualStack(r *Reconciler, n, eps, nodes int) {
	for i := 1; i <= nodes; i++ {
		v6 := func(nd *corev1.Node) {
			cidr6 := fmt.Sprintf("2001:db8:244:%x::/64", i)
			nd.Spec.PodCIDRs = append(nd.Spec.PodCIDRs, cidr6)
			nd.Status.Addresses = append(nd.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8:0:2::%x", i)})
		}
		r.OnNode(nil, makeNode(fmt.Sprintf("node%d", i), fmt.Sprintf("192.168.%d.%d", i/250, i%250), fmt.Sprintf("10.%d.%d.0/24", 100+i/250, i%250), v6))
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc%d", i)
		cip, cip6 := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), fmt.Sprintf("2001:db8:96::%x", i+1)
		r.OnService(nil, makeService("ns1", name, int32(20000+i), func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = cip, []string{cip, cip6}
			s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		}))
		var es, es6 []discoveryv1.Endpoint
		for j := 0; j < eps; j++ {
			node := (i+j)%nodes + 1
			nodeName := fmt.Sprintf("node%d", node)
			es = append(es, ep(fmt.Sprintf("10.%d.%d.%d", 100+node/250, node%250, i%250+2), nodeName))
			es6 = append(es6, ep(fmt.Sprintf("2001:db8:244:%x::%x", node, i+2), nodeName))
		}
		r.OnEndpointSlice(nil, makeSlice("ns1", name, name+"-a", es...))
		sl6 := makeSlice("ns1", name, name+"-b", es6...)
		sl6.AddressType = discoveryv1.AddressTypeIPv6
		r.OnEndpointSlice(nil, sl6)
	}
}
