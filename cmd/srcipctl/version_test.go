package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/version"
)

// srcipctl version prints its own release and the agent's from its report (/status), "unknown"
// for an agent older than the field, and a note when no agent answers.
func TestVersionCommand(t *testing.T) {
	for _, tc := range []struct{ agentVersion, want string }{
		{"v0.1.0 (commit d045c63, go1.26.8)", "srcip-agent: v0.1.0 (commit d045c63, go1.26.8) (node node1)\n"},
		{"", "srcip-agent: unknown (an agent older than v0.1.0) (node node1)\n"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewEncoder(w).Encode(agent.Report{Node: "node1", Version: tc.agentVersion})
		}))
		var out bytes.Buffer
		cmd := newCommand(&out)
		cmd.SetArgs([]string{"version", "--agent", srv.URL})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		if want := "srcipctl:    " + version.String() + "\n" + tc.want; out.String() != want {
			t.Errorf("got %q, want %q", out.String(), want)
		}
	}
	var out bytes.Buffer
	cmd := newCommand(&out)
	cmd.SetArgs([]string{"version", "--agent", "unix:/nonexistent/srcip-agent.sock"})
	if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "srcip-agent: not reached: ") {
		t.Errorf("no agent: %v %q", err, out.String())
	}
}
