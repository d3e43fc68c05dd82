package flows_test

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/openflow"
)

var updateWire = flag.Bool("update-wire", false, "rewrite testdata/wire.sha256 from the typed encoder")

// oraclePlans are the bundles the agent writes for one flow set: its add, its repair
// (modify_strict and add_or_mod) and the deletes of its cookie and groups.
func oraclePlans(fs *flows.FlowSet) map[string]flows.Plan {
	return map[string]flows.Plan{
		"add":    {Bridge: fs.Bridge, Add: []*flows.FlowSet{fs}},
		"repair": {Bridge: fs.Bridge, Repair: []*flows.FlowSet{fs}},
		"delete": {Bridge: fs.Bridge, DeleteCookies: []flows.Cookie{fs.Cookie()}, DeleteGroups: fs.GroupIDs()},
	}
}

// TestWireOracle is the migration's oracle: for every flow set of every golden scenario (and a
// group split over several messages, and the service-drain sets), the typed messages of each
// bundle the agent writes for it (flows.Plan.Messages, package openflow's Encode) hash to the
// digests in testdata/wire.sha256. Those digests were written (commit "flows: TestWireOracle")
// when the same test also compared every message byte for byte with what ofctl's former text
// encoder (ofencode.go, which TestNativeEquivalence had checked against ovs-ofctl) made of the
// plan's rendered lines, before that encoder was deleted. Regenerate with -update-wire only
// when a byte is meant to change, and say why in the commit.
func TestWireOracle(t *testing.T) {
	type set struct {
		name string
		fs   *flows.FlowSet
		per  int
	}
	var sets []set
	cases := flows.GoldenCases()
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	addDesired := func(prefix string, d flows.Desired, per int) {
		var fss []*flows.FlowSet
		for _, fs := range d {
			fss = append(fss, fs)
		}
		sort.Slice(fss, func(i, j int) bool { return fss[i].Key.String() < fss[j].Key.String() })
		for _, fs := range fss {
			sets = append(sets, set{prefix + " " + fs.Bridge.String() + " " + fs.Key.String(), fs, per})
		}
	}
	for _, n := range names {
		d, err := flows.Build(cases[n])
		require.NoError(t, err)
		addDesired(n, d, 0)
	}
	big, err := flows.Build(flows.BigServiceState(600))
	require.NoError(t, err)
	for k, fs := range big {
		if k.Kind != flows.KindServicePort {
			delete(big, k)
		} else {
			require.Len(t, fs.Groups[0].Buckets, 600)
		}
	}
	addDesired("big-600-per-100", big, 100)
	for _, e := range []flows.EntryPoint{{Protocol: flows.TCP, Addr: netip.MustParseAddrPort("203.0.113.100:80")},
		{Protocol: flows.UDP, Addr: netip.MustParseAddrPort("192.0.2.11:30053")}} {
		fs, err := flows.BuildServiceDrain(e)
		require.NoError(t, err)
		sets = append(sets, set{"drain " + fs.Bridge.String() + " " + fs.Key.String(), fs, 0})
	}

	var digests []string
	msgs, groupMsgs := 0, 0
	for _, s := range sets {
		plans := oraclePlans(s.fs)
		for _, which := range []string{"add", "repair", "delete"} {
			p := plans[which]
			p.BucketsPerMessage = s.per
			typed := p.Messages()
			lines := p.Lines()
			require.Len(t, lines, len(typed))
			types, bodies, err := openflow.Encode(typed)
			require.NoError(t, err, "%s %s", s.name, which)
			h := sha256.New()
			for i := range typed {
				fmt.Fprintf(h, "%d:", types[i])
				h.Write(bodies[i])
				msgs++
				if types[i] == openflow.TypeGroupMod {
					groupMsgs++
				}
			}
			digests = append(digests, fmt.Sprintf("%s %s %d %x", s.name, which, len(typed), h.Sum(nil)))
		}
	}
	got := strings.Join(digests, "\n") + "\n"
	path := filepath.Join("testdata", "wire.sha256")
	if *updateWire {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./flows -run TestWireOracle -update-wire")
	assert.Equal(t, string(want), got, "typed encodings differ from testdata/wire.sha256")
	t.Logf("%d flow sets, %d messages (%d group mods)", len(sets), msgs, groupMsgs)
}
