package ofctl_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ovstest"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

// goldenSet is one flow set of a golden file: its "# name cookie=..." header and its lines.
type goldenSet struct {
	name  string
	lines []string
}

func readGolden(t *testing.T, path string) []goldenSet {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var sets []goldenSet
	s := bufio.NewScanner(f)
	s.Buffer(nil, 64<<20)
	for s.Scan() {
		l := s.Text()
		switch {
		case strings.HasPrefix(l, "# warning: "):
		case strings.HasPrefix(l, "# "):
			sets = append(sets, goldenSet{name: strings.TrimPrefix(l, "# ")})
		case l == "":
		default:
			require.NotEmpty(t, sets, "line before any header in %s", path)
			sets[len(sets)-1].lines = append(sets[len(sets)-1].lines, l)
		}
	}
	require.NoError(t, s.Err())
	return sets
}

// dumpState is the bridge's flows and groups as ovs-ofctl prints them (OpenFlow 1.5, no
// statistics, no reply headers), sorted.
func dumpState(t *testing.T, sb *ovstest.Sandbox, bridge string) (flowLines, groupLines []string) {
	t.Helper()
	clean := func(out string) []string {
		var ls []string
		for _, l := range strings.Split(out, "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "OFPST_") || strings.HasPrefix(l, "NXST_") {
				continue
			}
			ls = append(ls, l)
		}
		sort.Strings(ls)
		return ls
	}
	target := sb.MgmtTarget(bridge)
	flowLines = clean(sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "--no-names", "dump-flows", "--no-stats", target))
	groupLines = clean(sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "--no-names", "dump-groups", target))
	return flowLines, groupLines
}

func clearBridge(t *testing.T, sb *ovstest.Sandbox, bridge string) {
	t.Helper()
	sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "del-flows", sb.MgmtTarget(bridge))
	sb.Run(t, "ovs-ofctl", "-O", "OpenFlow15", "del-groups", sb.MgmtTarget(bridge))
}

func nativeOpenFlow(t *testing.T, sb *ovstest.Sandbox, bridge string) *ofctl.OpenFlow {
	o := ofctl.NewOpenFlow(bridge, sb.MgmtTarget(bridge))
	o.Native = ofctl.NewConn(o.Target)
	t.Cleanup(o.Native.Close)
	return o
}

// flowMsg is a typed "flow add" of an IP flow in table with priority and cookie.
func flowMsg(table uint8, prio uint16, cookie uint64, acts ...openflow.Action) openflow.Message {
	return openflow.FlowMod{Command: openflow.FlowAdd, Flow: &openflow.Flow{Table: table, Priority: prio, Cookie: cookie,
		Protocol: openflow.ProtoIP, Actions: acts}}
}

// Every flow set and group of every golden scenario (flows.GoldenStates), written as one bundle
// per flow set into two bridges, one through ovs-ofctl reading the golden file's own lines
// (flows/testdata) and one through the native connection from the typed messages
// (flows.Plan.Messages), leaves both bridges with the same `ovs-ofctl dump-flows --no-stats` and
// `dump-groups` output, line for line; so do the repairs (modify_strict) and the deletes of half
// the cookies and every group that follow, typed on the native side and rendered
// (openflow.Text) for ovs-ofctl. Every set must encode natively.
func TestNativeEquivalence(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "ref")
	sb.AddBridge(t, "nat")
	ref := ofctl.NewOpenFlow("ref", sb.MgmtTarget("ref"))
	nat := nativeOpenFlow(t, sb, "nat")
	both := func(msgs []openflow.Message, what string) {
		t.Helper()
		e := openflow.EncodeAll(msgs)
		require.NoError(t, e.Err, "%s: every message encodes natively", what)
		require.NoError(t, ref.BundleText(ctx, openflow.Text(msgs)), "%s via ovs-ofctl", what)
		require.NoError(t, nat.BundleEncoded(ctx, e), "%s native", what)
	}

	cases := flows.GoldenStates()
	names := slices.Sorted(maps.Keys(cases))
	require.NotEmpty(t, names)
	files, sets, msgCount := 0, 0, 0
	for _, name := range names {
		d, err := flows.Build(cases[name])
		require.NoError(t, err)
		for _, b := range []flows.Bridge{flows.BrEx, flows.BrInt} {
			g := filepath.Join("..", "flows", "testdata", name+"."+b.String()+".golden")
			files++
			clearBridge(t, sb, "ref")
			clearBridge(t, sb, "nat")
			golden := readGolden(t, g)
			var fss []*flows.FlowSet
			for _, fs := range d {
				if fs.Bridge == b {
					fss = append(fss, fs)
				}
			}
			sort.Slice(fss, func(i, j int) bool { return fss[i].Key.String() < fss[j].Key.String() })
			require.Len(t, fss, len(golden), g)
			var deletes []openflow.Message
			for i, fs := range fss {
				set := golden[i]
				require.True(t, strings.HasPrefix(set.name, fs.Key.String()+" cookie="+fs.Cookie().String()), "%s: set %d is %s", g, i, set.name)
				p := flows.Plan{Bridge: b, Add: []*flows.FlowSet{fs}}
				msgs := p.Messages()
				// The golden file's lines are the typed messages' text (TestGolden); ovs-ofctl
				// reads the file's own bytes here.
				lines := set.lines
				require.Equal(t, strings.Join(lines, "\n"), strings.Join(openflow.Text(msgs), "\n"), "%s %s", g, set.name)
				e := openflow.EncodeAll(msgs)
				require.NoError(t, e.Err, "%s %s: encodes natively", g, set.name)
				require.NoError(t, ref.BundleText(ctx, lines), "%s %s via ovs-ofctl", g, set.name)
				require.NoError(t, nat.BundleEncoded(ctx, e), "%s %s native", g, set.name)
				sets++
				msgCount += len(msgs)
				if i%2 == 1 {
					deletes = append(deletes, openflow.DeleteCookie{Cookie: uint64(fs.Cookie())})
				}
			}
			rf, rg := dumpState(t, sb, "ref")
			nf, ng := dumpState(t, sb, "nat")
			require.NotEmpty(t, rf, g)
			assert.Equal(t, rf, nf, "flows of %s", filepath.Base(g))
			assert.Equal(t, rg, ng, "groups of %s", filepath.Base(g))

			// Repairs (flows.Plan.Repair's modify_strict messages): first every flow's actions
			// replaced by drop, then the flow sets' own flows again.
			for _, drop := range []bool{true, false} {
				var mods []openflow.Message
				for _, fs := range fss {
					for i := range fs.Flows {
						f := &fs.Flows[i]
						if drop {
							c := *f
							c.Actions = []openflow.Action{openflow.Drop{}}
							f = &c
						}
						mods = append(mods, openflow.FlowMod{Command: openflow.FlowModifyStrict, Flow: f})
					}
				}
				both(mods, "modify_strict of "+filepath.Base(g))
				rf2, _ := dumpState(t, sb, "ref")
				nf2, _ := dumpState(t, sb, "nat")
				assert.Equal(t, rf2, nf2, "flows of %s after modify_strict (drop: %v)", filepath.Base(g), drop)
				if drop {
					assert.NotEqual(t, rf, rf2, "modify_strict changed nothing")
				} else {
					assert.Equal(t, rf, rf2, "modify_strict with the sets' own flows restores them")
				}
			}

			// Deletes: every other cookie, and every group (flows referencing a deleted group go
			// with it in OVS).
			for _, fs := range fss {
				for _, id := range fs.GroupIDs() {
					deletes = append(deletes, openflow.DeleteGroup{ID: id})
				}
			}
			both(deletes, "deletes of "+filepath.Base(g))
			rf, rg = dumpState(t, sb, "ref")
			nf, ng = dumpState(t, sb, "nat")
			assert.Equal(t, rf, nf, "flows of %s after deletes", filepath.Base(g))
			assert.Equal(t, rg, ng, "groups of %s after deletes", filepath.Base(g))
		}
	}
	goldens, err := filepath.Glob("../flows/testdata/*.golden")
	require.NoError(t, err)
	assert.Len(t, goldens, files, "every golden file is a scenario's")
	t.Logf("%d golden files, %d flow sets, %d messages: native and ovs-ofctl agree", files, sets, msgCount)

	// The one kind without a golden case: service-drain (UDP and TCP).
	clearBridge(t, sb, "ref")
	clearBridge(t, sb, "nat")
	for _, e := range []flows.EntryPoint{{Protocol: flows.TCP, Addr: netip.MustParseAddrPort("203.0.113.100:80")},
		{Protocol: flows.UDP, Addr: netip.MustParseAddrPort("192.0.2.11:30053")}} {
		fs, err := flows.BuildServiceDrain(e)
		require.NoError(t, err)
		p := flows.FullDiff(fs.Bridge, []*flows.FlowSet{fs}, flows.Inventory{})
		both(p.Messages(), "drain "+e.String())
	}
	df, _ := dumpState(t, sb, "ref")
	dn, _ := dumpState(t, sb, "nat")
	assert.Len(t, df, 2)
	assert.Equal(t, df, dn, "service-drain flows")

	// A group written in several messages: add_or_mod plus insert_bucket messages, one bundle
	// (600 buckets, 100 per message; dump-groups cannot print more than ~744 buckets).
	clearBridge(t, sb, "ref")
	clearBridge(t, sb, "nat")
	bigPlan := flows.FullDiff(flows.BrEx, []*flows.FlowSet{bigService(t, 600)}, flows.Inventory{})
	bigPlan.BucketsPerMessage = 100
	big := bigPlan.Messages()
	require.Equal(t, openflow.GroupInsertBuckets, big[1].(openflow.GroupMod).Command)
	both(big, "600-bucket group")
	rf, rg := dumpState(t, sb, "ref")
	nf, ng := dumpState(t, sb, "nat")
	assert.Equal(t, rf, nf, "flows of the 600-endpoint service")
	require.Len(t, ng, 1)
	assert.Equal(t, 600, strings.Count(ng[0], "bucket_id:"))
	assert.True(t, rg[0] == ng[0], "groups of the 600-endpoint service differ")
}

// A bundle with a message that does not encode natively (a group message longer than
// OpenFlow's 64 KiB: 2,000 buckets in one message) goes through ovs-ofctl, whole, by the same
// OpenFlow; OVS refuses it there as it always did (OFPGMFC_BAD_BUCKET), and the encoder's error
// quotes the message by its start only.
func TestNativeFallback(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br0")
	o := nativeOpenFlow(t, sb, "br0")
	p := flows.FullDiff(flows.BrEx, []*flows.FlowSet{bigService(t, 2000)}, flows.Inventory{})
	p.BucketsPerMessage = 2000
	e := openflow.EncodeAll(p.Messages())
	require.Error(t, e.Err)
	assert.Contains(t, e.Err.Error(), "too long")
	assert.Less(t, len(e.Err.Error()), 300, "the message is quoted by its start only")
	err := o.Bundle(ctx, p.Messages())
	var oe *ofctl.Error
	require.ErrorAs(t, err, &oe)
	assert.True(t, oe.Rejected(), "%v", err)
	assert.Contains(t, oe.Stderr, "OFPGMFC_BAD_BUCKET")
	native, viaOfctl := o.BundleCounts()
	assert.Equal(t, [2]uint64{0, 0}, [2]uint64{native, viaOfctl}, "a refused bundle is not counted")
	small := flows.FullDiff(flows.BrEx, []*flows.FlowSet{bigService(t, 3)}, flows.Inventory{})
	require.NoError(t, o.Bundle(ctx, small.Messages()))
	native, viaOfctl = o.BundleCounts()
	assert.Equal(t, [2]uint64{1, 0}, [2]uint64{native, viaOfctl})
}

// A bundle with one refused message applies nothing: not the flows before it, not a group; the
// error is a Rejected *ofctl.Error naming the OpenFlow error and the refused message's text.
// Both a message refused when added (a flow in table 10 going back to table 5) and one refused
// only at commit (a flow whose group does not exist) are tried; the connection still works
// afterwards.
func TestNativeBundleAtomic(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br0")
	o := nativeOpenFlow(t, sb, "br0")
	const cookie = 0x5c10000000000001
	g := &openflow.GroupDesc{ID: 7, Type: openflow.GroupSelect, SelectionFields: []openflow.Field{openflow.FieldIPv4Src, openflow.FieldTCPSrc},
		Buckets: []openflow.Bucket{{ID: 1, Weight: 100, Actions: []openflow.Action{openflow.Output{Port: 1}}}}}
	svc := &openflow.Flow{Table: 40, Priority: 100, Cookie: cookie, Protocol: openflow.ProtoTCP,
		Match:   []openflow.Match{openflow.IPv4Dst(netip.MustParseAddr("192.0.2.11")), openflow.TPDst(80)},
		Actions: []openflow.Action{openflow.Group{ID: 7}}}
	good := []openflow.Message{
		openflow.GroupMod{Command: openflow.GroupAddOrMod, Group: g, Buckets: g.Buckets},
		openflow.FlowMod{Command: openflow.FlowAdd, Flow: svc},
		flowMsg(0, 10, cookie, openflow.GotoTable{Table: 40}),
	}
	for name, bad := range map[string]openflow.Message{
		"at add":    openflow.FlowMod{Command: openflow.FlowAdd, Flow: &openflow.Flow{Table: 10, Priority: 1, Cookie: cookie, Actions: []openflow.Action{openflow.GotoTable{Table: 5}}}},
		"at commit": flowMsg(41, 1, cookie, openflow.Group{ID: 999}),
	} {
		msgs := append(slices.Clone(good), bad)
		require.NoError(t, openflow.EncodeAll(msgs).Err, "the test must exercise the native path")
		err := o.Bundle(ctx, msgs)
		var oe *ofctl.Error
		require.True(t, errors.As(err, &oe), "%s: want *ofctl.Error, got %v", name, err)
		assert.True(t, oe.Rejected(), "%s: %v", name, err)
		assert.Contains(t, oe.Stderr, string(bad.AppendText(nil)), name)
		t.Logf("%s: %v", name, err)
		fl, gl := dumpState(t, sb, "br0")
		assert.Empty(t, fl, "%s: flows applied from a failed bundle", name)
		assert.Empty(t, gl, "%s: groups applied from a failed bundle", name)
	}
	require.NoError(t, o.Bundle(ctx, good))
	fl, gl := dumpState(t, sb, "br0")
	assert.Len(t, fl, 2)
	assert.Len(t, gl, 1)
}

// The connection survives its socket being closed under it (reconnects on the next bundle) and
// an ovs-vswitchd restart (bundles fail with a connection error that is not Rejected while the
// switch is away, then succeed on a new connection).
func TestNativeReconnect(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br0")
	o := nativeOpenFlow(t, sb, "br0")
	o.Native.EchoInterval = 200 * time.Millisecond
	flow := func(i int) []openflow.Message {
		return []openflow.Message{flowMsg(0, uint16(1+i), 0x5c10000000000001, openflow.Drop{})}
	}
	require.NoError(t, o.Bundle(ctx, flow(0)))
	require.True(t, o.Native.DropConnection())
	require.NoError(t, o.Bundle(ctx, flow(1)), "after the socket was closed")

	// Idle across keepalives: still the same working connection.
	time.Sleep(time.Second)
	require.NoError(t, o.Bundle(ctx, flow(2)))

	sb.StopVswitchd(t)
	err := o.Bundle(ctx, flow(3))
	var oe *ofctl.Error
	require.True(t, errors.As(err, &oe), "bundle while ovs-vswitchd is down: %v", err)
	assert.False(t, oe.Rejected(), "a connection failure is not Rejected: %v", err)
	sb.StartVswitchd(t)
	deadline := time.Now().Add(15 * time.Second)
	for {
		err = o.Bundle(ctx, flow(4))
		if err == nil || time.Now().After(deadline) {
			break
		}
		require.True(t, errors.As(err, &oe) && !oe.Rejected(), "while ovs-vswitchd starts: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err, "after ovs-vswitchd restarted")
	fl, _ := dumpState(t, sb, "br0")
	require.Len(t, fl, 1, "a restarted ovs-vswitchd has only the flow written after it")
	assert.Contains(t, fl[0], "priority=5")
}

// BenchmarkServiceBundle applies one Service's bundle (its select group with 3 buckets and its
// flows: what one Service change writes) through one ovs-ofctl process per bundle and through the
// persistent native connection, on a sandbox ovs-vswitchd (same bytes every iteration: the
// group is modified in place and the flows overwritten).
func BenchmarkServiceBundle(b *testing.B) {
	sb := ovstest.StartDummy(b)
	sb.AddBridge(b, "br0")
	eps := []flows.Endpoint{
		{IP: netip.MustParseAddr("10.244.2.5"), Port: 8080, NodeName: "node2"},
		{IP: netip.MustParseAddr("10.244.3.5"), Port: 8080, NodeName: "node3"},
		{IP: netip.MustParseAddr("10.244.1.5"), Port: 8080, NodeName: "node1"},
	}
	fs := servicePortOf(b, eps)
	p := flows.FullDiff(fs.Bridge, []*flows.FlowSet{fs}, flows.Inventory{})
	msgs := p.Messages()
	if err := openflow.EncodeAll(msgs).Err; err != nil {
		b.Fatalf("the service bundle must be native: %v", err)
	}
	ctx := context.Background()
	for _, mode := range []string{"ovs-ofctl", "native"} {
		b.Run(mode, func(b *testing.B) {
			o := ofctl.NewOpenFlow("br0", sb.MgmtTarget("br0"))
			if mode == "native" {
				o.Native = ofctl.NewConn(o.Target)
				defer o.Native.Close()
			}
			for b.Loop() {
				if err := o.Bundle(ctx, msgs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(msgs)), "messages/bundle")
		})
	}
}

// coldStartMessages are the messages of n Service ports (a 3-bucket select group and 2 flows
// each, the shape of a cold start's full sync), with distinct ports, group ids and cookies.
func coldStartMessages(b testing.TB, n int) []openflow.Message {
	var msgs []openflow.Message
	for i := 0; i < n; i++ {
		eps := []flows.Endpoint{
			{IP: netip.AddrFrom4([4]byte{10, 244, 2, byte(1 + i%250)}), Port: 8080, NodeName: "node2"},
			{IP: netip.AddrFrom4([4]byte{10, 244, 3, byte(1 + i%250)}), Port: 8080, NodeName: "node3"},
			{IP: netip.AddrFrom4([4]byte{10, 244, 1, byte(1 + i%250)}), Port: 8080, NodeName: "node1"},
		}
		fs := servicePortNamed(b, fmt.Sprintf("svc%d", i), uint16(1000+i), uint16(20000+i), eps)
		p := flows.FullDiff(fs.Bridge, []*flows.FlowSet{fs}, flows.Inventory{})
		msgs = append(msgs, p.Messages()...)
	}
	return msgs
}

// BenchmarkColdStartBundle applies one bundle of 2,000 Service ports natively into an emptied
// bridge; with -benchmem it shows the memory a large native bundle costs.
func BenchmarkColdStartBundle(b *testing.B) {
	sb := ovstest.StartDummy(b)
	sb.AddBridge(b, "br0")
	msgs := coldStartMessages(b, 2000)
	if err := openflow.EncodeAll(msgs).Err; err != nil {
		b.Fatal(err)
	}
	o := ofctl.NewOpenFlow("br0", sb.MgmtTarget("br0"))
	o.Native = ofctl.NewConn(o.Target)
	defer o.Native.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		sb.Run(b, "ovs-ofctl", "-O", "OpenFlow15", "del-flows", sb.MgmtTarget("br0"))
		sb.Run(b, "ovs-ofctl", "-O", "OpenFlow15", "del-groups", sb.MgmtTarget("br0"))
		b.StartTimer()
		if err := o.Bundle(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(msgs)), "messages/bundle")
}

// BenchmarkEncodeServicePorts encodes the messages of 1,000 service ports of 10 endpoints (a
// cold start's chunk) into OpenFlow, without a switch: the agent's CPU cost of the native path
// per chunk.
func BenchmarkEncodeServicePorts(b *testing.B) {
	var eps []flows.Endpoint
	for i := range 10 {
		eps = append(eps, flows.Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, byte(1 + i%3), byte(10 + i)}), Port: 8080, NodeName: fmt.Sprintf("node%d", 1+i%3)})
	}
	fs := servicePortOf(b, eps)
	var msgs []openflow.Message
	for range 1000 {
		p := flows.FullDiff(fs.Bridge, []*flows.FlowSet{fs}, flows.Inventory{})
		msgs = append(msgs, p.Messages()...)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := openflow.EncodeAll(msgs).Err; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(msgs)), "messages")
}

// BundleEncoded applies an encoding made ahead of the call natively; one whose encoding failed
// goes through ovs-ofctl.
func TestNativeEncoded(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br0")
	o := nativeOpenFlow(t, sb, "br0")
	good := openflow.EncodeAll([]openflow.Message{flowMsg(0, 10, 0x5c10000000000001, openflow.GotoTable{Table: 40})})
	require.NoError(t, good.Err)
	require.NoError(t, o.BundleEncoded(ctx, good))
	failed := &openflow.Encoded{Msgs: []openflow.Message{flowMsg(0, 11, 0x5c10000000000002, openflow.GotoTable{Table: 40})},
		Err: errors.New("not encoded")}
	require.NoError(t, o.BundleEncoded(ctx, failed))
	native, viaOfctl := o.BundleCounts()
	assert.Equal(t, [2]uint64{1, 1}, [2]uint64{native, viaOfctl})
	fl, _ := dumpState(t, sb, "br0")
	require.Len(t, fl, 2)
}

// A bundle whose open the switch refuses (here: its id is already open on the connection, which
// Open vSwitch answers with OFPBFC_BAD_ID after dropping that bundle) applies nothing and
// leaves nothing behind: the adds written right after the open must not sit in a bundle that
// Open vSwitch created for them implicitly (a later commit of that id would apply them).
func TestNativeOpenRefusedLeavesNoBundle(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br0")
	o := nativeOpenFlow(t, sb, "br0")
	require.NoError(t, o.Bundle(ctx, []openflow.Message{flowMsg(0, 10, 0x5c10000000000001, openflow.GotoTable{Table: 40})}))
	id := o.Native.NextBundleID()
	typ, err := o.Native.BundleControlRaw(ctx, id, 0)
	require.NoError(t, err)
	require.NotEqual(t, uint8(1), typ, "raw open accepted")
	err = o.Bundle(ctx, []openflow.Message{flowMsg(0, 11, 0x5c10000000000002, openflow.GotoTable{Table: 40})})
	require.Error(t, err)
	var oe *ofctl.Error
	require.ErrorAs(t, err, &oe)
	assert.True(t, oe.Rejected(), "%v", err)
	assert.Contains(t, err.Error(), "bundle open")
	// Whoever commits that id next on this connection must find no bundle.
	typ, err = o.Native.BundleControlRaw(ctx, id, 4)
	if err == nil {
		assert.Equal(t, uint8(1), typ, "a commit of the refused bundle's id finds nothing to commit")
	}
	fl, _ := dumpState(t, sb, "br0")
	assert.Len(t, fl, 1, "only the first flow: %v", fl)
}
