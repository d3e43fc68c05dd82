package e2e

// Entry points and the host stack (docs/security.md, "Entry points and the host stack";
// docs/field-cases.md#c31): packets of a DNATed connection never reach the ingress node's host
// stack, and br-ex keeps forwarding for ports the agent does not own.
//
// The tests use long-lived connections to a line server (python3, no third-party modules) in
// echo-a's network namespace on port 9090, behind the Service e2e/stream (NodePort 30420, LB IP
// 203.0.113.170, endpoint echo-a on node2).

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

const (
	streamNodePort = 30420
	streamLBIP     = "203.0.113.170"
	streamPort     = 9090
)

// streamService is e2e/stream: TCP port 80 -> 9090 on echo-a (node2), NodePort 30420, LB IP
// 203.0.113.170.
func streamService() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: stream
  namespace: e2e
  annotations:
    ovs-srcip.io/preserve-source-ip: "true"
spec:
  type: LoadBalancer
  externalTrafficPolicy: Cluster
  ports:
  - {name: line, protocol: TCP, port: 80, targetPort: %[1]d, nodePort: %[2]d}
status:
  loadBalancer:
    ingress:
    - ip: %[3]s
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: stream-x1
  namespace: e2e
  labels: {kubernetes.io/service-name: stream}
addressType: IPv4
ports:
- {name: line, protocol: TCP, port: %[1]d}
endpoints:
- addresses: [%[4]s]
  nodeName: %[5]s
  conditions: {ready: true, serving: true, terminating: false}
---
`, streamPort, streamNodePort, streamLBIP, echoA.ip, echoA.node)
}

// lineServer answers every line of every connection with "<name> <peer ip:port> <line>".
const lineServer = `
import socket, sys, threading
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1])))
srv.listen(64)
name = sys.argv[2]
def serve(c, a):
    f = c.makefile("rb")
    try:
        for line in f:
            c.sendall(("%s %s:%d %s\n" % (name, a[0], a[1], line.decode().strip())).encode())
    except Exception:
        pass
    c.close()
print("ready", flush=True)
while True:
    c, a = srv.accept()
    threading.Thread(target=serve, args=(c, a), daemon=True).start()
`

// lineClient connects (from a fixed local port when argv[3] is not 0), prints "connected <port>",
// then for every stdin line sends it and prints the answer or "ERROR <reason>".
const lineClient = `
import socket, sys
v6 = ":" in sys.argv[1]
s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::" if v6 else "0.0.0.0", int(sys.argv[3])))
s.settimeout(float(sys.argv[4]))
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
except Exception as e:
    print("ERROR connect", type(e).__name__, e, flush=True)
    sys.exit(0)
print("connected", s.getsockname()[1], flush=True)
f = s.makefile("rb")
for line in sys.stdin:
    try:
        s.sendall(line.encode())
        r = f.readline().decode().strip()
        print(r if r else "ERROR EOF", flush=True)
    except Exception as e:
        print("ERROR", type(e).__name__, e, flush=True)
`

// injectACKs sends argv[5] bare ACKs with random sequence and acknowledgment numbers (far outside
// any window) from argv[1]:argv[3] to argv[2]:argv[4] through a raw socket.
const injectACKs = `
import random, socket, struct, sys
src, dst, sport, dport, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
def csum(b):
    if len(b) % 2:
        b += b"\0"
    v = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    v = (v >> 16) + (v & 0xffff)
    v += v >> 16
    return ~v & 0xffff
for i in range(n):
    h = struct.pack("!HHIIBBHHH", sport, dport, random.getrandbits(32), random.getrandbits(32), 5 << 4, 0x10, 65535, 0, 0)
    c = csum(socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, len(h)) + h)
    s.sendto(h[:16] + struct.pack("!H", c) + h[18:], (dst, 0))
print("sent", n, flush=True)
`

// startLineServer runs lineServer in echo-a's netns for the test's lifetime.
func startLineServer(t *testing.T) { startLineServerIn(t, echoA.pod) }

// startLineServerIn runs lineServer on streamPort in pod's netns for the test's lifetime.
func startLineServerIn(t *testing.T, pod string) {
	t.Helper()
	ns, err := theLab.Netns(pod)
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, "python3", "-c", lineServer, strconv.Itoa(streamPort), pod)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	ready := make(chan string, 1)
	go func() { l, _ := bufio.NewReader(out).ReadString('\n'); ready <- l }()
	select {
	case l := <-ready:
		require.Equal(t, "ready\n", l)
	case <-time.After(5 * time.Second):
		t.Fatal("line server did not start")
	}
}

// withStreamService installs e2e/stream and its line server and waits until the NodePort answers.
func withStreamService(t *testing.T) {
	t.Helper()
	startLineServer(t)
	writeManifest(t, "entry-stream.yaml", streamService())
	t.Cleanup(func() { removeStreamService(t) })
	waitLineAnswers(t, fmt.Sprintf("192.0.2.11:%d", streamNodePort))
}

// waitLineAnswers waits (at most 20 s) until a line sent to addr from the client is answered.
func waitLineAnswers(t *testing.T, addr string) {
	t.Helper()
	require.NoError(t, lab.WaitFor(func() error {
		c, err := dialLine("client", addr, 0, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Send("probe")
		return err
	}, 20*time.Second))
}

// removeStreamService removes e2e/stream and, so that no drain flow set of its TCP entry points
// outlives the test (docs/field-cases.md#c01: a drain lasts while ZoneService holds a live
// connection to the entry point, e.g. one a test moved to another node or left half-open), flushes
// every node's ZoneService entries to them, then waits until no br-ex flow mentions them.
func removeStreamService(t *testing.T) {
	t.Helper()
	writeManifest(t, "entry-stream.yaml", "")
	tokens := []string{"nw_dst=" + streamLBIP, fmt.Sprintf("tp_dst=%d", streamNodePort)}
	err := lab.WaitFor(func() error {
		for _, n := range theLab.Nodes {
			for _, orig := range []string{
				fmt.Sprintf("ct_nw_dst=%s,ct_nw_proto=6", streamLBIP),
				fmt.Sprintf("ct_nw_dst=%s,ct_nw_proto=6,ct_tp_dst=%d", n.IP, streamNodePort),
			} {
				if _, err := theLab.Appctl(n.Name, "dpctl/flush-conntrack", "zone=64256", orig); err != nil {
					return err
				}
			}
			out, err := theLab.DumpFlows(n.Name, "br-ex")
			if err != nil {
				return err
			}
			for _, tok := range tokens {
				if strings.Contains(out, tok) {
					return fmt.Errorf("%s still has flows with %s", n.Name, tok)
				}
			}
		}
		return nil
	}, 20*time.Second)
	if err != nil {
		t.Errorf("cleanup of e2e/stream: %v", err)
	}
}

// lineConn is one long-lived client connection (a python3 process in a client netns).
type lineConn struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	Local int // the client's local port
}

// dialLine connects from netns (a lab name) to addr, from localPort (0: ephemeral); every Send
// waits at most timeout for the answer.
func dialLine(netns, addr string, localPort int, timeout time.Duration) (*lineConn, error) {
	ns, err := theLab.Netns(netns)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(addr) // host:port or [IPv6]:port
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "python3", "-c", lineClient, host, port,
		strconv.Itoa(localPort), strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64))
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &lineConn{cmd: cmd, in: in, lines: make(chan string, 16)}
	go func() {
		br := bufio.NewReader(out)
		for {
			l, err := br.ReadString('\n')
			if l != "" {
				c.lines <- strings.TrimSpace(l)
			}
			if err != nil {
				close(c.lines)
				return
			}
		}
	}()
	first, err := c.next(timeout + 2*time.Second)
	if err != nil || !strings.HasPrefix(first, "connected ") {
		c.Close()
		return nil, fmt.Errorf("connect %s from %s: %q %v", addr, netns, first, err)
	}
	c.Local, _ = strconv.Atoi(strings.TrimPrefix(first, "connected "))
	return c, nil
}

func (c *lineConn) next(d time.Duration) (string, error) {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "", io.EOF
		}
		return l, nil
	case <-time.After(d):
		return "", fmt.Errorf("no answer within %s", d)
	}
}

// Send sends one line and returns the server's answer; an "ERROR ..." from the client (reset,
// timeout, EOF) is returned as an error.
func (c *lineConn) Send(msg string) (string, error) {
	if _, err := io.WriteString(c.in, msg+"\n"); err != nil {
		return "", err
	}
	l, err := c.next(30 * time.Second)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(l, "ERROR") {
		return "", fmt.Errorf("%s", l)
	}
	return l, nil
}

// Close ends the client process (its connection is closed by the kernel).
func (c *lineConn) Close() {
	c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// mustDial is dialLine that fails the test.
func mustDial(t *testing.T, netns, addr string, localPort int, timeout time.Duration) *lineConn {
	t.Helper()
	c, err := dialLine(netns, addr, localPort, timeout)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// Field case C31 (docs/field-cases.md#c31): out-of-window ACKs injected on a live connection's
// 4-tuple are conntrack-invalid in ZoneService. They must never reach node1's host stack (LOCAL,
// the br-ex interface) nor leave node1's uplink towards a pod address; br-ex sends them on
// through the existing NAT and the endpoint's node (node2), which finds them invalid in ZonePod
// too, drops them. The client gets no RST and the connection keeps exchanging data.
func TestC31InvalidSegmentsNeverReachHost(t *testing.T) {
	withStreamService(t)
	addr := fmt.Sprintf("192.0.2.11:%d", streamNodePort)
	c := mustDial(t, "client", addr, 0, 3*time.Second)
	r, err := c.Send("before")
	require.NoError(t, err)
	require.Contains(t, r, fmt.Sprintf("echo-a %s:%d before", clientIP, c.Local))

	// IntPodIngressCT's default flow drops what ZonePod holds invalid (and nothing else reaches
	// it in this test: every other packet is +new, +est or +rel).
	backendDrops := func() int {
		out, err := theLab.DumpFlows("node2", "br-int", "table=66")
		require.NoError(t, err)
		n := -1
		for _, l := range strings.Split(out, "\n") {
			if !strings.Contains(l, "priority=0 actions=drop") {
				continue
			}
			for _, f := range strings.FieldsFunc(l, func(r rune) bool { return r == ',' || r == ' ' }) {
				if v, ok := strings.CutPrefix(f, "n_packets="); ok {
					n, _ = strconv.Atoi(v)
				}
			}
		}
		require.GreaterOrEqual(t, n, 0, "no ZonePod invalid-drop flow on node2:\n%s", out)
		return n
	}
	dropsBefore := backendDrops()
	port := fmt.Sprintf("tcp port %d", c.Local)
	host := capture(t, "node1", "br-ex", "tcp and host "+clientIP+" and "+port)
	toPods := capture(t, "node1", "eth0", "tcp and dst net 10.244.0.0/16")
	rsts := capture(t, "client", "eth0", "tcp[tcpflags] & tcp-rst != 0 and "+port)
	out, err := theLab.Exec("client", "python3", "-c", injectACKs, clientIP, "192.0.2.11",
		strconv.Itoa(c.Local), strconv.Itoa(streamNodePort), "20")
	require.NoError(t, err, out)
	time.Sleep(500 * time.Millisecond)
	r, err = c.Send("after")
	require.NoError(t, err, "the connection did not survive the injected segments")
	assert.Contains(t, r, "after")
	assert.Empty(t, host(), "node1's host stack (LOCAL) saw packets of the DNATed connection")
	assert.Empty(t, toPods(), "node1 sent a packet towards a pod address out of its uplink")
	assert.Empty(t, rsts(), "the client received a RST")
	drops := backendDrops() - dropsBefore
	t.Logf("node2 (echo-a's node) dropped %d of the 20 injected segments as ZonePod-invalid", drops)
	assert.GreaterOrEqual(t, drops, 15, "the injected segments were not dropped by the endpoint's node")
}

// routeVia points the router's route for ip/32 at node (a lab node name) until the test ends: a
// route change that moves the client's established connections to another ingress node.
func routeVia(t *testing.T, ip, node string) {
	t.Helper()
	_, err := theLab.Exec("router", "ip", "route", "replace", ip+"/32", "via", theLab.Node(node).IP.String())
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = theLab.Exec("router", "ip", "route", "del", ip+"/32") })
}

// An established connection to a LoadBalancer IP whose route moves from node1 to node2 (which
// holds no ZoneService state for it) continues on node2: node2 picks the mid-stream segment up,
// its select group chooses the same endpoint (same hash, same sorted buckets), and echo-a's node
// keeps the replies on node1 (still live), which un-DNATs them. The backend sees the same client
// ip:port throughout. Moving the route back to node1 after 3 MB went through node2 continues on
// node1's entry, which is still there but out of date: node1 finds the segments invalid and sends
// them on through its NAT, the backend finds them valid and delivers them, and node1 passes the
// replies it finds invalid but un-DNATs (+inv+snat) to the client.
func TestEntryRouteChangeContinuesOnNewIngressNode(t *testing.T) {
	withStreamService(t)
	c := mustDial(t, "client", streamLBIP+":80", 0, 3*time.Second)
	want := fmt.Sprintf("echo-a %s:%d", clientIP, c.Local)
	r, err := c.Send("via-node1")
	require.NoError(t, err)
	require.Equal(t, want+" via-node1", r)

	routeVia(t, streamLBIP, "node2")
	start := time.Now()
	r, err = c.Send("via-node2")
	require.NoError(t, err, "the connection hung or was reset after its route moved to node2")
	assert.Equal(t, want+" via-node2", r)
	assert.Less(t, time.Since(start), 3*time.Second, "continuing on node2 took too long")
	ct, err := theLab.Appctl("node2", "dpctl/dump-conntrack", "zone=64256")
	require.NoError(t, err)
	assert.Contains(t, ct, fmt.Sprintf("sport=%d", c.Local), "node2 holds no ZoneService entry for the moved connection")

	// 3 MB each way through node2: node1's ZoneService entry falls far behind the connection's
	// sequence numbers (its segments become +inv there, docs/field-cases.md#c31).
	big := strings.Repeat("x", 300000)
	for i := 0; i < 10; i++ {
		r, err = c.Send(big)
		require.NoError(t, err)
		require.True(t, strings.HasSuffix(r, " "+big), "a 300 kB line via node2 came back wrong")
	}

	_, err = theLab.Exec("router", "ip", "route", "del", streamLBIP+"/32")
	require.NoError(t, err)
	start = time.Now()
	r, err = c.Send("back-on-node1")
	require.NoError(t, err, "the connection did not survive the route moving back to node1")
	assert.Equal(t, want+" back-on-node1", r)
	assert.Less(t, time.Since(start), 3*time.Second, "continuing on node1 again took too long")
}

// An established connection to a NodePort whose ZoneService entry is gone on the ingress node
// (conntrack flushed, as after a datapath restart) gets a prompt RST from the node's host stack
// (a mid-stream segment to the node's own address is never picked up, C16), not a silent hang.
func TestEntryNodePortWithoutConnectionIsReset(t *testing.T) {
	withStreamService(t)
	c := mustDial(t, "client", fmt.Sprintf("192.0.2.11:%d", streamNodePort), 0, 5*time.Second)
	_, err := c.Send("first")
	require.NoError(t, err)
	out, err := theLab.Appctl("node1", "dpctl/flush-conntrack", "zone=64256",
		fmt.Sprintf("ct_nw_src=%s,ct_nw_proto=6,ct_tp_src=%d", clientIP, c.Local))
	require.NoError(t, err, out)
	start := time.Now()
	_, err = c.Send("second")
	require.Error(t, err, "a connection node1 no longer tracks kept working through the host")
	assert.Contains(t, err.Error(), "ConnectionResetError", "expected a RST, got %v", err)
	assert.Less(t, time.Since(start), 2*time.Second, "the RST took too long")
}

// The same client ip:port reaches one endpoint through two ingress nodes (node1's and node3's
// NodePort): the pod would see one 4-tuple for two connections, which no TCP stack can hold. The
// first connection must keep working and keep its replies on node1 (committing the second's SYN
// re-pointed them to node3: ct_label 0xc000020d measured before the guard); the second is refused
// promptly: echo-a's node sends its SYN to the pod's port 0 and the pod's RST back through node3
// (docs/security.md, "Entry points and the host stack").
func TestEntrySameClientPortTwoIngressNodesKeepsFirst(t *testing.T) {
	withStreamService(t)
	// node3's NodePort answers (its flows are in, the router knows node3's MAC): the time below
	// is the refusal's alone.
	waitLineAnswers(t, fmt.Sprintf("192.0.2.13:%d", streamNodePort))
	const lport = 45420
	a := mustDial(t, "client", fmt.Sprintf("192.0.2.11:%d", streamNodePort), lport, 3*time.Second)
	r, err := a.Send("a1")
	require.NoError(t, err)
	require.Contains(t, r, fmt.Sprintf(":%d a1", lport))
	start := time.Now()
	b, berr := dialLine("client", fmt.Sprintf("192.0.2.13:%d", streamNodePort), lport, 3*time.Second)
	var bres string
	if berr == nil {
		defer b.Close()
		bres, berr = b.Send("b1")
	}
	took := time.Since(start)
	t.Logf("second connection (same client ip:port, via node3): %q, %v after %s", bres, berr, took.Round(time.Millisecond))
	require.Error(t, berr, "the second connection cannot be served")
	assert.Contains(t, berr.Error(), "ConnectionRefusedError", "the second connection must be refused (RST), not black-holed")
	// OVS installs the flow the first SYN learns after that SYN's own actions ran: the pod's
	// first RST finds no flow yet and is dropped; the client's SYN retransmission (1 s) is
	// refused.
	assert.Less(t, took, 2500*time.Millisecond, "the refusal took too long")
	// echo-a's node still sends the first connection's replies to node1 (ct_label = 192.0.2.11):
	// the second connection's SYNs did not re-point them to node3.
	ct, err := theLab.Appctl("node2", "dpctl/dump-conntrack", "zone=64257")
	require.NoError(t, err)
	found := false
	for _, l := range strings.Split(ct, "\n") {
		if strings.Contains(l, fmt.Sprintf("sport=%d,dport=%d", lport, streamPort)) {
			found = true
			assert.Contains(t, l, "labels=0xc000020b,", "the first connection's replies were re-pointed away from node1")
		}
	}
	assert.True(t, found, "no ZonePod entry for the first connection on node2:\n%s", ct)
	for _, m := range []string{"a2", "a3"} {
		r, err = a.Send(m)
		require.NoError(t, err, "the first connection was disturbed by the second")
		assert.Contains(t, r, fmt.Sprintf("echo-a %s:%d %s", clientIP, lport, m))
	}
}

// addVM adds a "VM" to node1's br-ex: a netns <prefix>-vm with 192.0.2.50/24 (MAC
// 02:00:00:00:00:50, default route via the router) on a veth whose other end is an extra port of
// br-ex, which the agent does not own. It returns the netns and a function that runs a command
// (failing the test on error). Everything is removed when the test ends.
func addVM(t *testing.T) (vmNS string, run func(argv ...string)) {
	t.Helper()
	vmNS, tap := theLab.Prefix+"-vm", theLab.Prefix+"vm"
	node1, err := theLab.Netns("node1")
	require.NoError(t, err)
	run = func(argv ...string) {
		t.Helper()
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", argv, out)
	}
	run("ip", "netns", "add", vmNS)
	t.Cleanup(func() {
		_, _ = theLab.Vsctl("node1", "--if-exists", "del-port", "br-ex", tap)
		// Deleting the veth now (the netns' own teardown is asynchronous) frees its name.
		_ = exec.Command("ip", "-n", node1, "link", "del", tap).Run()
		_ = exec.Command("ip", "netns", "del", vmNS).Run()
	})
	run("ip", "netns", "exec", vmNS, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1") // docs/lab-facts.md#pitfall-7
	run("ip", "link", "add", "name", tap, "netns", node1, "type", "veth", "peer", "name", "eth0", "netns", vmNS)
	run("ip", "-n", vmNS, "link", "set", "eth0", "address", "02:00:00:00:00:50")
	run("ip", "-n", vmNS, "addr", "add", "192.0.2.50/24", "dev", "eth0")
	run("ip", "-n", vmNS, "link", "set", "eth0", "up")
	run("ip", "-n", vmNS, "link", "set", "lo", "up")
	run("ip", "-n", vmNS, "route", "add", "default", "via", "192.0.2.1")
	run("ip", "-n", node1, "link", "set", tap, "up")
	run("ip", "netns", "exec", vmNS, "ethtool", "-K", "eth0", "tx", "off") // docs/lab-facts.md#pitfall-1
	run("ip", "netns", "exec", node1, "ethtool", "-K", tap, "tx", "off")
	_, err = theLab.Vsctl("node1", "add-port", "br-ex", tap)
	require.NoError(t, err)
	return vmNS, run
}

// vmPing pings dst once from the VM.
func vmPing(vmNS, dst string) error {
	out, err := exec.Command("ip", "netns", "exec", vmNS, "ping", "-c", "1", "-W", "1", dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s: %v: %s", dst, err, out)
	}
	return nil
}

// Point 6 of issue 7: br-ex stays usable for ports the agent does not own. A "VM" on an extra port
// of node1's br-ex (addVM) reaches the external client through the uplink and the router, and
// node1's host, through br-ex's default NORMAL forwarding; the Service entry points on node1 keep
// working meanwhile. Without the NORMAL default (ExClassifier ended in a drop, and sent everything
// from the uplink to LOCAL) the VM reaches nothing.
func TestBrExForeignPortKeepsNormalForwarding(t *testing.T) {
	vmNS, run := addVM(t)
	for _, dst := range []string{clientIP, "192.0.2.11", "192.0.2.1"} {
		err := lab.WaitFor(func() error { return vmPing(vmNS, dst) }, 10*time.Second)
		assert.NoError(t, err, "the VM port on br-ex cannot reach %s", dst)
	}
	// The host reaches the VM too.
	out, err := theLab.Exec("node1", "ping", "-c", "1", "-W", "2", "192.0.2.50")
	assert.NoError(t, err, "node1's host cannot reach the VM: %s", out)
	// A frame NORMAL floods (here: to a MAC nobody has) also reaches the patch port to br-int;
	// br-int must not route it to a pod (echo-c, 10.244.1.5, on node1).
	run("ip", "-n", vmNS, "neigh", "replace", echoC.ip, "lladdr", "02:00:00:00:99:99", "dev", "eth0")
	run("ip", "-n", vmNS, "route", "add", echoC.ip+"/32", "dev", "eth0")
	pod := capture(t, echoC.pod, "eth0", "host 192.0.2.50")
	run("ip", "netns", "exec", vmNS, "python3", "-c",
		"import socket\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nfor i in range(3): s.sendto(b'x', ('"+echoC.ip+"', 8080))")
	assert.Empty(t, pod(), "a frame flooded by br-ex's NORMAL reached a pod through br-int")
	// The Service paths are unchanged.
	checkReply(t, waitOK(t, "tcp", "192.0.2.11:30100"), "192.0.2.11:30100", "echo-a")
	checkReply(t, waitOK(t, "tcp", "203.0.113.110:80"), "203.0.113.110:80", "echo-a")
	checkReply(t, waitOK(t, "tcp", "192.0.2.11:30101"), "192.0.2.11:30101", "echo-c")
}

// Field case C19 (docs/field-cases.md#c19) with br-ex's NORMAL default: node1's ovs-vswitchd
// restarts while its agent is down. Until the agent is back, br-ex (fail_mode=secure, as the
// lab's installer leaves it) has no flow at all and forwards nothing: neither the VM's traffic
// nor a request to an entry point reaches the host. The NORMAL flow comes back in the same bundle
// as the hooks, and then both work again.
func TestBrExNormalOnlyWithAgentFlowsAfterVswitchdRestart(t *testing.T) {
	vmNS, _ := addVM(t)
	require.NoError(t, lab.WaitFor(func() error { return vmPing(vmNS, clientIP) }, 10*time.Second))
	mode, err := theLab.Vsctl("node1", "get", "bridge", "br-ex", "fail_mode")
	require.NoError(t, err)
	require.Equal(t, "secure", strings.TrimSpace(mode), "the lab's installer leaves br-ex fail_mode=secure")

	require.NoError(t, theLab.StopAgent("node1"))
	agentBack := false
	t.Cleanup(func() {
		if !agentBack {
			_ = theLab.StartAgent("node1")
		}
	})
	hostSeen := capture(t, "node1", "br-ex", "tcp port 30100")
	require.NoError(t, theLab.RestartVswitchd("node1"))
	flowsOut, err := theLab.DumpFlows("node1", "br-ex")
	require.NoError(t, err)
	assert.NotContains(t, flowsOut, "cookie=", "br-ex has flows before the agent is back")
	assert.Error(t, vmPing(vmNS, clientIP), "br-ex forwarded the VM's traffic before the agent's flows were back")
	_, err = theLab.RequestWith("", "tcp", "192.0.2.11:30100", lab.RequestOpts{Timeout: "1s"})
	assert.Error(t, err, "the NodePort answered before the agent's flows were back")
	assert.Empty(t, hostSeen(), "the entry point's traffic reached node1's host before the agent's flows were back")

	require.NoError(t, theLab.StartAgent("node1"))
	agentBack = true
	require.NoError(t, lab.WaitFor(func() error { return vmPing(vmNS, clientIP) }, 20*time.Second),
		"the VM does not reach the client after the agent replayed its flows")
	checkReply(t, waitOK(t, "tcp", "192.0.2.11:30100"), "192.0.2.11:30100", "echo-a")
}

// Issue 7 point 3, the ingress node dies: an established connection to a LoadBalancer IP enters
// through node1 to echo-a on node2; then node1 goes down (its Node turns NotReady and its br-int
// drops everything that arrives by Geneve, so the replies node2 tunnels to it are lost) and the
// route moves to node3. node3 picks the connection up (same endpoint on every node) and, because
// the recorded ingress node is no longer live, node2 re-points the connection's replies to node3
// (ct_label = 192.0.2.13) instead of tunnelling them into the dead node: the connection continues.
// While node1 was Ready, nothing re-pointed it (TestTunnelPacketKeepsRecordedIngressNode,
// TestEntrySameClientPortTwoIngressNodesKeepsFirst).
func TestEntryIngressNodeDownConnectionMovesOn(t *testing.T) {
	withStreamService(t)
	c := mustDial(t, "client", streamLBIP+":80", 0, 3*time.Second)
	want := fmt.Sprintf("echo-a %s:%d", clientIP, c.Local)
	r, err := c.Send("via-node1")
	require.NoError(t, err)
	require.Equal(t, want+" via-node1", r)
	label := func() string {
		ct, err := theLab.Appctl("node2", "dpctl/dump-conntrack", "zone="+zonePod)
		require.NoError(t, err)
		m := regexp.MustCompile(fmt.Sprintf(`sport=%d,dport=%d.*labels=(0x[0-9a-f]+)`, c.Local, streamPort)).FindStringSubmatch(ct)
		require.NotNil(t, m, "node2's ZonePod entry of the connection:\n%s", ct)
		return m[1]
	}
	require.Equal(t, "0xc000020b", label(), "node1 (192.0.2.11) recorded as the ingress node")

	// node1 goes NotReady: node2's keep flow for connections entering through node1 goes away.
	nodesYAML := filepath.Join(dir, "nodes.yaml")
	orig, err := os.ReadFile(nodesYAML)
	require.NoError(t, err)
	down := strings.Replace(string(orig), "status: \"True\"", "status: \"Unknown\"", 1) // node1 is the first Node
	require.NotEqual(t, string(orig), down)
	writeManifest(t, "nodes.yaml", down)
	t.Cleanup(func() { writeManifest(t, "nodes.yaml", string(orig)) })
	require.NoError(t, lab.WaitFor(func() error {
		out, err := theLab.DumpFlows("node2", "br-int", "table=66")
		if err != nil {
			return err
		}
		if strings.Contains(out, "ct_label=0xc000020b/0xffffffff") {
			return fmt.Errorf("node2 still keeps replies on node1:\n%s", out)
		}
		return nil
	}, 20*time.Second))

	// node1's datapath stops taking anything from the tunnel: the replies node2 would still send
	// it are lost there.
	tun, err := theLab.Vsctl("node1", "get", "Interface", "srcip-geneve0", "ofport")
	require.NoError(t, err)
	tun = strings.TrimSpace(tun)
	_, err = theLab.Ofctl("node1", "add-flow", "br-int", "table=0,priority=65000,in_port="+tun+",actions=drop")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = theLab.Ofctl("node1", "--strict", "del-flows", "br-int", "table=0,priority=65000,in_port="+tun)
	})

	routeVia(t, streamLBIP, "node3")
	start := time.Now()
	r, err = c.Send("via-node3")
	require.NoError(t, err, "the connection stalled after its ingress node went down and its route moved to node3")
	assert.Equal(t, want+" via-node3", r)
	assert.Less(t, time.Since(start), 3*time.Second, "continuing on node3 took too long")
	assert.Equal(t, "0xc000020d", label(), "node2 did not re-point the replies to node3 (192.0.2.13)")
	for _, m := range []string{"again-1", "again-2"} {
		r, err = c.Send(m)
		require.NoError(t, err)
		assert.Equal(t, want+" "+m, r)
	}
}
