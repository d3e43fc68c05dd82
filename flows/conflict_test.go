package flows

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMatchKeysAndWithout(t *testing.T) {
	st := testState(webTCP())
	fs, err := BuildServicePort(st, servicePort(t, st))
	require.NoError(t, err)
	keys := fs.MatchKeys()
	require.Len(t, keys, len(fs.FlowLines()))
	assert.Equal(t, MatchKey{Bridge: BrEx, Table: ExServiceLB, Priority: 100, Match: "tcp,nw_dst=192.0.2.11,tp_dst=30080"}, keys[0])
	assert.Len(t, fs.EntryPoints, 3)

	// Drop the NodePort's two flows.
	drop := map[MatchKey]bool{}
	for _, k := range keys {
		if strings.Contains(k.Match, "tp_dst=30080") {
			drop[k] = true
		}
	}
	require.Len(t, drop, 2)
	w, err := fs.Without(drop, "lost the NodePort")
	require.NoError(t, err)
	assert.Len(t, w.FlowLines(), len(fs.FlowLines())-2)
	assert.NotEqual(t, fs.Cookie(), w.Cookie())
	assert.Equal(t, fs.Groups, w.Groups)
	assert.Equal(t, []string{"lost the NodePort"}, w.Warnings)
	assert.Equal(t, []EntryPoint{
		{Protocol: TCP, Addr: netip.MustParseAddrPort("203.0.113.100:80")},
		{Protocol: TCP, Addr: netip.MustParseAddrPort("203.0.113.101:80")},
	}, w.EntryPoints)
	again, err := fs.Without(drop, "lost the NodePort")
	require.NoError(t, err)
	assert.Equal(t, w.Cookie(), again.Cookie(), "deterministic")
}

func TestServicePortUDPEndpoints(t *testing.T) {
	sp := webTCP()
	sp.Protocol = UDP
	st := testState(sp)
	fs, err := BuildServicePort(st, servicePort(t, st))
	require.NoError(t, err)
	assert.Equal(t, []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:8080"),
		netip.MustParseAddrPort("10.244.2.5:8080"), netip.MustParseAddrPort("10.244.3.5:8080")}, fs.Endpoints)
	a := AppliedOf(fs)
	assert.Equal(t, fs.Endpoints, a.Endpoints)
	assert.Equal(t, fs.EntryPoints, a.EntryPoints)
	tcp := testState(webTCP())
	fs, err = BuildServicePort(tcp, servicePort(t, tcp))
	require.NoError(t, err)
	assert.Empty(t, fs.Endpoints, "TCP endpoints are never flushed")
}

func TestBuildServiceDrain(t *testing.T) {
	e := EntryPoint{Protocol: TCP, Addr: netip.MustParseAddrPort("203.0.113.100:80")}
	fs, err := BuildServiceDrain(e)
	require.NoError(t, err)
	assert.Equal(t, KindServiceDrain, fs.Cookie().Kind())
	assert.Equal(t, []string{"priority=90,tcp,nw_dst=203.0.113.100,tp_dst=80,table=40,idle_timeout=0,cookie=" +
		fs.Cookie().String() + ",actions=ct(table=41,zone=64256,nat)"}, fs.FlowLines())
	assert.Equal(t, "service-drain/203.0.113.100:80/TCP", fs.Key.String())
	back, ok := fs.Key.DrainEntryPoint()
	require.True(t, ok)
	assert.Equal(t, e, back)
	again, err := BuildServiceDrain(e)
	require.NoError(t, err)
	assert.Equal(t, fs.Cookie(), again.Cookie(), "a drain's cookie depends only on its entry point")
	_, err = BuildServiceDrain(EntryPoint{Protocol: "SCTP", Addr: e.Addr})
	assert.Error(t, err)
}

func TestPlanRepairLines(t *testing.T) {
	st := testState(webTCP())
	d, err := Build(st)
	require.NoError(t, err)
	var ex []*FlowSet
	for _, fs := range d {
		if fs.Bridge == BrEx {
			ex = append(ex, fs)
		}
	}
	p := Plan{Bridge: BrEx, Add: ex[:1]}
	p.RepairAll(ex)
	assert.Len(t, p.Repair, len(ex)-1)
	assert.True(t, p.Changes())
	lines := p.Lines()
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "flow modify_strict ") {
			n++
		}
	}
	want := 0
	for _, fs := range ex[1:] {
		want += len(fs.FlowLines())
	}
	assert.Equal(t, want, n)
	only := Plan{Bridge: BrEx}
	only.RepairAll(ex)
	assert.False(t, only.Changes())
	assert.False(t, only.Empty())
}

func TestSourceRangesFlows(t *testing.T) {
	sp := webTCP()
	sp.FilterSources = true
	sp.SourceRanges = []netip.Prefix{pfx("198.51.100.10/32"), pfx("2001:db8::/32"), pfx("198.51.100.10/24")}
	st := testState(sp)
	fs, err := BuildServicePort(st, servicePort(t, st))
	require.NoError(t, err)
	var ct []string
	for _, k := range fs.MatchKeys() {
		if k.Table == ExServiceCT {
			ct = append(ct, k.String())
		}
	}
	// LB IPs and externalIPs pick up any new TCP segment (a route change), node addresses only SYNs.
	assert.Equal(t, []string{
		"br-ex/41/100/tcp,ct_state=+trk+new,nw_src=198.51.100.0/24,nw_dst=203.0.113.100,tp_dst=80",
		"br-ex/41/100/tcp,ct_state=+trk+new,nw_src=198.51.100.0/24,nw_dst=203.0.113.101,tp_dst=80",
		"br-ex/41/100/tcp,ct_state=+trk+new,tcp_flags=+syn-ack,nw_dst=192.0.2.11,tp_dst=30080",
		"br-ex/41/95/tcp,ct_state=+trk+new,nw_dst=203.0.113.100,tp_dst=80",
		"br-ex/41/95/tcp,ct_state=+trk+new,nw_dst=203.0.113.101,tp_dst=80",
	}, sortedStrings(ct), "NodePort unfiltered; the /32 folded into the /24; IPv6 ignored")

	sp.SourceRanges = append(sp.SourceRanges, pfx("0.0.0.0/0"))
	st = testState(sp)
	open, err := BuildServicePort(st, servicePort(t, st))
	require.NoError(t, err)
	plain := testState(webTCP())
	want, err := BuildServicePort(plain, servicePort(t, plain))
	require.NoError(t, err)
	assert.Equal(t, want.FlowLines(), open.FlowLines(), "0.0.0.0/0 lets everyone in: no filter flows")
}

// An entry point that loses its ExServiceLB flow to another flow set loses its source-range
// flows with it, so that they cannot filter the winner's new connections.
func TestWithoutDropsSourceRangeFlows(t *testing.T) {
	sp := webTCP()
	sp.FilterSources = true
	sp.SourceRanges = []netip.Prefix{pfx("198.51.100.10/32")}
	st := testState(sp)
	fs, err := BuildServicePort(st, servicePort(t, st))
	require.NoError(t, err)
	lb := MatchKey{Bridge: BrEx, Table: ExServiceLB, Priority: 100, Match: "tcp,nw_dst=203.0.113.100,tp_dst=80"}
	require.Contains(t, fs.MatchKeys(), lb)
	w, err := fs.Without(map[MatchKey]bool{lb: true}, "lost")
	require.NoError(t, err)
	for _, k := range w.MatchKeys() {
		assert.NotContains(t, k.Match, "nw_dst=203.0.113.100,", k.String())
	}
	assert.Len(t, w.FlowLines(), len(fs.FlowLines())-3, "LB flow, allow flow, deny flow")
	assert.Equal(t, []EntryPoint{
		{Protocol: TCP, Addr: netip.MustParseAddrPort("192.0.2.11:30080")},
		{Protocol: TCP, Addr: netip.MustParseAddrPort("203.0.113.101:80")},
	}, w.EntryPoints)
}

func TestHostNetworkEndpointDeclinesPort(t *testing.T) {
	for name, eps := range map[string][]Endpoint{
		"only":  {{IP: ip("192.0.2.12"), Port: 8080}},
		"mixed": {{IP: ip("10.244.2.5"), Port: 8080}, {IP: ip("192.0.2.12"), Port: 8080}},
	} {
		t.Run(name, func(t *testing.T) {
			sp := webTCP()
			sp.Endpoints = eps
			st := testState(sp)
			fs, err := BuildServicePort(st, servicePort(t, st))
			require.NoError(t, err)
			assert.Empty(t, fs.FlowLines())
			assert.Empty(t, fs.Groups)
			assert.Empty(t, fs.EntryPoints)
			assert.Contains(t, fs.Declined, "192.0.2.12:8080")
			require.Len(t, fs.Warnings, 1)
			assert.Contains(t, fs.Warnings[0], "declined")
		})
	}
	st := testState(ServicePort{Namespace: "demo", Name: "empty", Protocol: TCP, Port: 80, NodePort: 30090})
	fs, err := BuildServicePort(st, servicePort(t, st))
	require.NoError(t, err)
	assert.Empty(t, fs.Declined, "no endpoints at all: served, new connections dropped (C10)")
	assert.NotEmpty(t, fs.FlowLines())
}

func sortedStrings(s []string) []string {
	out := append([]string{}, s...)
	slices.Sort(out)
	return out
}

// Count, kept as flow sets come and go, equals the number of match keys with several
// contenders counted afresh, through a random sequence of Set calls and a Reset.
func TestConflictsCountKept(t *testing.T) {
	mk := func(i int) MatchKey {
		return MatchKey{Bridge: BrEx, Table: ExServiceLB, Priority: 100, Match: strconv.Itoa(i)}
	}
	key := func(i int) Key { return Key{Kind: KindServicePort, Namespace: "ns", Name: strconv.Itoa(i)} }
	c := NewConflicts()
	recount := func() int {
		n := 0
		for _, cs := range c.contenders {
			if len(cs) > 1 {
				n++
			}
		}
		return n
	}
	r := rand.New(rand.NewPCG(1, 2))
	for step := range 2000 {
		var keys []MatchKey
		for range r.IntN(4) {
			keys = append(keys, mk(r.IntN(12)))
		}
		c.Set(key(r.IntN(10)), keys)
		require.Equal(t, recount(), c.Count(), "step %d", step)
		if step == 1000 {
			c.Reset()
			require.Zero(t, c.Count())
		}
	}
	assert.Positive(t, c.Count(), "the sequence makes conflicts")
}
