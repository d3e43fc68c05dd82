package main

import (
	"bytes"
	"context"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
)

// inventoryOf is what a bridge holding exactly sets reads as.
func inventoryOf(sets []*flows.FlowSet) flows.Inventory {
	inv := flows.Inventory{Flows: map[flows.Cookie]int{}, Groups: map[uint32]bool{}, Buckets: map[uint32]int{}}
	for _, fs := range sets {
		if n := len(fs.FlowLines()); n > 0 {
			inv.Flows[fs.Cookie()] = n
		}
		for _, g := range fs.Groups {
			inv.Groups[g.ID], inv.Buckets[g.ID] = true, len(g.Buckets)
		}
	}
	return inv
}

// diff prints flows.FullDiff's plan for the demo's node1: nothing on a bridge that holds the
// desired flow sets; a group cut short (its bucket count), a missing or edited flow set, a cookie
// and a group nothing desires; learned flows and drains listed, not counted.
func TestWriteDiff(t *testing.T) {
	objs, err := agent.ReadManifestDir("../../test/manifests/demo")
	require.NoError(t, err)
	sets, _, err := agent.DesiredFlowSets(context.Background(), "node1", objs, agent.DesiredOptions{})
	require.NoError(t, err)
	ex := sets[flows.BrEx]
	require.NotEmpty(t, ex)
	require.NotEmpty(t, sets[flows.BrInt])

	var out bytes.Buffer
	assert.Equal(t, 0, writeDiff(&out, flows.BrEx, ex, inventoryOf(ex), nil))
	assert.Equal(t, "br-ex: "+itoa(len(ex))+" flow set(s) as desired\n", out.String())

	var web, other *flows.FlowSet
	for _, fs := range ex {
		if fs.Key.Kind == flows.KindServicePort && len(fs.Groups) > 0 && len(fs.Groups[0].Buckets) > 1 && web == nil {
			web = fs
		} else if fs != web && len(fs.FlowLines()) > 1 && other == nil {
			other = fs
		}
	}
	require.NotNil(t, web, "a Service port of the demo with a group of two buckets or more")
	require.NotNil(t, other)
	inv := inventoryOf(ex)
	gid := web.Groups[0].ID
	inv.Buckets[gid]--                                            // a group cut short
	inv.Flows[other.Cookie()]--                                   // a flow deleted by hand
	inv.Flows[flows.NewCookie(flows.KindServicePort, 0xdead)] = 2 // an old flow set
	inv.Groups[flows.GroupIDBase+7] = true                        // an old group
	inv.Flows[flows.NewCookie(flows.KindLearnedReset, 1)] = 3
	inv.Flows[flows.NewCookie(flows.KindServiceDrain, 2)] = 4
	out.Reset()
	n := writeDiff(&out, flows.BrEx, ex, inv, nil)
	got := out.String()
	assert.Equal(t, 4, n, got)
	assert.Contains(t, got, "br-ex - service-port "+agent.ObjectName(web.Key)+": group "+utoa(gid)+" has "+
		itoa(len(web.Groups[0].Buckets)-1)+" buckets, want "+itoa(len(web.Groups[0].Buckets))+"\n")
	assert.Contains(t, got, "cookie "+other.Cookie().String()+" has "+itoa(len(other.FlowLines())-1)+" flows, want "+itoa(len(other.FlowLines())))
	assert.Contains(t, got, "br-ex + service-port: cookie 0x5c1000000000dead with 2 flow(s) on the bridge, not desired\n")
	assert.Contains(t, got, "br-ex + group "+utoa(flows.GroupIDBase+7)+" (of a Service port (not known to the agent now)): on the bridge, not desired\n")
	assert.Contains(t, got, "learned flow(s) (runtime state)")
	assert.Contains(t, got, "draining (runtime state)")
	assert.Contains(t, got, "br-ex: "+itoa(len(ex)-2)+" flow set(s) as desired\n")

	// Without bucket counts (an inventory that does not read them) the cut group goes unseen, as
	// in the agent's full sync.
	inv = inventoryOf(ex)
	inv.Buckets[gid]--
	noBuckets := inv
	noBuckets.Buckets = maps.Clone(inv.Buckets)
	delete(noBuckets.Buckets, gid)
	out.Reset()
	assert.Equal(t, 0, writeDiff(&out, flows.BrEx, ex, noBuckets, nil), out.String())
	out.Reset()
	assert.Equal(t, 1, writeDiff(&out, flows.BrEx, ex, inv, nil), out.String())

	// A missing flow set.
	inv = inventoryOf(ex)
	delete(inv.Flows, other.Cookie())
	out.Reset()
	assert.Equal(t, 1, writeDiff(&out, flows.BrEx, ex, inv, nil))
	assert.Contains(t, out.String(), "missing: no flow with cookie "+other.Cookie().String())
}

func itoa(n int) string    { return strconv.Itoa(n) }
func utoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// diff renders with the agent's flags (its report's) unless a flag is given on the command line;
// the source is the agent's --manifests unless --manifests or --kubeconfig is given.
func TestSourceFlagsFromAgent(t *testing.T) {
	af := &agent.FlagsReport{Manifests: "/lab/manifests", ExternalIPCIDRs: []string{"203.0.113.0/24"}, NodePortAddresses: []string{},
		EgressClusterCIDRs: []string{"10.96.0.0/12"}, PreserveSourceIP: "all", ServiceNodePortRange: "30000-32767"}
	for _, c := range []struct {
		name string
		args []string
		want sourceFlags
		used string
	}{
		{"nothing given", nil,
			sourceFlags{manifests: "/lab/manifests", externalIPCIDRs: []string{"203.0.113.0/24"}, nodePortAddresses: []string{},
				egressClusterCIDRs: []string{"10.96.0.0/12"}, preserveSourceIP: "all", nodePortRange: "30000-32767"},
			"--manifests=/lab/manifests --external-ip-cidrs=203.0.113.0/24 --egress-cluster-cidrs=10.96.0.0/12 --preserve-source-ip=all --service-node-port-range=30000-32767"},
		{"given flags win", []string{"--kubeconfig=/k", "--external-ip-cidrs=198.51.100.0/24", "--preserve-source-ip=annotated"},
			sourceFlags{kubeconfig: "/k", externalIPCIDRs: []string{"198.51.100.0/24"}, nodePortAddresses: []string{},
				egressClusterCIDRs: []string{"10.96.0.0/12"}, preserveSourceIP: "annotated", nodePortRange: "30000-32767"},
			"--kubeconfig=/k --external-ip-cidrs=198.51.100.0/24 --egress-cluster-cidrs=10.96.0.0/12 --preserve-source-ip=annotated --service-node-port-range=30000-32767"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var src sourceFlags
			cmd := &cobra.Command{Use: "diff"}
			src.add(cmd)
			require.NoError(t, cmd.Flags().Parse(c.args))
			used, ok := src.fromAgent(cmd, af)
			require.True(t, ok)
			assert.Equal(t, c.want, src)
			assert.Equal(t, c.used, strings.Join(used, " "))
		})
	}
	var src sourceFlags
	cmd := &cobra.Command{Use: "diff"}
	src.add(cmd)
	_, ok := src.fromAgent(cmd, nil)
	assert.False(t, ok, "an agent without flags in its report")
}
