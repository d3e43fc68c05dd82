package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// DesiredFlowSets returns the flow sets whose bundle lines Desired renders: the same cookies as
// the Report, the same flows per bridge.
func TestDesiredFlowSets(t *testing.T) {
	objs, err := ReadManifestDir("../test/manifests/demo")
	require.NoError(t, err)
	lines, rep, err := Desired(context.Background(), "node1", objs, DesiredOptions{})
	require.NoError(t, err)
	sets, rep2, err := DesiredFlowSets(context.Background(), "node1", objs, DesiredOptions{})
	require.NoError(t, err)
	assert.Equal(t, len(rep.FlowSets), len(rep2.FlowSets))
	cookies := map[string]bool{}
	for _, fs := range rep.FlowSets {
		cookies[fs.Bridge+" "+fs.Cookie] = true
	}
	for _, b := range []flows.Bridge{flows.BrEx, flows.BrInt} {
		want := 0
		for _, l := range lines[b] {
			if strings.HasPrefix(l, "flow add ") {
				want++
			}
		}
		got := 0
		for _, fs := range sets[b] {
			assert.Equal(t, b, fs.Bridge)
			got += len(fs.FlowLines())
			if len(fs.FlowLines()) > 0 || len(fs.Groups) > 0 {
				assert.True(t, cookies[b.String()+" "+fs.Cookie().String()], "flow set %s is in the Report", fs.Key)
			}
		}
		assert.Equal(t, want, got, b.String())
	}
}
