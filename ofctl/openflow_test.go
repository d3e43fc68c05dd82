package ofctl_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ofctltest"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

var (
	c1 = flows.NewCookie(flows.KindServicePort, 1)
	c2 = flows.NewCookie(flows.KindServicePort, 2)
	g1 = flows.GroupIDBase + 1
)

func flowAdd(c flows.Cookie, rest string) string {
	return fmt.Sprintf("flow add cookie=%#x,%s", uint64(c), rest)
}

func groupAdd(id uint32, port int) string {
	return fmt.Sprintf("group add_or_mod group_id=%d,type=select,selection_method=hash,fields(ip_src),"+
		"bucket=bucket_id:0,weight:100,actions=output:%d", id, port)
}

func TestMgmtTarget(t *testing.T) {
	assert.Equal(t, "unix:/var/run/openvswitch/br-ex.mgmt", ofctl.MgmtTarget(ofctl.DefaultRunDir, "br-ex"))
	of := ofctl.NewOpenFlow("br-int", "unix:/tmp/x/br-int.mgmt")
	assert.Equal(t, "/tmp/x", of.RunDir)
}

func TestBundleInventory(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br-ex", "eth0")
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))

	require.NoError(t, of.Bundle(ctx, nil))
	require.NoError(t, of.BundleText(ctx, []string{
		groupAdd(g1, 1),
		"group add_or_mod group_id=7,type=select,bucket=bucket_id:0,actions=output:1", // foreign group
		flowAdd(c1, "table=40,priority=100,ip,nw_dst=10.0.0.1,actions=group:"+fmt.Sprint(g1)),
		flowAdd(c1, "table=40,priority=100,ip,nw_dst=10.0.0.2,actions=drop"),
		flowAdd(c1, "table=0,priority=10,ip,actions=resubmit(,40)"),
		"flow add cookie=0x1234,table=0,priority=1,actions=NORMAL", // foreign flow
	}))
	inv, err := of.Inventory(ctx)
	require.NoError(t, err)
	assert.Equal(t, flows.Inventory{Flows: map[flows.Cookie]int{c1: 3}, Groups: map[uint32]bool{g1: true}, Buckets: map[uint32]int{g1: 1}}, inv)

	// Replace c1 by c2: same match overwrites, a missing one is deleted with the old cookie.
	require.NoError(t, of.BundleText(ctx, []string{
		flowAdd(c2, "table=40,priority=100,ip,nw_dst=10.0.0.1,actions=group:"+fmt.Sprint(g1)),
		flowAdd(c2, "table=0,priority=10,ip,actions=resubmit(,40)"),
		fmt.Sprintf("flow delete cookie=%#x/-1", uint64(c1)),
	}))
	inv, err = of.Inventory(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[flows.Cookie]int{c2: 2}, inv.Flows)
	dump, err := of.DumpFlows(ctx, "")
	require.NoError(t, err)
	assert.Contains(t, dump, "cookie=0x1234", "foreign flow must survive")
	assert.NotContains(t, dump, "10.0.0.2")

	// One invalid line: nothing applied, *Error with stderr.
	err = of.BundleText(ctx, []string{
		flowAdd(c1, "table=0,priority=50,ip,actions=drop"),
		flowAdd(c1, "table=0,priority=51,ipx,actions=drop"),
	})
	var oe *ofctl.Error
	require.ErrorAs(t, err, &oe)
	assert.Contains(t, oe.Stderr, "ipx")
	assert.Contains(t, strings.Join(oe.Cmd, " "), "-O OpenFlow15")
	var exitErr *exec.ExitError
	assert.True(t, errors.As(err, &exitErr))
	// A flow pointing at a missing group is rejected by the switch, not by ovs-ofctl's parser.
	err = of.BundleText(ctx, []string{
		flowAdd(c1, "table=0,priority=50,ip,actions=drop"),
		flowAdd(c1, "table=0,priority=52,ip,actions=group:99"),
	})
	require.ErrorAs(t, err, &oe)
	assert.Contains(t, oe.Stderr, "OFPBAC_BAD_OUT_GROUP")
	inv2, err := of.Inventory(ctx)
	require.NoError(t, err)
	assert.Equal(t, inv, inv2)

	// Deleting a group deletes the flows that output to it (docs/lab-facts.md#pitfall-8).
	require.NoError(t, of.BundleText(ctx, []string{fmt.Sprintf("group delete group_id=%d", g1)}))
	inv, err = of.Inventory(ctx)
	require.NoError(t, err)
	assert.Equal(t, flows.Inventory{Flows: map[flows.Cookie]int{c2: 1}, Groups: map[uint32]bool{}, Buckets: map[uint32]int{}}, inv)
	groups, err := of.DumpGroups(ctx)
	require.NoError(t, err)
	assert.Contains(t, groups, "group_id=7,")

	// Cancelled context: an *Error wrapping context.Canceled.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = of.Inventory(cctx)
	require.ErrorIs(t, err, context.Canceled)
}

func TestTrace(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br-ex", "eth0", "eth1")
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))
	require.NoError(t, of.BundleText(ctx, []string{
		flowAdd(c1, "table=0,priority=10,ip,actions=ct(zone=5,table=1)"),
		flowAdd(c1, "table=1,priority=10,ct_state=+trk+new,ip,actions=output:2"),
	}))
	// AppctlTarget found through the pidfile in the run directory of the mgmt target.
	out, err := of.Trace(ctx, "in_port=1,ip,nw_src=10.0.0.1,nw_dst=10.0.0.2", []string{"trk,new"})
	require.NoError(t, err)
	assert.Contains(t, out, "Datapath actions:")
	assert.Contains(t, out, "ct(zone=5)")

	of.AppctlTarget = sb.VswitchdCtl
	out, err = of.Trace(ctx, "in_port=1,ip,nw_src=10.0.0.1,nw_dst=10.0.0.2", []string{"trk,new"})
	require.NoError(t, err)
	assert.Contains(t, out, "output:2")

	of.RunDir, of.AppctlTarget = t.TempDir(), ""
	_, err = of.Trace(ctx, "in_port=1", nil)
	require.Error(t, err)
}

// stand is the method set ofctltest.Fake stands in for: what the agent uses of an OpenFlow.
type stand interface {
	Bundle(ctx context.Context, msgs []openflow.Message) error
	Inventory(ctx context.Context) (flows.Inventory, error)
	FlushConntrack(ctx context.Context, f flows.ConntrackFilter) error
	ConntrackDestinations(ctx context.Context, zone uint16) (map[flows.EntryPoint]int, error)
}

var _, _ stand = (*ofctl.OpenFlow)(nil), (*ofctltest.Fake)(nil)

// addFlow is a typed "flow add" of an IP flow (ProtoNone when ip is false).
func addFlow(c flows.Cookie, table uint8, prio uint16, ip bool, acts ...openflow.Action) *openflow.Flow {
	f := &openflow.Flow{Cookie: uint64(c), Table: table, Priority: prio, Actions: acts}
	if ip {
		f.Protocol = openflow.ProtoIP
	}
	return f
}

func add(f *openflow.Flow) openflow.Message {
	return openflow.FlowMod{Command: openflow.FlowAdd, Flow: f}
}

// groupMsg is a one-bucket select group hashing ip_src, with command cmd.
func groupMsg(cmd openflow.GroupCommand, id uint32, port uint32) openflow.Message {
	g := &openflow.GroupDesc{ID: id, Type: openflow.GroupSelect, SelectionFields: []openflow.Field{openflow.FieldIPv4Src},
		Buckets: []openflow.Bucket{{ID: 0, Weight: 100, Actions: []openflow.Action{openflow.Output{Port: port}}}}}
	return openflow.GroupMod{Command: cmd, Group: g, Buckets: g.Buckets}
}

// TestFakeMatchesOVS runs the same bundles on a real bridge (through ovs-ofctl) and on a Fake
// and compares the error outcome and the Inventory after each one.
func TestFakeMatchesOVS(t *testing.T) {
	drop := openflow.Drop{}
	src := openflow.IPv4Src(netip.MustParseAddr("10.0.0.1"))
	idle := addFlow(c1, 3, 5, true, drop)
	idle.IdleTimeout = 60
	idle.Match = []openflow.Match{src}
	again := addFlow(c2, 3, 5, true, drop)
	again.Match = []openflow.Match{src}
	arp := addFlow(c1, 0, 11, false, drop)
	arp.Protocol = openflow.ProtoARP
	cases := []struct {
		name    string
		bundles [][]openflow.Message
	}{
		{"add then replace", [][]openflow.Message{
			{add(addFlow(c1, 0, 10, true, drop)), add(arp)},
			{add(addFlow(c2, 0, 10, true, drop)), openflow.DeleteCookie{Cookie: uint64(c1)}},
		}},
		{"overwrite keeps count per cookie", [][]openflow.Message{
			{add(addFlow(c1, 0, 10, true, drop)), add(addFlow(c1, 1, 10, true, drop))},
			{add(addFlow(c2, 1, 10, true, openflow.Output{Port: 1}))},
		}},
		{"idle timeout and foreign cookie", [][]openflow.Message{
			{add(addFlow(0x1234, 0, 1, false, openflow.Output{Port: openflow.PortNormal})), add(idle)},
			{add(again), openflow.DeleteCookie{Cookie: uint64(c1)}},
			{openflow.DeleteCookie{Cookie: 0x1234}},
		}},
		{"groups", [][]openflow.Message{
			{groupMsg(openflow.GroupAddOrMod, g1, 1), add(addFlow(c1, 0, 10, true, openflow.Group{ID: g1})),
				add(addFlow(c1, 0, 9, true, drop))},
			{groupMsg(openflow.GroupAddOrMod, g1, 2)},
			{openflow.DeleteGroup{ID: g1}},
			{openflow.DeleteGroup{ID: g1}},
		}},
		{"failed bundle applies nothing", [][]openflow.Message{
			{add(addFlow(c1, 0, 10, true, drop)), groupMsg(openflow.GroupAddOrMod, g1, 1)},
			{add(addFlow(c2, 0, 10, true, drop)), add(addFlow(c2, 0, 12, true, openflow.Group{ID: 99}))},
			{add(addFlow(c2, 0, 10, true, drop)), groupMsg(openflow.GroupAdd, g1, 1)},
		}},
	}
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			br := fmt.Sprintf("br-c%d", i)
			sb.AddBridge(t, br, "p"+fmt.Sprint(i))
			real := ofctl.NewOpenFlow(br, sb.MgmtTarget(br))
			fake := ofctltest.NewFake()
			for j, b := range tc.bundles {
				rerr := real.Bundle(ctx, b)
				ferr := fake.Bundle(ctx, b)
				assert.Equal(t, rerr != nil, ferr != nil, "bundle %d: real %v, fake %v", j, rerr, ferr)
				var oe *ofctl.Error
				if ferr != nil {
					assert.ErrorAs(t, ferr, &oe)
				}
				rinv, err := real.Inventory(ctx)
				require.NoError(t, err)
				finv, err := fake.Inventory(ctx)
				require.NoError(t, err)
				assert.Equal(t, rinv, finv, "bundle %d", j)
			}
		})
	}
}

func TestFake(t *testing.T) {
	ctx := context.Background()
	f := ofctltest.NewFake()
	drop := openflow.Drop{}
	require.NoError(t, f.Bundle(ctx, nil))
	require.NoError(t, f.Bundle(ctx, []openflow.Message{add(addFlow(c1, 0, 10, true, drop))}))
	f.FailNext(2)
	for range 2 {
		err := f.Bundle(ctx, []openflow.Message{add(addFlow(c2, 0, 11, true, drop))})
		require.ErrorIs(t, err, ofctltest.ErrInjected)
		var oe *ofctl.Error
		require.ErrorAs(t, err, &oe)
	}
	require.NoError(t, f.Bundle(ctx, []openflow.Message{add(addFlow(c2, 0, 11, true, drop))}))
	bundles, lines := f.Applied()
	assert.Equal(t, 2, bundles)
	assert.Equal(t, 2, lines)
	assert.Len(t, f.Flows(), 2)
	require.Error(t, f.Bundle(ctx, []openflow.Message{add(addFlow(c2, 0, 12, true, openflow.Group{ID: 99}))}), "no such group")
	require.NoError(t, f.Bundle(ctx, []openflow.Message{groupMsg(openflow.GroupAdd, g1, 1)}))
	require.Error(t, f.Bundle(ctx, []openflow.Message{groupMsg(openflow.GroupAdd, g1, 1)}), "group exists")
	f.RejectLines("priority=13")
	require.Error(t, f.Bundle(ctx, []openflow.Message{add(addFlow(c2, 0, 13, true, drop))}))
	assert.Equal(t, 3, f.Rejections())
}

// BenchmarkInventoryOVS100k measures OpenFlow.Inventory on a dummy bridge holding 100k owned
// flows (10k cookies) and 1k owned groups.
func BenchmarkInventoryOVS100k(b *testing.B) {
	ctx := context.Background()
	sb := ovstest.StartDummy(b)
	sb.AddBridge(b, "br-ex", "eth0")
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))
	var lines []string
	for i := range 1000 {
		lines = append(lines, groupAdd(flows.GroupIDBase+uint32(i), 1))
	}
	for i := range 100_000 {
		lines = append(lines, flowAdd(flows.NewCookie(flows.KindServicePort, uint64(i/10)),
			fmt.Sprintf("table=41,priority=200,tcp,nw_dst=10.96.%d.%d,tp_dst=%d,actions=group:%d",
				i/256%256, i%256, 1000+i/65536, flows.GroupIDBase+uint32(i%1000))))
	}
	if err := of.BundleText(ctx, lines); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		inv, err := of.Inventory(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(inv.Flows) != 10_000 || len(inv.Groups) != 1000 {
			b.Fatalf("inventory: %d cookies, %d groups", len(inv.Flows), len(inv.Groups))
		}
	}
}

// BenchmarkBundleSmall measures one small bundle (1 group, 2 flows, 1 delete): the cost of a
// single Service update, dominated by ovs-ofctl's start-up.
func BenchmarkBundleSmall(b *testing.B) {
	ctx := context.Background()
	sb := ovstest.StartDummy(b)
	sb.AddBridge(b, "br-ex", "eth0")
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))
	i := 0
	for b.Loop() {
		c, old := flows.NewCookie(flows.KindServicePort, uint64(i+1)), flows.NewCookie(flows.KindServicePort, uint64(i))
		err := of.BundleText(ctx, []string{
			groupAdd(g1, 1),
			flowAdd(c, "table=40,priority=100,tcp,nw_dst=10.0.0.1,tp_dst=80,actions=group:"+fmt.Sprint(g1)),
			flowAdd(c, "table=41,priority=100,tcp,nw_dst=10.0.0.1,tp_dst=80,actions=drop"),
			fmt.Sprintf("flow delete cookie=%#x/-1", uint64(old)),
		})
		if err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestVswitchdRestart documents that an ovs-vswitchd restart loses every flow and group
// (the agent's full sync must notice through Inventory) while OVSDB objects stay.
func TestVswitchdRestart(t *testing.T) {
	ctx, sb, db := startNode(t)
	ports, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	of := ofctl.NewOpenFlow("br-ex", sb.MgmtTarget("br-ex"))
	require.NoError(t, of.BundleText(ctx, []string{groupAdd(g1, 1), flowAdd(c1, "table=0,priority=10,ip,actions=drop")}))

	sb.StopVswitchd(t)
	sb.StartVswitchd(t)
	inv, err := of.Inventory(ctx)
	require.NoError(t, err)
	assert.Equal(t, flows.Inventory{Flows: map[flows.Cookie]int{}, Groups: map[uint32]bool{}, Buckets: map[uint32]int{}}, inv)
	again, err := db.EnsureIntegration(ctx, integration)
	require.NoError(t, err)
	assert.Equal(t, ports.ExUplink, again.ExUplink)
	assert.Equal(t, ports.IntTunnel, again.IntTunnel)
}
