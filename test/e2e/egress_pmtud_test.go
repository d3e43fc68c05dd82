package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// TestEgressPMTUD (C30): a selected pod (echo-a on node2, gateway node3) uploads 1 MiB over
// TCP to a sink in the client netns, and downloads 1 MiB from it, while the lab router's
// client-side link has MTU 1300. The router's ICMP "fragmentation needed" is addressed to the
// egress IP; node3 must un-SNAT it (ct related in ZoneEgress, embedded header included) and
// tunnel it back to node2, where ZonePod relates it to the pod's connection: the pod learns
// the path MTU and the upload completes.
func TestEgressPMTUD(t *testing.T) {
	const size = 1 << 20
	const port = "18091"
	hostEcho(t, "client", "")
	withEgressPolicy(t)
	require.NoError(t, lab.WaitFor(func() error {
		r, err := theLab.Request("echo-a", "tcp", clientIP+":"+hostPort)
		if err != nil {
			return err
		}
		if r.ClientIP() != egressIP {
			return fmt.Errorf("server saw %s", r.Client)
		}
		return nil
	}, 30*time.Second), "echo-a never left as %s", egressIP)

	// The sink in the client netns: "up" reads to EOF and answers the count and the source it
	// saw; "down" sends size bytes.
	var ln net.Listener
	require.NoError(t, inNetns(t, "client", func() error {
		var err error
		ln, err = net.Listen("tcp4", ":"+port)
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				var cmd [2]byte
				if _, err := io.ReadFull(c, cmd[:]); err != nil {
					return
				}
				if string(cmd[:]) == "dn" {
					c.Write(bytes.Repeat([]byte("x"), size))
					return
				}
				n, _ := io.Copy(io.Discard, c)
				fmt.Fprintf(c, "%d %s", n, c.RemoteAddr())
			}()
		}
	}()
	dial := func() (*net.TCPConn, error) {
		var c net.Conn
		err := inNetns(t, "echo-a", func() error {
			var err error
			c, err = net.DialTimeout("tcp4", clientIP+":"+port, 3*time.Second)
			return err
		})
		if err != nil {
			return nil, err
		}
		return c.(*net.TCPConn), nil
	}
	upload := func(timeout time.Duration) (string, error) {
		c, err := dial()
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		if _, err := c.Write(append([]byte("up"), bytes.Repeat([]byte("y"), size)...)); err != nil {
			return "", fmt.Errorf("write: %w", err)
		}
		c.CloseWrite()
		b, err := io.ReadAll(c)
		return string(b), err
	}
	download := func(timeout time.Duration) (int64, error) {
		c, err := dial()
		if err != nil {
			return 0, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(timeout))
		if _, err := c.Write([]byte("dn")); err != nil {
			return 0, err
		}
		return io.Copy(io.Discard, c)
	}
	// MTU 1500 everywhere first.
	got, err := upload(15 * time.Second)
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(size), strings.Fields(got)[0], "upload at MTU 1500: %q", got)

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
	toPod := capture(t, "echo-a", "eth0", "icmp[icmptype] == icmp-unreach and icmp[icmpcode] == 4")
	start := time.Now()
	got, err = upload(20 * time.Second)
	t.Logf("upload through the 1300-byte hop: %q in %v (err %v)", got, time.Since(start), err)
	icmps, atPod := toRouter(), toPod()
	t.Logf("frag-needed on the router's node side: %d, e.g. %v", len(icmps), first(icmps))
	t.Logf("frag-needed at echo-a: %d, e.g. %v", len(atPod), first(atPod))
	require.NotEmpty(t, icmps, "the router must have sent fragmentation needed (else the test proves nothing)")
	assert.Contains(t, first(icmps), "> "+egressIP, "the router's ICMP is addressed to the egress IP")
	require.NoError(t, err)
	f := strings.Fields(got)
	require.Len(t, f, 2)
	assert.Equal(t, strconv.Itoa(size), f[0], "the server received the whole upload")
	assert.True(t, strings.HasPrefix(f[1], egressIP+":"), "the server saw %s", f[1])
	assert.NotEmpty(t, atPod, "the ICMP reached the pod (un-SNATed on node3, tunnelled to node2)")
	if len(atPod) > 0 {
		assert.Contains(t, atPod[0], "> 10.244.2.5", "the ICMP is addressed to the pod")
	}
	pmtu, _ := theLab.Exec("echo-a", "ip", "route", "get", clientIP)
	t.Log(strings.TrimSpace(pmtu))
	assert.Contains(t, pmtu, "mtu 1300", "the pod learnt the path MTU from the router's ICMP")

	// The download (server -> pod) through the 1300 hop: the pod's MSS and the client's
	// own link MTU keep it below the hop.
	n, err := download(20 * time.Second)
	t.Logf("download: %d bytes (err %v)", n, err)
	require.NoError(t, err)
	assert.EqualValues(t, size, n)
}
