package ofctl_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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

// Every flow set and group of every golden file (flows/testdata), written as one bundle per flow
// set through ovs-ofctl into one bridge and through the native connection into another, leaves
// both bridges with the same `ovs-ofctl dump-flows --no-stats` and `dump-groups` output, line for
// line; so do the deletes of half the cookies and groups that follow. Flow sets the native
// encoder cannot translate go through ovs-ofctl on both sides (and are listed); every
// service-port flow set (the per-change hot path) must be translated.
func TestNativeEquivalence(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "ref")
	sb.AddBridge(t, "nat")
	ref := ofctl.NewOpenFlow("ref", sb.MgmtTarget("ref"))
	nat := nativeOpenFlow(t, sb, "nat")

	goldens, err := filepath.Glob("../flows/testdata/*.golden")
	require.NoError(t, err)
	require.NotEmpty(t, goldens)
	native, fallback, lines := 0, 0, 0
	reasons := map[string]bool{}
	for _, g := range goldens {
		clearBridge(t, sb, "ref")
		clearBridge(t, sb, "nat")
		sets := readGolden(t, g)
		var deletes []string
		for i, set := range sets {
			if err := ofctl.Translate(set.lines); err != nil {
				fallback++
				reasons[strings.SplitN(err.Error(), " in line ", 2)[0]] = true
				assert.False(t, strings.HasPrefix(set.name, "service-port/"), "%s: service-port set %s not translated: %v", filepath.Base(g), set.name, err)
			} else {
				native++
				lines += len(set.lines)
			}
			require.NoError(t, ref.Bundle(ctx, set.lines), "%s %s via ovs-ofctl", filepath.Base(g), set.name)
			require.NoError(t, nat.Bundle(ctx, set.lines), "%s %s native", filepath.Base(g), set.name)
			if i%2 == 1 {
				_, c, _ := strings.Cut(set.name, " cookie=")
				deletes = append(deletes, "flow delete cookie="+c+"/-1")
			}
		}
		rf, rg := dumpState(t, sb, "ref")
		nf, ng := dumpState(t, sb, "nat")
		require.NotEmpty(t, rf, g)
		assert.Equal(t, rf, nf, "flows of %s", filepath.Base(g))
		assert.Equal(t, rg, ng, "groups of %s", filepath.Base(g))

		// Repairs (flows.Plan.Repair's "flow modify_strict" lines): first every flow's actions
		// replaced by drop, then the golden's own lines again.
		for _, actions := range []string{"drop", ""} {
			var mods []string
			for _, set := range sets {
				for _, l := range set.lines {
					if f, ok := strings.CutPrefix(l, "flow add "); ok {
						if actions != "" {
							f = f[:strings.Index(f, "actions=")] + "actions=" + actions
						}
						mods = append(mods, "flow modify_strict "+f)
					}
				}
			}
			require.NoError(t, ofctl.Translate(mods))
			require.NoError(t, ref.Bundle(ctx, mods))
			require.NoError(t, nat.Bundle(ctx, mods))
			rf2, _ := dumpState(t, sb, "ref")
			nf2, _ := dumpState(t, sb, "nat")
			assert.Equal(t, rf2, nf2, "flows of %s after modify_strict to %q", filepath.Base(g), actions)
			if actions == "drop" {
				assert.NotEqual(t, rf, rf2, "modify_strict changed nothing")
			} else {
				assert.Equal(t, rf, rf2, "modify_strict with the golden's lines restores it")
			}
		}

		// Deletes: every other cookie, and every group (flows referencing a deleted group go
		// with it in OVS).
		for _, l := range rg {
			if id, ok := strings.CutPrefix(l, "group_id="); ok {
				id, _, _ = strings.Cut(id, ",")
				deletes = append(deletes, "group delete group_id="+id)
			}
		}
		require.NoError(t, ofctl.Translate(deletes))
		require.NoError(t, ref.Bundle(ctx, deletes))
		require.NoError(t, nat.Bundle(ctx, deletes))
		rf, rg = dumpState(t, sb, "ref")
		nf, ng = dumpState(t, sb, "nat")
		assert.Equal(t, rf, nf, "flows of %s after deletes", filepath.Base(g))
		assert.Equal(t, rg, ng, "groups of %s after deletes", filepath.Base(g))
	}
	var rs []string
	for r := range reasons {
		rs = append(rs, r)
	}
	sort.Strings(rs)
	t.Logf("flow sets: %d native (%d lines), %d through ovs-ofctl; reasons: %s", native, lines, fallback, strings.Join(rs, "; "))
	// Coverage, not correctness (a set the encoder cannot translate is still applied correctly,
	// through ovs-ofctl): every golden flow shape is translated today; a new one that is not
	// shows up here (add it to ofencode.go).
	assert.Zero(t, fallback, "golden flow sets that go through ovs-ofctl")

	// The one kind without a golden case: service-drain (UDP and TCP).
	clearBridge(t, sb, "ref")
	clearBridge(t, sb, "nat")
	for _, e := range []flows.EntryPoint{{Protocol: flows.TCP, Addr: netip.MustParseAddrPort("203.0.113.100:80")},
		{Protocol: flows.UDP, Addr: netip.MustParseAddrPort("192.0.2.11:30053")}} {
		fs, err := flows.BuildServiceDrain(e)
		require.NoError(t, err)
		p := flows.FullDiff(fs.Bridge, []*flows.FlowSet{fs}, flows.Inventory{})
		dl := p.Lines()
		require.NoError(t, ofctl.Translate(dl))
		require.NoError(t, ref.Bundle(ctx, dl))
		require.NoError(t, nat.Bundle(ctx, dl))
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
	big := bigPlan.Lines()
	require.NoError(t, ofctl.Translate(big))
	require.True(t, strings.HasPrefix(big[1], "group insert_bucket "), big[1][:40])
	require.NoError(t, ref.Bundle(ctx, big))
	require.NoError(t, nat.Bundle(ctx, big))
	rf, rg := dumpState(t, sb, "ref")
	nf, ng := dumpState(t, sb, "nat")
	assert.Equal(t, rf, nf, "flows of the 600-endpoint service")
	require.Len(t, ng, 1)
	assert.Equal(t, 600, strings.Count(ng[0], "bucket_id:"))
	assert.True(t, rg[0] == ng[0], "groups of the 2,000-endpoint service differ")
}

// A bundle with a line the native encoder does not know (here the note action) is applied
// through ovs-ofctl, whole, by the same OpenFlow.
func TestNativeFallback(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br0")
	o := nativeOpenFlow(t, sb, "br0")
	lines := []string{
		"flow add priority=10,ip,table=0,idle_timeout=0,cookie=0x5c10000000000001,actions=goto_table:40",
		"flow add priority=11,ip,table=0,idle_timeout=0,cookie=0x5c10000000000001,actions=note:01.02,goto_table:40",
	}
	require.Error(t, ofctl.Translate(lines))
	require.NoError(t, o.Bundle(ctx, lines))
	fl, _ := dumpState(t, sb, "br0")
	require.Len(t, fl, 2)
	assert.Contains(t, fl[1], "note:01.02")
	native, viaOfctl := o.BundleCounts()
	assert.Equal(t, [2]uint64{0, 1}, [2]uint64{native, viaOfctl})

	// A group message longer than OpenFlow's 64 KiB (2,000 buckets in one message) is not
	// encoded natively: through ovs-ofctl, OVS refuses it as it always did (OFPGMFC_BAD_BUCKET).
	p := flows.FullDiff(flows.BrEx, []*flows.FlowSet{bigService(t, 2000)}, flows.Inventory{})
	p.BucketsPerMessage = 2000
	err := ofctl.Translate(p.Lines())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "too long")
	assert.Less(t, len(err.Error()), 300, "the line is quoted by its start only")
}

// A bundle with one refused message applies nothing: not the flows before it, not a group; the
// error is a Rejected *ofctl.Error naming the OpenFlow error and the refused line. Both a message
// refused when added (a flow in table 10 going back to table 5) and one refused only at commit
// (a flow whose group does not exist) are tried; the connection still works afterwards.
func TestNativeBundleAtomic(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br0")
	o := nativeOpenFlow(t, sb, "br0")
	good := []string{
		"group add_or_mod group_id=7,type=select,selection_method=hash,fields(ip_src,tcp_src),bucket=bucket_id:1,weight:100,actions=output:1",
		"flow add priority=100,tcp,nw_dst=192.0.2.11,tp_dst=80,table=40,idle_timeout=0,cookie=0x5c10000000000001,actions=group:7",
		"flow add priority=10,ip,table=0,idle_timeout=0,cookie=0x5c10000000000001,actions=goto_table:40",
	}
	for name, bad := range map[string]string{
		"at add":    "flow add priority=1,table=10,idle_timeout=0,cookie=0x5c10000000000001,actions=goto_table:5",
		"at commit": "flow add priority=1,ip,table=41,idle_timeout=0,cookie=0x5c10000000000001,actions=group:999",
	} {
		lines := append(append([]string{}, good...), bad)
		require.NoError(t, ofctl.Translate(lines), "the test must exercise the native path")
		err := o.Bundle(ctx, lines)
		var oe *ofctl.Error
		require.True(t, errors.As(err, &oe), "%s: want *ofctl.Error, got %v", name, err)
		assert.True(t, oe.Rejected(), "%s: %v", name, err)
		assert.Contains(t, oe.Stderr, bad, name)
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
	flow := func(i int) []string {
		return []string{"flow add priority=" + string(rune('1'+i)) + ",ip,table=0,idle_timeout=0,cookie=0x5c10000000000001,actions=drop"}
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
	lines := p.Lines()
	if err := ofctl.Translate(lines); err != nil {
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
				if err := o.Bundle(ctx, lines); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(lines)), "lines/bundle")
		})
	}
}

// BenchmarkColdStartBundle applies one bundle of n Services (a 3-bucket select group and 2 flows
// each, the shape of a cold start's full sync) natively into an emptied bridge; with -benchmem
// it shows the memory a large native bundle costs.
func BenchmarkColdStartBundle(b *testing.B) {
	const n = 2000
	sb := ovstest.StartDummy(b)
	sb.AddBridge(b, "br0")
	var lines []string
	for i := 0; i < n; i++ {
		eps := []flows.Endpoint{
			{IP: netip.AddrFrom4([4]byte{10, 244, 2, byte(1 + i%250)}), Port: 8080, NodeName: "node2"},
			{IP: netip.AddrFrom4([4]byte{10, 244, 3, byte(1 + i%250)}), Port: 8080, NodeName: "node3"},
			{IP: netip.AddrFrom4([4]byte{10, 244, 1, byte(1 + i%250)}), Port: 8080, NodeName: "node1"},
		}
		fs := servicePortOf(b, eps)
		p := flows.FullDiff(fs.Bridge, []*flows.FlowSet{fs}, flows.Inventory{})
		for _, l := range p.Lines() {
			// One service template, n copies: distinct group ids, ports and cookies.
			l = strings.ReplaceAll(l, "tp_dst=30080", fmt.Sprintf("tp_dst=%d", 20000+i))
			l = strings.ReplaceAll(l, "tp_dst=80,", fmt.Sprintf("tp_dst=%d,", 1000+i))
			gid := fmt.Sprint(fs.Groups[0].ID)
			l = strings.ReplaceAll(l, "group_id="+gid, fmt.Sprintf("group_id=%d", i+1))
			l = strings.ReplaceAll(l, "group:"+gid, fmt.Sprintf("group:%d", i+1))
			lines = append(lines, l)
		}
	}
	if err := ofctl.Translate(lines); err != nil {
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
		if err := o.Bundle(ctx, lines); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(lines)), "lines/bundle")
}

// BenchmarkTranslateServicePorts encodes the lines of 1,000 service ports of 10 endpoints (a
// cold start's chunk) into OpenFlow messages, without a switch: the agent's CPU cost of the
// native path per chunk.
func BenchmarkTranslateServicePorts(b *testing.B) {
	var eps []flows.Endpoint
	for i := range 10 {
		eps = append(eps, flows.Endpoint{IP: netip.AddrFrom4([4]byte{10, 244, byte(1 + i%3), byte(10 + i)}), Port: 8080, NodeName: fmt.Sprintf("node%d", 1+i%3)})
	}
	fs := servicePortOf(b, eps)
	var lines []string
	for range 1000 {
		p := flows.FullDiff(fs.Bridge, []*flows.FlowSet{fs}, flows.Inventory{})
		lines = append(lines, p.Lines()...)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := ofctl.Translate(lines); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(lines)), "lines")
}

// Prepare encodes a bundle ahead of its Bundle call: the call with the same slice applies that
// encoding natively; a prepared bundle the encoder cannot translate still goes through
// ovs-ofctl; a copy of prepared lines is encoded anew (preparations are by slice, not text).
func TestNativePrepare(t *testing.T) {
	ctx := testContext(t)
	sb := ovstest.StartDummy(t)
	sb.AddBridge(t, "br0")
	o := nativeOpenFlow(t, sb, "br0")
	good := []string{"flow add priority=10,ip,table=0,idle_timeout=0,cookie=0x5c10000000000001,actions=goto_table:40"}
	bad := []string{"flow add priority=11,ip,table=0,idle_timeout=0,cookie=0x5c10000000000002,actions=note:01.02,goto_table:40"}
	o.Prepare(good)
	o.Prepare(bad)
	require.NoError(t, o.Bundle(ctx, good))
	require.NoError(t, o.Bundle(ctx, bad))
	assert.Zero(t, o.PreparedPending(), "both preparations used")
	native, viaOfctl := o.BundleCounts()
	assert.Equal(t, [2]uint64{1, 1}, [2]uint64{native, viaOfctl})
	again := []string{strings.Replace(good[0], "priority=10", "priority=12", 1)}
	o.Prepare(again)
	require.NoError(t, o.Bundle(ctx, slices.Clone(again)))
	assert.Equal(t, 1, o.PreparedPending(), "a copy does not use the preparation")
	fl, _ := dumpState(t, sb, "br0")
	require.Len(t, fl, 3)
	assert.Contains(t, strings.Join(fl, "\n"), "note:01.02")
	native, viaOfctl = o.BundleCounts()
	assert.Equal(t, [2]uint64{2, 1}, [2]uint64{native, viaOfctl})
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
	require.NoError(t, o.Bundle(ctx, []string{"flow add priority=10,ip,table=0,idle_timeout=0,cookie=0x5c10000000000001,actions=goto_table:40"}))
	id := o.Native.NextBundleID()
	typ, err := o.Native.BundleControlRaw(ctx, id, 0)
	require.NoError(t, err)
	require.NotEqual(t, uint8(1), typ, "raw open accepted")
	err = o.Bundle(ctx, []string{"flow add priority=11,ip,table=0,idle_timeout=0,cookie=0x5c10000000000002,actions=goto_table:40"})
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
