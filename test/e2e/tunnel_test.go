package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// injectBin builds test/inject (a raw-socket Geneve packet writer) once per test binary.
var injectBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "srcip-inject")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "inject")
	if b, err := exec.Command("go", "build", "-o", bin, "../inject").CombinedOutput(); err != nil {
		return "", &exec.ExitError{Stderr: b}
	}
	return bin, nil
})

// inject sends Geneve packets from the netns of from (see test/inject for the flags).
func inject(t *testing.T, from string, args ...string) {
	t.Helper()
	bin, err := injectBin()
	require.NoError(t, err, "build test/inject")
	out, err := theLab.Exec(from, append([]string{bin}, args...)...)
	require.NoError(t, err, out)
	t.Log(strings.TrimSpace(out))
}

// dropCount returns n_packets of node's br-ex flow that drops Geneve from unknown sources
// (ExClassifier, priority 600).
func dropCount(t *testing.T, node string) int {
	t.Helper()
	out, err := theLab.DumpFlows(node, "br-ex", "table=0,udp,tp_dst=6081")
	require.NoError(t, err)
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "priority=600") && strings.Contains(l, "actions=drop") {
			m := regexp.MustCompile(`n_packets=(\d+)`).FindStringSubmatch(l)
			require.NotNil(t, m, l)
			n, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			return n
		}
	}
	t.Errorf("no Geneve drop flow on %s br-ex:\n%s", node, out)
	return -1
}

// Issue "only nodes may tunnel": an outside host behind the router sends Geneve to node1 for every
// VNI (and a made-up node address) with an inner SYN to node1's pod echo-c. Nothing reaches the
// pod, nothing is tunnelled back to the host, and node1's drop flow counts every packet. Positive
// control: the same packet with the source of a known node (node2) does reach the pod, so the
// injector works and it is the source that is refused; the pod's answer then goes to node2 (the
// recorded ingress node), never to the sender.
func TestOnlyNodesMayTunnel(t *testing.T) {
	addr := "192.0.2.11:30101" // svcLocal: node1 has its flows once it answers
	checkReply(t, waitOK(t, "tcp", addr), addr, "echo-c")
	pod := capture(t, "echo-c", "eth0", "tcp port 8080 and host 198.51.100.66")
	back := capture(t, "client", "eth0", "dst host 198.51.100.10 and udp port 6081")
	before := dropCount(t, "node1")
	pkt := []string{"--dst", "192.0.2.11", "--inner-src", "198.51.100.66:41000", "--inner-dst", echoC.ip + ":8080"}
	for _, vni := range []string{"1", "2", "3", "7"} {
		inject(t, "client", append([]string{"--vni", vni}, pkt...)...)
	}
	inject(t, "client", append([]string{"--vni", "2", "--src", "192.0.2.99"}, pkt...)...)
	assert.Eventually(t, func() bool { return before >= 0 && dropCount(t, "node1")-before >= 5 }, 5*time.Second, 100*time.Millisecond,
		"node1's Geneve drop flow must count the 5 injected packets")
	assert.Empty(t, pod(), "a Geneve packet from outside the cluster reached the pod")
	assert.Empty(t, back(), "something was sent back to the outside host")

	// Positive control: spoofing a known node's address gets the packet to the pod; the answer
	// goes to that node (which drops it: it holds no such connection), not to the sender.
	pod = capture(t, "echo-c", "eth0", "tcp port 8080 and host 198.51.100.66")
	back = capture(t, "client", "eth0", "dst host 198.51.100.10 and udp port 6081")
	inject(t, "client", append([]string{"--vni", "2", "--src", "192.0.2.12"}, pkt...)...)
	seen := pod()
	assert.NotEmpty(t, seen, "positive control: the injected SYN with a node's source must reach the pod")
	assert.Empty(t, back(), "the pod's answer must not reach the sender")
}

// Issue "a tunnel packet must never change the state of a connection that already exists": a UDP
// exchange through node1 to echo-a on node2 records node1 as the ingress node in node2's ZonePod
// entry (ct_label 0xc000020b). A datagram of the same 5-tuple injected by Geneve with node3's
// address as source reaches the pod (the connection exists) but leaves the recorded ingress node
// unchanged, and the exchange keeps working through node1.
func TestTunnelPacketKeepsRecordedIngressNode(t *testing.T) {
	addr := "192.0.2.11:31100" // svcRemote's UDP NodePort, endpoint echo-a on node2
	const port = 41234
	req := func() lab.Reply {
		var r lab.Reply
		require.NoError(t, lab.WaitFor(func() error {
			var err error
			r, err = theLab.RequestWith("", "udp", addr, lab.RequestOpts{LocalPort: port})
			return err
		}, 20*time.Second))
		return r
	}
	checkReply(t, req(), addr, "echo-a")
	entry := regexp.MustCompile(`src=198\.51\.100\.10,dst=10\.244\.2\.5,sport=` + strconv.Itoa(port) + `,dport=8080.*labels=(0x[0-9a-f]+)`)
	label := func() string {
		ct, err := theLab.Appctl("node2", "dpctl/dump-conntrack", "zone="+zonePod)
		require.NoError(t, err)
		m := entry.FindStringSubmatch(ct)
		require.NotNil(t, m, "node2's ZonePod entry of the exchange:\n%s", ct)
		return m[1]
	}
	require.Equal(t, "0xc000020b", label(), "node1 (192.0.2.11) recorded as the ingress node")
	pod := capture(t, "echo-a", "eth0", "udp and src port "+strconv.Itoa(port))
	inject(t, "client", "--src", "192.0.2.13", "--dst", "192.0.2.12", "--vni", "2", "--proto", "udp",
		"--inner-src", "198.51.100.10:"+strconv.Itoa(port), "--inner-dst", echoA.ip+":8080")
	got := pod()
	assert.NotEmpty(t, got, "the injected datagram of the existing connection reaches the pod (so its conntrack entry was looked up)")
	assert.Equal(t, "0xc000020b", label(), "the injected packet must not change the recorded ingress node")
	checkReply(t, req(), addr, "echo-a")
}
