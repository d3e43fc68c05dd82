package flows

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// Test IP conventions (topology T3, docs/field-cases.md#t3): nodes 192.0.2.11-13 with pod CIDRs
// 10.244.{1,2,3}.0/24, external client 198.51.100.10, LB IPs / externalIPs 203.0.113.100/101.

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

// testState, webTCP and webUDP are the golden scenarios' building blocks (golden.go).
func testState(svcs ...ServicePort) *State { return GoldenState(svcs...) }
func webTCP() ServicePort                  { return GoldenWebTCP() }
func webUDP() ServicePort                  { return GoldenWebUDP() }

// render returns the desired state as the bundle a fresh bridge would receive, per bridge.
func render(t *testing.T, d Desired) map[Bridge]string {
	out := map[Bridge]string{}
	byBridge := map[Bridge][]*FlowSet{}
	for _, fs := range d {
		byBridge[fs.Bridge] = append(byBridge[fs.Bridge], fs)
	}
	for b, sets := range byBridge {
		sort.Slice(sets, func(i, j int) bool { return sets[i].Key.String() < sets[j].Key.String() })
		var lines []string
		for _, fs := range sets {
			lines = append(lines, "# "+fs.Key.String()+" cookie="+fs.Cookie().String())
			for _, w := range fs.Warnings {
				lines = append(lines, "# warning: "+w)
			}
			p := Plan{Bridge: b, Add: []*FlowSet{fs}}
			lines = append(lines, p.Lines()...)
		}
		out[b] = strings.Join(lines, "\n") + "\n"
	}
	return out
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./flows -update")
	require.Equal(t, string(want), got, "golden %s differs; review and run go test ./flows -update", path)
}

func TestGolden(t *testing.T) {
	cases := GoldenStates()
	for name, st := range cases {
		t.Run(name, func(t *testing.T) {
			d, err := Build(st)
			require.NoError(t, err)
			r := render(t, d)
			checkRenderedOnce(t, d)
			checkGolden(t, name+".br-ex", r[BrEx])
			checkGolden(t, name+".br-int", r[BrInt])
		})
	}
}

// servicePort returns st's only Service port (tests with one).
func servicePort(t testing.TB, st *State) *ServicePort {
	t.Helper()
	require.Len(t, st.Services, 1)
	for _, sp := range st.Services {
		return &sp
	}
	return nil
}
func mustAddrPort(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// checkRenderedOnce checks Finish's single rendering against a second one done the plain way:
// each line is the flow's own MarshalText (cookie included) and each MatchKey is matchKeyOf's.
func checkRenderedOnce(t *testing.T, d Desired) {
	t.Helper()
	for _, fs := range d {
		require.Len(t, fs.FlowLines(), len(fs.Flows), fs.Key.String())
		require.Len(t, fs.MatchKeys(), len(fs.Flows), fs.Key.String())
		for i := range fs.Flows {
			line := fs.Flows[i].String()
			require.Equal(t, line, fs.FlowLines()[i], fs.Key.String())
			k := fs.MatchKeys()[i]
			// The MatchKey is the line's text between "priority=N," and ",table=".
			want := strings.TrimPrefix(line[:strings.Index(line, ",table=")], fmt.Sprintf("priority=%d", k.Priority))
			require.Equal(t, strings.TrimPrefix(want, ","), k.Match, fs.Key.String())
		}
	}
}
