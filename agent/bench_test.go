package agent

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// nullBridge accepts every bundle in O(1): it isolates the Reconciler's own cost from
// ofctltest.Fake's, whose atomic Bundle copies the whole bridge (O(flows)).
type nullBridge struct{ lines int }

func (n *nullBridge) Bundle(_ context.Context, lines []string) error {
	n.lines += len(lines)
	return nil
}

func (n *nullBridge) Inventory(context.Context) (flows.Inventory, error) {
	return flows.Inventory{}, nil
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
