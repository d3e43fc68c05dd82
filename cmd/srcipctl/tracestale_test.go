package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/agent"
)

// A path trace whose flows carry a cookie the agent's report does not list (the report was read
// before the agent applied a change) is run again with a new report; one that stays stale for
// every attempt is printed with a note that says so. The first report here lists no flow set,
// the later ones list every cookie and the group of testdata trace-remote.txt.
func TestPathTraceRetriesStaleReport(t *testing.T) {
	const cookie = "0x5c106a56d6977977" // the service-port flows of ../../ofctl/testdata/trace-remote.txt
	trace, err := os.ReadFile("../../ofctl/testdata/trace-remote.txt")
	require.NoError(t, err)
	cookies := regexp.MustCompile(`cookie (0x[0-9a-f]+)`).FindAllSubmatch(trace, -1)
	for _, tc := range []struct {
		name       string
		freshAfter int32 // the /status call from which on the report lists the cookie (0: never)
		reports    int32
		stale      bool
	}{
		{name: "fresh at once", freshAfter: 1, reports: 1},
		{name: "fresh on the second report", freshAfter: 2, reports: 2},
		{name: "never fresh", freshAfter: 0, reports: traceAttempts, stale: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/status":
					n := calls.Add(1)
					rep := agent.Report{Node: "node1", Ports: agent.PortsReport{ExUplink: 1, ExMAC: "02:00:c0:00:02:0b", TunnelUDPPort: 6081}}
					if tc.freshAfter != 0 && n >= tc.freshAfter {
						for _, m := range cookies {
							fs := agent.FlowSetReport{Kind: "other", Cookie: string(m[1])}
							if fs.Cookie == cookie {
								fs.Kind, fs.Object = "service-port", "demo/web http/TCP"
							}
							rep.FlowSets = append(rep.FlowSets, fs)
						}
						rep.Services = []agent.ServiceReport{{Namespace: "demo", Name: "web", OptedIn: true,
							Ports: []agent.ServicePortReport{{PortName: "http", Protocol: "TCP", Group: 1558548335}}}}
					}
					_ = json.NewEncoder(w).Encode(rep)
				case "/trace":
					_, _ = w.Write(trace)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			ac, err := newAgentClient(srv.URL)
			require.NoError(t, err)
			ctx := context.Background()
			rep, err := ac.Report(ctx)
			require.NoError(t, err)
			var out bytes.Buffer
			base := pathTracer{clientMAC: []byte{2, 0, 0x5e, 0, 0x53, 1}, peer: peerFinder(nil, t.TempDir())}
			err = pathTrace(ctx, &out, base, ac, rep, traceAttempts, "tcp",
				netip.MustParseAddrPort("198.51.100.10:40000"), netip.MustParseAddrPort("203.0.113.100:80"))
			require.NoError(t, err)
			t.Log(out.String())
			assert.Equal(t, tc.reports, calls.Load(), "reports read")
			assert.Contains(t, out.String(), "verdict: ")
			assert.Equal(t, 1, bytes.Count(out.Bytes(), []byte("verdict: ")), "one trace printed")
			if tc.stale {
				assert.Contains(t, out.String(), "service-port (not applied by the agent now)")
				assert.Contains(t, out.String(), "# note: some traced flows carry cookies that the agents' reports do not list, in 3 attempts")
			} else {
				assert.Contains(t, out.String(), "service-port demo/web http/TCP")
				assert.NotContains(t, out.String(), "not applied by the agent now")
				assert.NotContains(t, out.String(), "# note:")
			}
		})
	}
}
