package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
)

// BenchmarkColdFullSyncOVS is BenchmarkColdFullSync into a real ovs-vswitchd (userspace, dummy
// ports) over the native OpenFlow connection: the first full sync of n opted-in Services x 10
// endpoints from objects already in the Reconciler to every flow committed in emptied bridges
// (the agent's cold start without the API server's lists). Both processes share the machine's
// cores, as they do on a node. The /dual-stack case is seedLargeDualStack's cluster (issue 22).
func BenchmarkColdFullSyncOVS(b *testing.B) {
	for _, c := range []struct {
		n    int
		dual bool
	}{{10000, false}, {10000, true}} {
		n := c.n
		name := fmt.Sprintf("services=%d", n)
		if c.dual {
			name += "/dual-stack"
		}
		b.Run(name, func(b *testing.B) {
			sb := ovstest.StartDummy(b)
			bridges := map[flows.Bridge]FlowBridge{}
			for _, br := range []flows.Bridge{flows.BrEx, flows.BrInt} {
				sb.AddBridge(b, br.String())
				o := ofctl.NewOpenFlow(br.String(), sb.MgmtTarget(br.String()))
				o.Native = ofctl.NewConn(o.Target)
				b.Cleanup(o.Native.Close)
				bridges[br] = o
			}
			steps, runs := map[string]time.Duration{}, map[string]int{}
			for b.Loop() {
				b.StopTimer()
				for _, br := range []string{"br-ex", "br-int"} {
					sb.Run(b, "ovs-ofctl", "-O", "OpenFlow15", "del-flows", sb.MgmtTarget(br))
					sb.Run(b, "ovs-ofctl", "-O", "OpenFlow15", "del-groups", sb.MgmtTarget(br))
				}
				f := newFixture(b)
				f.r = f.newReconcilerWith(func(c *ReconcilerConfig) {
					c.Bridges = bridges
					c.NodePortRange = [2]uint16{20000, 32767}
				})
				if c.dual {
					seedLargeDualStack(f.r, n, 10, 50)
				} else {
					seedLarge(f.r, n, 10, 50)
				}
				b.StartTimer()
				if err := f.sync(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				for _, st := range f.r.syncer.steps {
					steps[st.name] += st.d
					runs[st.name]++
				}
				b.StartTimer()
			}
			for _, step := range []string{"model", "build", "resolve", "apply"} {
				b.ReportMetric(float64(steps[step].Milliseconds())/float64(max(runs[step], 1)), step+"-ms")
			}
		})
	}
}
