package ovstest

import (
	"context"
	"testing"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// LoadDesired writes every flow set of d into br-ex and br-int of a sandbox laid out by
// AddNodeBridges, as the agent's first full sync on empty bridges would (one bundle per bridge).
func (s *Sandbox) LoadDesired(t testing.TB, d flows.Desired) {
	t.Helper()
	for b, name := range map[flows.Bridge]string{flows.BrEx: "br-ex", flows.BrInt: "br-int"} {
		var sets []*flows.FlowSet
		for _, fs := range d {
			if fs.Bridge == b {
				sets = append(sets, fs)
			}
		}
		p := flows.FullDiff(b, sets, flows.Inventory{})
		if err := ofctl.NewOpenFlow(name, s.MgmtTarget(name)).Bundle(context.Background(), p.Messages()); err != nil {
			t.Fatalf("load desired flows into %s: %v", name, err)
		}
	}
}
