package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Issue 7 point 4: ICMP errors both ways and IP fragments (docs/security.md "ICMP and fragments").

// inNetns runs f on an OS thread switched into the network namespace of the lab name netns
// (a client, pod, node or "router"): sockets f creates belong to that namespace for their whole
// life, whichever thread later uses them.
func inNetns(t *testing.T, netns string, f func() error) error {
	t.Helper()
	ns, err := theLab.Netns(netns)
	require.NoError(t, err)
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	setns := func(fd uintptr) error {
		return unix.Setns(int(fd), unix.CLONE_NEWNET)
	}
	if err := setns(target.Fd()); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	ferr := f()
	if err := setns(orig.Fd()); err != nil {
		// Leave the thread locked: it dies with the goroutine instead of serving others.
		t.Fatalf("setns back: %v", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// icmpServices: "icmp-remote" and "icmp-local" have a TCP port that the echo pods answer (80 ->
// 8080, to know the flows are in place) and a UDP port to a closed pod port (53 -> 9), so the
// endpoint answers every datagram with ICMP port unreachable. "bulk" sends TCP 80 to port 8081 of
// echo-a (node2), where TestPMTUDAcrossHairpin listens.
func icmpServices() string {
	one := func(name string, tcpNP, udpNP int, target string, e ep) string {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: e2e\n", name)
		b.WriteString("  annotations:\n    ovs-srcip.io/preserve-source-ip: \"true\"\n")
		b.WriteString("spec:\n  type: NodePort\n  externalTrafficPolicy: Cluster\n  ports:\n")
		fmt.Fprintf(&b, "  - {name: http, protocol: TCP, port: 80, targetPort: %s, nodePort: %d}\n", target, tcpNP)
		if udpNP != 0 {
			fmt.Fprintf(&b, "  - {name: dns, protocol: UDP, port: 53, targetPort: 9, nodePort: %d}\n", udpNP)
		}
		fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-x1\n  namespace: e2e\n", name)
		fmt.Fprintf(&b, "  labels: {kubernetes.io/service-name: %s}\naddressType: IPv4\nports:\n", name)
		fmt.Fprintf(&b, "- {name: http, protocol: TCP, port: %s}\n", target)
		if udpNP != 0 {
			b.WriteString("- {name: dns, protocol: UDP, port: 9}\n")
		}
		fmt.Fprintf(&b, "endpoints:\n- addresses: [%s]\n  nodeName: %s\n  conditions: {ready: true, serving: true, terminating: false}\n---\n", e.ip, e.node)
		return b.String()
	}
	return one("icmp-remote", 30470, 31470, "8080", echoA) + one("icmp-local", 30471, 31471, "8080", echoC) +
		one("bulk", 30472, 0, "8081", echoA)
}

func withICMPServices(t *testing.T) {
	writeManifest(t, "icmp.yaml", icmpServices())
	t.Cleanup(func() { writeManifest(t, "icmp.yaml", "") })
	for _, c := range []struct{ addr, pod string }{{"192.0.2.11:30470", "echo-a"}, {"192.0.2.11:30471", "echo-c"}} {
		checkReply(t, waitOK(t, "tcp", c.addr), c.addr, c.pod)
	}
}

// The endpoint's ICMP port unreachable for a UDP datagram reaches the client from the address the
// client dialled, with the inner header un-DNATed (the NodePort, not the pod's port 9): for a
// remote endpoint (tunnelled back, VNI 3) and a local one.
func TestICMPErrorFromEndpointReachesClient(t *testing.T) {
	withICMPServices(t)
	for _, c := range []struct{ name, port string }{{"remote", "31470"}, {"local", "31471"}} {
		t.Run(c.name, func(t *testing.T) {
			stop := capture(t, "client", "eth0", "icmp")
			_, err := theLab.RequestWith("", "udp", "192.0.2.11:"+c.port, lab.RequestOpts{Timeout: "1s"})
			require.Error(t, err, "nothing listens on the endpoint's port 9")
			got := strings.Join(stop(), "\n")
			t.Log(got)
			assert.Contains(t, got, "IP 192.0.2.11 > 198.51.100.10: ICMP 192.0.2.11 udp port "+c.port+" unreachable",
				"the port unreachable must come from the NodePort address, about the NodePort")
			assert.NotContains(t, got, "10.244.", "no pod address may leak")
		})
	}
}

// PMTUD across the hairpin: the router's client-side link gets an MTU of 1300. The backend pod
// (echo-a on node2, MTU 1400) sends 1400-byte segments through node1 to the client; the router
// answers each with ICMP "fragmentation needed" (mtu 1300) to the NodePort address. node1 must
// un-DNAT it to the pod and tunnel it to node2, so the pod lowers its path MTU and the 1 MB
// download completes.
func TestPMTUDAcrossHairpin(t *testing.T) {
	withICMPServices(t)
	const size = 1 << 20
	// The bulk server: in echo-a's netns, port 8081, sends size bytes to every connection.
	var ln net.Listener
	require.NoError(t, inNetns(t, "echo-a", func() error {
		var err error
		ln, err = net.Listen("tcp4", ":8081")
		return err
	}))
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				c.Write(bytes.Repeat([]byte("x"), size))
			}()
		}
	}()
	download := func(timeout time.Duration) (int64, error) {
		var c net.Conn
		if err := inNetns(t, "client", func() error {
			var err error
			c, err = net.DialTimeout("tcp4", "192.0.2.11:30472", 3*time.Second)
			return err
		}); err != nil {
			return 0, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		return io.Copy(io.Discard, c)
	}
	// Flows in place, path MTU still 1500 everywhere.
	require.NoError(t, lab.WaitFor(func() error {
		n, err := download(10 * time.Second)
		if err == nil && n != size {
			err = fmt.Errorf("got %d bytes", n)
		}
		return err
	}, 20*time.Second))
	// The pod may have learnt nothing yet; flush its cached path MTUs anyway.
	_, _ = theLab.Exec("echo-a", "ip", "route", "flush", "cache")
	rp := theLab.Prefix + "c1"
	for _, l := range []string{rp, "brc"} {
		_, err := theLab.Exec("router", "ip", "link", "set", l, "mtu", "1300")
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, l := range []string{rp, "brc"} {
			_, _ = theLab.Exec("router", "ip", "link", "set", l, "mtu", "1500")
		}
		_, _ = theLab.Exec("echo-a", "ip", "route", "flush", "cache")
	})
	toRouter := capture(t, "router", "br0", "icmp[icmptype] == icmp-unreach and icmp[icmpcode] == 4")
	start := time.Now()
	n, err := download(15 * time.Second)
	t.Logf("downloaded %d bytes in %v (err %v)", n, time.Since(start), err)
	icmps := toRouter()
	t.Logf("frag-needed sent by the router: %d, e.g. %v", len(icmps), first(icmps))
	assert.NotEmpty(t, icmps, "the router must have sent fragmentation needed (else the test proves nothing)")
	require.NoError(t, err)
	require.EqualValues(t, size, n)
	pmtu, _ := theLab.Exec("echo-a", "ip", "route", "get", clientIP)
	t.Log(strings.TrimSpace(pmtu))
	assert.Contains(t, pmtu, "mtu 1300", "the pod learnt the path MTU from the router's ICMP")
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// sendUDP sends one datagram of size bytes from the client (fresh source port) to addr and returns
// the echo server's answer.
func sendUDP(t *testing.T, addr string, size int, pc *net.UDPConn) (reply, error) {
	dst, err := net.ResolveUDPAddr("udp4", addr)
	require.NoError(t, err)
	msg := bytes.Repeat([]byte("f"), size)
	msg[size-1] = '\n'
	if _, err := pc.WriteTo(msg, dst); err != nil {
		return reply{}, err
	}
	pc.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 2048)
	n, _, err := pc.ReadFrom(buf)
	if err != nil {
		return reply{}, err
	}
	var r reply
	return r, json.Unmarshal(buf[:n], &r)
}

type reply struct{ Pod, Node, Client string }

// A 3000-byte UDP datagram leaves the client in fragments (the client's route to node1 has MTU
// 1400, so that the fragments also fit the pods' MTU and the Geneve overhead) and must reach its
// endpoint, remote (echo-a via svcRemote) and local (echo-c via svcLocal), on a UDP "connection"
// that a first, small datagram has established (ZoneService entry). A connection whose first
// datagram is fragmented is not served (docs/security.md "ICMP and fragments").
func TestUDPFragmentsReachEndpoint(t *testing.T) {
	checkReply(t, waitOK(t, "udp", "192.0.2.11:31100"), "192.0.2.11:31100", "echo-a")
	checkReply(t, waitOK(t, "udp", "192.0.2.11:31101"), "192.0.2.11:31101", "echo-c")
	_, err := theLab.Exec("client", "ip", "route", "replace", "192.0.2.11/32", "via", "198.51.100.1", "mtu", "1400")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = theLab.Exec("client", "ip", "route", "del", "192.0.2.11/32") })
	for _, c := range []struct{ name, addr, pod string }{{"remote", "192.0.2.11:31100", "echo-a"}, {"local", "192.0.2.11:31101", "echo-c"}} {
		t.Run(c.name, func(t *testing.T) {
			var pc *net.UDPConn
			require.NoError(t, inNetns(t, "client", func() error {
				var err error
				pc, err = net.ListenUDP("udp4", &net.UDPAddr{})
				return err
			}))
			defer pc.Close()
			r, err := sendUDP(t, c.addr, 100, pc)
			require.NoError(t, err, "the small first datagram from %s", pc.LocalAddr())
			require.Equal(t, c.pod, r.Pod)
			frags := capture(t, "client", "eth0", "ip[6:2] & 0x3fff != 0")
			for i := 0; i < 2; i++ {
				r, err := sendUDP(t, c.addr, 3000, pc)
				require.NoError(t, err, "fragmented datagram %d from %s", i, pc.LocalAddr())
				assert.Equal(t, c.pod, r.Pod)
				assert.Equal(t, clientIP, strings.Split(r.Client, ":")[0], "the endpoint sees the client's address")
			}
			got := frags()
			assert.GreaterOrEqual(t, len(got), 6, "the datagrams must leave the client in fragments: %v", got)
		})
	}
	st, _ := theLab.Appctl("node1", "dpctl/ipf-get-status")
	t.Log(strings.TrimSpace(st))
}

// ICMP that is not about one of our connections stays the host's: a ping of the node address is
// answered by node1's host stack, with the ICMP flows in place.
func TestPingNodeStillAnswered(t *testing.T) {
	withICMPServices(t)
	out, err := theLab.Exec("client", "ping", "-c", "2", "-W", "2", "192.0.2.11")
	require.NoError(t, err, out)
	assert.Contains(t, out, "2 received", out)
}
