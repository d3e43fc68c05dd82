package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ovs-srcip/ovs-srcip/agent"
)

// statusSocketName is the agent's status socket in the node's OVS run directory (srcip-agent
// --status-socket).
const statusSocketName = "srcip-agent.sock"

// agentClient talks to one srcip-agent's HTTP endpoints (/status, /trace) over its status socket
// (unix:PATH) or its HTTP server (http://HOST:PORT).
type agentClient struct {
	addr string // as given: unix:PATH or http(s)://...
	base string // URL prefix
	hc   *http.Client
}

// newAgentClient returns a client for addr: "unix:PATH", a bare directory (the node's OVS run
// directory, which holds srcip-agent.sock) or "http(s)://HOST:PORT".
func newAgentClient(addr string) (*agentClient, error) {
	switch {
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		return &agentClient{addr: addr, base: strings.TrimRight(addr, "/"), hc: &http.Client{Timeout: 60 * time.Second}}, nil
	case strings.HasPrefix(addr, "unix:"), strings.HasPrefix(addr, "/"):
		path := strings.TrimPrefix(addr, "unix:")
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			path = filepath.Join(path, statusSocketName)
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		return &agentClient{addr: "unix:" + path, base: "http://agent", hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}, nil
	}
	return nil, fmt.Errorf("agent address %q: want unix:PATH (the agent's --status-socket, by default <ovs-rundir>/%s), a run directory, or http://HOST:PORT (its --debug-bind-address; --metrics-bind-address serves no /status)", addr, statusSocketName)
}

func (c *agentClient) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent at %s: %w (is srcip-agent running on that node? it serves %s in its --ovs-rundir, or give --agent)", c.addr, errors.Unwrap(err), statusSocketName)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("agent at %s: %w", c.addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent at %s: %s %s: %s", c.addr, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// Report reads the agent's /status.
func (c *agentClient) Report(ctx context.Context) (*agent.Report, error) {
	b, err := c.get(ctx, "/status", nil)
	if err != nil {
		return nil, err
	}
	var r agent.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("agent at %s: /status: %w", c.addr, err)
	}
	return &r, nil
}

// Trace runs ofproto/trace on the agent's node (bridge "br-ex" or "br-int").
func (c *agentClient) Trace(ctx context.Context, bridge, flow string, ctNext []string) (string, error) {
	b, err := c.get(ctx, "/trace", url.Values{"bridge": {bridge}, "flow": {flow}, "ct-next": ctNext})
	return string(b), err
}

// agentFlag adds --agent: where the node's agent answers; default the status socket in the node's
// run directory.
func agentFlag(fs interface {
	StringVar(p *string, name, value, usage string)
}, p *string) {
	fs.StringVar(p, "agent", "", "the node's srcip-agent: unix:PATH, or http://HOST:PORT (its --debug-bind-address; on a cluster e.g. through kubectl port-forward); default unix:<node-rundir>/"+statusSocketName)
}

// nodeAgent returns the client of the node's agent: addr, or the status socket in runDir.
func nodeAgent(addr, runDir string) (*agentClient, error) {
	if addr == "" {
		addr = "unix:" + filepath.Join(runDir, statusSocketName)
	}
	return newAgentClient(addr)
}
