package e2e

// kubernetes#74839 ("[sig-network] Conntrack proxy implementation should not be vulnerable to the
// invalid conntrack state bug"): a client pod's connection to a ClusterIP (DNATed by its node's
// host, as kube-proxy does) whose backend then sends an out-of-window segment. That segment is
// conntrack-invalid; had it reached the client with the backend's own address as source (past
// the host's un-DNAT), the client's kernel would answer it with a RST and the backend's
// connection would die.

import (
	"bufio"
	"fmt"
	"os/exec"
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

// boomInjector does what the upstream test's boom server (agnhost's regression-issue-74839)
// does, from the backend's network namespace: it watches the TCP segments that arrive for
// argv[2] (port) from argv[1] (the client's address) on a raw socket; on the first one that
// carries data it sends the client, from the connection's own 4-tuple, a PSH+ACK with the payload
// "boom!!!" whose sequence number is 100000 before what the client acknowledged (far out of the
// window) and prints "boom". Then, for argv[3] seconds, it prints "rst" for every RST the client
// sends to the port, and "done" at the end.
const boomInjector = `
import select, socket, struct, sys, time
client, port, watch = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
def csum(b):
    if len(b) % 2:
        b += b"\0"
    v = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    v = (v >> 16) + (v & 0xffff)
    v += v >> 16
    return ~v & 0xffff
print("ready", flush=True)
end = None
while end is None or time.time() < end:
    r, _, _ = select.select([s], [], [], 0.1)
    if not r:
        continue
    pkt, addr = s.recvfrom(65535)
    ihl = (pkt[0] & 0x0f) * 4
    src, dst = socket.inet_ntoa(pkt[12:16]), socket.inet_ntoa(pkt[16:20])
    sport, dport, seq, ack, off, flags, win = struct.unpack("!HHIIBBH", pkt[ihl:ihl + 16])
    if src != client or dport != port:
        continue
    if flags & 0x04:
        print("rst", flush=True)
        continue
    plen = len(pkt) - ihl - (off >> 4) * 4
    if end is None and flags & 0x10 and plen > 0:
        data = b"boom!!!"
        h = struct.pack("!HHIIBBHHH", dport, sport, (ack - 100000) & 0xffffffff, (seq + plen) & 0xffffffff, 5 << 4, 0x18, win, 0, 0)
        c = csum(socket.inet_aton(dst) + socket.inet_aton(src) + struct.pack("!BBH", 0, 6, len(h) + len(data)) + h + data)
        s.sendto(h[:16] + struct.pack("!H", c) + h[18:] + data, (src, 0))
        print("boom", flush=True)
        end = time.time() + watch
print("done", flush=True)
`

// invalidDropMatch is how dump-flows prints the match of the invalid-segment drop flows
// (flows.invalidSegment).
const invalidDropMatch = "ct_state=+inv+trk,tcp,tcp_flags=-fin-syn-rst+ack actions=drop"

// flowPackets returns n_packets of node's br-int flows in table whose text contains match.
func flowPackets(t *testing.T, node string, table int, match string) int {
	t.Helper()
	out, err := theLab.DumpFlows(node, "br-int", "table="+strconv.Itoa(table))
	require.NoError(t, err)
	n, found := 0, false
	re := regexp.MustCompile(`n_packets=(\d+)`)
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, match) {
			continue
		}
		if m := re.FindStringSubmatch(l); m != nil {
			v, _ := strconv.Atoi(m[1])
			n += v
			found = true
		}
	}
	require.True(t, found, "no flow %q in %s's br-int table %d:\n%s", match, node, table, out)
	return n
}

// The backend's out-of-window segment never reaches the client pod untranslated: for a backend
// on another node it is dropped where it comes out of the tunnel (IntTunnelCT), for one on the
// same node where it leaves the backend (IntPodEgressCT). The client sends no RST, and the
// connection keeps exchanging data after it.
func TestInvalidSegmentNeverReachesClientPod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend ep
		vip     string
		table   int // node1's table that drops the segment
	}{
		{"backend-on-other-node", echoA, "10.96.74.1", 51},
		{"backend-on-same-node", echoD, "10.96.74.2", 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			startLineServerIn(t, tc.backend.pod)
			dnat(t, "node1", tc.vip, 80, tc.backend.ip, streamPort)
			addr := tc.vip + ":80"
			require.NoError(t, lab.WaitFor(func() error {
				c, err := dialLine("echo-c", addr, 0, time.Second)
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = c.Send("probe")
				return err
			}, 20*time.Second), "echo-c -> %s", addr)

			c := mustDial(t, "echo-c", addr, 0, 3*time.Second)
			r, err := c.Send("hello")
			require.NoError(t, err)
			require.Contains(t, r, fmt.Sprintf("%s %s:%d hello", tc.backend.pod, echoC.ip, c.Local), "the backend sees the client pod")

			boom := startBoom(t, tc.backend.pod, echoC.ip, streamPort, 2*time.Second)
			leaked := capture(t, "echo-c", "eth0", "tcp and src host "+tc.backend.ip)
			drops := flowPackets(t, "node1", tc.table, invalidDropMatch)

			r, err = c.Send("before")
			require.NoError(t, err)
			assert.Contains(t, r, "before")
			require.Equal(t, "boom", boom.next(t, 5*time.Second), "the injector saw no data segment of the client")
			time.Sleep(500 * time.Millisecond)
			r, err = c.Send("after")
			require.NoError(t, err, "the connection did not survive the out-of-window segment")
			assert.Contains(t, r, fmt.Sprintf("%s %s:%d after", tc.backend.pod, echoC.ip, c.Local))

			var rsts int
			for l := boom.next(t, 5*time.Second); l != "done"; l = boom.next(t, 5*time.Second) {
				if l == "rst" {
					rsts++
				}
			}
			assert.Zero(t, rsts, "the backend received RSTs from the client")
			assert.Empty(t, leaked(), "the client pod received a segment from the backend's own address (not un-DNATed)")
			d := flowPackets(t, "node1", tc.table, invalidDropMatch) - drops
			t.Logf("%s on %s: the out-of-window segment was dropped by node1's table %d (%d packet(s)); no RST, the connection answers after it",
				tc.backend.pod, tc.backend.node, tc.table, d)
			assert.GreaterOrEqual(t, d, 1, "node1's invalid-segment drop flow in table %d did not count the segment", tc.table)
		})
	}
}

// dnat DNATs vip:port (TCP) to ep:epPort on node's host, as kube-proxy does for a ClusterIP, in
// its own nft table, removed at the end of the test.
func dnat(t *testing.T, node, vip string, port int, ep string, epPort int) {
	t.Helper()
	table := "e2e-dnat-" + strings.ReplaceAll(vip, ".", "-")
	rules := fmt.Sprintf("table ip %s {\n\tchain prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n"+
		"\t\tip daddr %s tcp dport %d dnat to %s:%d\n\t}\n}\n", table, vip, port, ep, epPort)
	ns, err := theLab.Netns(node)
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "ip", table).CombinedOutput(); err != nil {
			t.Errorf("delete nft table %s on %s: %v %s", table, node, err, out)
		}
	})
}

type boomProc struct{ lines chan string }

func (b *boomProc) next(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-b.lines:
		if !ok {
			t.Fatal("the boom injector exited")
		}
		return l
	case <-time.After(d):
		t.Fatalf("no line from the boom injector within %s", d)
		return ""
	}
}

// startBoom runs boomInjector in pod's netns for the test's lifetime.
func startBoom(t *testing.T, pod, client string, port int, watch time.Duration) *boomProc {
	t.Helper()
	ns, err := theLab.Netns(pod)
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, "python3", "-c", boomInjector, client, strconv.Itoa(port),
		strconv.FormatFloat(watch.Seconds(), 'f', 1, 64))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	b := &boomProc{lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
		close(b.lines)
	}()
	require.Equal(t, "ready", b.next(t, 5*time.Second))
	return b
}
