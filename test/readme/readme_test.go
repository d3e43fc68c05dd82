// Package readme runs every command of the README's Debugging block on a demo lab (test/lab built
// from test/manifests/demo, the real srcip-agent on every node, as `make demo DEMO_ARGS=--keep`
// leaves it) and checks that each works as written and that its output names the objects
// (Service, endpoints, pods, nodes). It needs root and Open vSwitch; `make test` provides both.
package readme

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// readmeCommands returns the command lines of the first ```sh block after "## Debugging".
func readmeCommands(t *testing.T, readme string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "## Debugging")
	require.GreaterOrEqual(t, i, 0, "README has no Debugging section")
	s = s[i:]
	start := strings.Index(s, "```sh\n")
	require.GreaterOrEqual(t, start, 0)
	s = s[start+len("```sh\n"):]
	s = s[:strings.Index(s, "```")]
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// stripComment removes a trailing "  # comment" (outside quotes).
func stripComment(l string) string {
	inQ := false
	for i := 0; i < len(l); i++ {
		switch l[i] {
		case '\'':
			inQ = !inQ
		case '#':
			if !inQ && i > 0 && l[i-1] == ' ' {
				return strings.TrimSpace(l[:i])
			}
		}
	}
	return strings.TrimSpace(l)
}

// build builds pkg into dir and returns the binary's path (or the value of env when set).
func build(t *testing.T, env, dir, name, pkg string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	out := filepath.Join(dir, name)
	b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

var cookieRE = regexp.MustCompile(`cookie=(0x5c10[0-9a-f]+)`)

// macCmdRE finds the README's command that prints <br-ex MAC>.
var macCmdRE = regexp.MustCompile("`<br-ex MAC>` is what `([^`]+)` prints")

func TestReadmeDebuggingCommands(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces, Open vSwitch): run as root, as make test does")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	tmp := t.TempDir()
	agentBin := build(t, "SRCIP_AGENT", tmp, "srcip-agent", "github.com/ovs-srcip/ovs-srcip/cmd/srcip-agent")
	echoBin := build(t, "SRCIP_ECHO", tmp, "echo", "github.com/ovs-srcip/ovs-srcip/test/echo")
	ctl := build(t, "SRCIPCTL", tmp, "srcipctl", "github.com/ovs-srcip/ovs-srcip/cmd/srcipctl")

	_, _ = lab.CleanupStale("", t.Logf)
	// As make demo: the demo manifests and the lab's agent flags.
	l, err := lab.New(lab.Config{ManifestsDir: filepath.Join(root, "test/manifests/demo"), AgentBin: agentBin, EchoBin: echoBin})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	require.NoError(t, l.StartAgents())
	node1 := l.Node("node1")
	client := l.Clients[0]
	require.NoError(t, lab.WaitFor(func() error {
		_, err := l.RequestWith(client.Name, "tcp", "203.0.113.100:80", lab.RequestOpts{Timeout: "1s"})
		return err
	}, 60*time.Second), "the demo Service never answered")

	flowsDump, err := l.DumpFlows("node1", "br-ex", "cookie=0x5c10000000000000/0xffff000000000000")
	require.NoError(t, err)
	m := cookieRE.FindStringSubmatch(flowsDump)
	require.NotNil(t, m, flowsDump)
	cookie := m[1]

	// What each command's output must contain (by the command's start).
	want := []struct {
		prefix string
		has    []string
	}{
		{"bin/srcipctl status", []string{"node node1", "service demo/web", "opted in", "endpoint demo/echo-a 10.244.2.5:8080 on node2", "entry points: 192.0.2.11:30080/TCP", "conntrack ZoneService", "    counters: "}},
		{"bin/srcipctl get services", []string{"demo/web", "http/TCP", "192.0.2.11:30080/TCP +2"}},
		{"bin/srcipctl trace --from 198.51.100.10:40000 --to 203.0.113.100:80", []string{"entry point of demo/web http/TCP", "ExServiceCT", "endpoint demo/", "verdict: delivered", "(demo/web http/TCP)"}},
		{"bin/srcipctl trace --from 198.51.100.10:40000 --to 192.0.2.11:30081", []string{"verdict: not handled by ovs-srcip: node1"}},
		{"bin/srcipctl flows", []string{"service-port demo/web http/TCP; ExServiceLB", "group of demo/web http/TCP, 3 bucket(s)"}},
		{"bin/srcipctl cookie", []string{"object=service-port demo/web", "bridge=br-ex"}},
		{"bin/srcipctl desired", []string{"# br-ex", "service-port demo/web http/TCP", "pod demo/echo-c", "drop: tunnel-from-unknown-node"}},
		{"bin/srcipctl diff", []string{"# rendered with --manifests=", "--external-ip-cidrs=203.0.113.0/24", "no difference"}},
		{"bin/srcipctl groups", []string{"of demo/web http/TCP, 3 bucket(s)", "10.244.2.5:8080  demo/echo-a  node2"}},
		{"ovs-ofctl -O OpenFlow15 dump-flows br-ex cookie=0x5c10", []string{"tp_dst=30080"}},
		{"ovs-ofctl -O OpenFlow15 dump-flows br-ex cookie=0x5c11", nil},
		{"ovs-appctl dpctl/dump-conntrack", nil},
		{"ovs-ofctl -O OpenFlow15 dump-group-stats", []string{"group_id="}},
		{"ovs-appctl ofproto/trace", []string{"Datapath actions", "nat(dst=10.244."}},
	}
	// The README's way to get <br-ex MAC> prints it as ofproto/trace takes it.
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	mm := macCmdRE.FindSubmatch(b)
	require.NotNil(t, mm, "README no longer says how to get <br-ex MAC>")
	macCmd := exec.Command("bash", "-c", string(mm[1]))
	macCmd.Env = append(os.Environ(), "OVS_RUNDIR="+node1.Dir)
	macOut, err := macCmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", mm[1], macOut)
	assert.Equal(t, node1.MAC, strings.TrimSpace(string(macOut)), "%s", mm[1])

	cmds := readmeCommands(t, filepath.Join(root, "README.md"))
	require.Len(t, cmds, len(want), "README Debugging block changed: update this test's expectations")
	for i, raw := range cmds {
		c := stripComment(raw)
		require.True(t, strings.HasPrefix(c, want[i].prefix), "command %d %q: want it to start with %q", i, c, want[i].prefix)
		c = strings.ReplaceAll(c, "<cookie>", cookie)
		c = strings.ReplaceAll(c, "<br-ex MAC>", node1.MAC)
		c = strings.Replace(c, "bin/srcipctl", ctl, 1)
		t.Run(fmt.Sprintf("%02d", i), func(t *testing.T) {
			cmd := exec.Command("bash", "-c", c)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "OVS_RUNDIR="+node1.Dir)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			t.Logf("$ %s\n%s", raw, out.String())
			require.NoError(t, err, "%s", c)
			for _, h := range want[i].has {
				assert.Contains(t, out.String(), h, c)
			}
		})
	}
}
