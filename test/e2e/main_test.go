// Package e2e runs the real srcip-agent binary on a 3-node lab (test/lab: one ovsdb-server and
// ovs-vswitchd per emulated node, userspace datapath) and sends real packets from an external
// client network namespace. It needs root and Open vSwitch; `make test` provides both.
//
// Topology (test/manifests/demo nodes and pods), dual-stack (test/README.md, the lab's addresses):
// node1 192.0.2.11 and 2001:db8:0:2::11 (pods 10.244.1.0/24 and 2001:db8:244:1::/64, echo-c
// 10.244.1.5 and 2001:db8:244:1::5, and echo-d 10.244.1.6 and 2001:db8:244:1::6 added by
// host_test.go) is the ingress node: the router sends 203.0.113.0/24 and 2001:db8:0:113::/64 to
// it. node2 192.0.2.12 and 2001:db8:0:2::12 (echo-a 10.244.2.5 and 2001:db8:244:2::5), node3
// 192.0.2.13 and 2001:db8:0:2::13 (echo-b 10.244.3.5 and 2001:db8:244:3::5). The clients are
// 198.51.100.10 and 2001:db8:0:100::10 ("client", the default) and 198.51.100.11 and
// 2001:db8:0:100::11 ("client2").
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const clientIP = "198.51.100.10"

// client2IP is a second external client (netns "client2"), behind the same router (C32).
const client2IP = "198.51.100.11"

// client6IP and client2IP6 are the two clients' IPv6 addresses (ipv6_test.go).
const (
	client6IP  = "2001:db8:0:100::10"
	client2IP6 = "2001:db8:0:100::11"
)

var (
	theLab  *lab.Lab
	dir     string // the manifests directory the agents watch
	labOnce sync.Mutex
	// agentBin is the srcip-agent binary the lab runs (also for its flow-restore subcommand).
	agentBin string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	agent, echo := os.Getenv("SRCIP_AGENT"), os.Getenv("SRCIP_ECHO")
	tmp, err := os.MkdirTemp("", "srcip-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if agent == "" || echo == "" {
		// Build the binaries ourselves so that `go test ./test/...` works without make.
		agent, echo = filepath.Join(tmp, "srcip-agent"), filepath.Join(tmp, "echo")
		for out, pkg := range map[string]string{agent: "../../cmd/srcip-agent", echo: "../echo"} {
			if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, b)
				return 1
			}
		}
	}
	agentBin = agent
	dir = filepath.Join(tmp, "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, f := range []string{"nodes.yaml", "pods.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "manifests", "demo", f))
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// echo-d: a second pod on node1, the same-node endpoint of host_test.go's ClusterIP.
	if err := os.WriteFile(filepath.Join(dir, "hostpods.yaml"), []byte(echoDPod), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(filepath.Join(dir, "services.yaml"), []byte(baseServices()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	theLab, err = lab.New(lab.Config{
		ManifestsDir: dir, AgentBin: agent, EchoBin: echo,
		Clients: []lab.ClientSpec{{Name: "client", IP: clientIP, IP6: client6IP}, {Name: "client2", IP: client2IP, IP6: client2IP6}},
		// Frequent full syncs so that "survives every sync" covers several of them; a deep repair
		// every other full sync or so.
		AgentArgs: []string{"--full-sync-period=2s", "--repair-period=4s"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		return 1
	}
	code := func() int {
		if err := theLab.StartAgents(); err != nil {
			fmt.Fprintln(os.Stderr, "agents:", err)
			return 1
		}
		return m.Run()
	}()
	if code != 0 {
		for _, n := range theLab.Nodes {
			if b, err := os.ReadFile(theLab.AgentLog(n.Name)); err == nil {
				fmt.Fprintf(os.Stderr, "==== agent log %s (tail)\n%s\n", n.Name, tail(string(b), 40))
			}
		}
	}
	if err := theLab.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "lab close:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ep is an endpoint of a test Service: a demo pod.
type ep struct{ pod, ip, node string }

var (
	echoA = ep{"echo-a", "10.244.2.5", "node2"}
	echoB = ep{"echo-b", "10.244.3.5", "node3"}
	echoC = ep{"echo-c", "10.244.1.5", "node1"}
)

// svc is a test Service with one TCP port 80 and one UDP port 53, both to 8080.
type svc struct {
	name      string
	annotated bool
	nodePort  int // TCP nodePort; UDP nodePort is nodePort+1000
	lbIP, eIP string
	eps       []ep
}

func (s svc) yaml() string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: e2e\n", s.name)
	if s.annotated {
		b.WriteString("  annotations:\n    ovs-srcip.io/preserve-source-ip: \"true\"\n")
	}
	typ := "NodePort"
	if s.lbIP != "" {
		typ = "LoadBalancer"
	}
	fmt.Fprintf(&b, "spec:\n  type: %s\n  externalTrafficPolicy: Cluster\n", typ)
	if s.eIP != "" {
		fmt.Fprintf(&b, "  externalIPs: [%s]\n", s.eIP)
	}
	fmt.Fprintf(&b, "  ports:\n  - {name: http, protocol: TCP, port: 80, targetPort: 8080, nodePort: %d}\n", s.nodePort)
	fmt.Fprintf(&b, "  - {name: dns, protocol: UDP, port: 53, targetPort: 8080, nodePort: %d}\n", s.nodePort+1000)
	if s.lbIP != "" {
		fmt.Fprintf(&b, "status:\n  loadBalancer:\n    ingress:\n    - ip: %s\n", s.lbIP)
	}
	fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-x1\n  namespace: e2e\n", s.name)
	fmt.Fprintf(&b, "  labels: {kubernetes.io/service-name: %s}\naddressType: IPv4\n", s.name)
	b.WriteString("ports:\n- {name: http, protocol: TCP, port: 8080}\n- {name: dns, protocol: UDP, port: 8080}\nendpoints:\n")
	for _, e := range s.eps {
		fmt.Fprintf(&b, "- addresses: [%s]\n  nodeName: %s\n  conditions: {ready: true, serving: true, terminating: false}\n", e.ip, e.node)
	}
	b.WriteString("---\n")
	return b.String()
}

var (
	// remote: every entry point, one endpoint on node2 (not the ingress node).
	svcRemote = svc{name: "remote", annotated: true, nodePort: 30100, lbIP: "203.0.113.110", eIP: "203.0.113.111", eps: []ep{echoA}}
	// local: one endpoint on node1, the ingress node itself.
	svcLocal = svc{name: "local", annotated: true, nodePort: 30101, eps: []ep{echoC}}
	// two: endpoints on node2 and node3, none on the ingress node.
	svcTwo = svc{name: "two", annotated: true, nodePort: 30102, eps: []ep{echoA, echoB}}
	// plain: no annotation; must get no flows at all.
	svcPlain = svc{name: "plain", annotated: false, nodePort: 30103, eps: []ep{echoA}}
)

func baseServices() string {
	return svcRemote.yaml() + svcLocal.yaml() + svcTwo.yaml() + svcPlain.yaml()
}

// writeManifest writes (or with content "" removes) one file of the watched manifests directory.
func writeManifest(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if content == "" {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// waitOK retries a request until it succeeds (the agents program flows asynchronously): for a
// Service that is being programmed, not for one that must keep working (okNow).
func waitOK(t *testing.T, proto, addr string) lab.Reply {
	t.Helper()
	var r lab.Reply
	err := lab.WaitFor(func() error {
		var err error
		r, err = theLab.Request("", proto, addr)
		return err
	}, 20*time.Second)
	if err != nil {
		t.Fatalf("%s %s never answered: %v", proto, addr, err)
	}
	return r
}

// okNow is the probe of "keeps working": no outage tolerated, the request is answered at the first
// try (within the echo client's 3 s timeout).
func okNow(t *testing.T, proto, addr string) lab.Reply {
	t.Helper()
	r, err := theLab.Request("", proto, addr)
	if err != nil {
		t.Fatalf("%s %s did not answer at the first try: %v", proto, addr, err)
	}
	return r
}
