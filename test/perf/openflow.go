package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The floor: the same flows as one pre-encoded OpenFlow bundle written over the switch's socket.
// ovs-ofctl encodes the bundle once against a recording stand-in switch (capture); replay then
// writes those bytes to ovs-vswitchd and waits for the commit reply. Only the OpenFlow header
// (version, type, length, xid) is interpreted; the message bodies are ovs-ofctl's.

const (
	ofp15 = 0x06

	ofptHello          = 0
	ofptError          = 1
	ofptEchoRequest    = 2
	ofptEchoReply      = 3
	ofptFeaturesReq    = 5
	ofptFeaturesReply  = 6
	ofptBarrierRequest = 20
	ofptBarrierReply   = 21
	ofptBundleControl  = 33
	ofptBundleAdd      = 34

	bundleCommitRequest = 4
	bundleCommitReply   = 5
)

type ofMsg struct {
	typ  uint8
	xid  uint32
	raw  []byte // the whole message, header included
	body []byte
}

func readMsg(r *bufio.Reader) (ofMsg, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return ofMsg{}, err
	}
	n := int(binary.BigEndian.Uint16(h[2:4]))
	if n < 8 {
		return ofMsg{}, fmt.Errorf("openflow: bad length %d", n)
	}
	raw := make([]byte, n)
	copy(raw, h[:])
	if _, err := io.ReadFull(r, raw[8:]); err != nil {
		return ofMsg{}, err
	}
	return ofMsg{typ: h[1], xid: binary.BigEndian.Uint32(h[4:8]), raw: raw, body: raw[8:]}, nil
}

func msg(typ uint8, xid uint32, body []byte) []byte {
	b := make([]byte, 8+len(body))
	b[0], b[1] = ofp15, typ
	binary.BigEndian.PutUint16(b[2:4], uint16(len(b)))
	binary.BigEndian.PutUint32(b[4:8], xid)
	copy(b[8:], body)
	return b
}

// capture runs `ovs-ofctl -O OpenFlow15 --no-names bundle` on the bundle file against a stand-in
// switch and returns every message ovs-ofctl sent after the hello (bundle open, adds, commit),
// encoded by ovs-ofctl.
func capture(ctx context.Context, dir, bundleFile string) ([]byte, int, error) {
	sock := filepath.Join(dir, "capture.sock")
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, 0, err
	}
	defer ln.Close()
	type result struct {
		b   []byte
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer c.Close()
		r := bufio.NewReaderSize(c, 1<<20)
		w := bufio.NewWriter(c)
		var rec []byte
		n := 0
		for {
			m, err := readMsg(r)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				res <- result{rec, n, err}
				return
			}
			var reply []byte
			switch m.typ {
			case ofptHello:
				reply = msg(ofptHello, m.xid, nil)
			case ofptEchoRequest:
				reply = msg(ofptEchoReply, m.xid, m.body)
			case ofptFeaturesReq:
				reply = msg(ofptFeaturesReply, m.xid, make([]byte, 24))
			case ofptBarrierRequest:
				reply = msg(ofptBarrierReply, m.xid, nil)
				rec = append(rec, m.raw...)
				n++
			case ofptBundleControl:
				body := append([]byte(nil), m.body...)
				t := binary.BigEndian.Uint16(body[4:6])
				binary.BigEndian.PutUint16(body[4:6], t+1) // request -> reply
				reply = msg(ofptBundleControl, m.xid, body[:8])
				rec = append(rec, m.raw...)
				n++
			case ofptBundleAdd:
				rec = append(rec, m.raw...)
				n++
			default:
				res <- result{err: fmt.Errorf("capture: unexpected OpenFlow message type %d from ovs-ofctl", m.typ)}
				return
			}
			if reply != nil {
				if _, err := w.Write(reply); err == nil {
					err = w.Flush()
				}
			}
		}
	}()
	cmd := exec.CommandContext(ctx, "ovs-ofctl", "-O", "OpenFlow15", "--no-names", "bundle", "unix:"+sock, bundleFile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, 0, fmt.Errorf("ovs-ofctl bundle (capture): %v: %s", err, out)
	}
	select {
	case r := <-res:
		return r.b, r.n, r.err
	case <-time.After(30 * time.Second):
		return nil, 0, errors.New("capture: no end of stream")
	}
}

// replay writes the captured messages to the switch at sock (unix path) over one connection and
// returns the time from the first byte written to the bundle's commit reply.
func replay(sock string, stream []byte) (time.Duration, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 1<<16)
	if _, err := c.Write(msg(ofptHello, 1, nil)); err != nil {
		return 0, err
	}
	for {
		m, err := readMsg(r)
		if err != nil {
			return 0, err
		}
		if m.typ == ofptHello {
			break
		}
	}
	done := make(chan error, 1)
	go func() {
		for {
			m, err := readMsg(r)
			if err != nil {
				done <- err
				return
			}
			switch m.typ {
			case ofptError:
				done <- fmt.Errorf("switch answered with OpenFlow error %x", m.body[:min(len(m.body), 4)])
				return
			case ofptEchoRequest:
				_, _ = c.Write(msg(ofptEchoReply, m.xid, m.body))
			case ofptBundleControl:
				if len(m.body) >= 6 && binary.BigEndian.Uint16(m.body[4:6]) == bundleCommitReply {
					done <- nil
					return
				}
			}
		}
	}()
	start := time.Now()
	if _, err := c.Write(stream); err != nil {
		return 0, err
	}
	if err := <-done; err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// bundleFromDumps turns `dump-groups` and `dump-flows --no-stats` output into an ovs-ofctl bundle
// file: every group, then every flow, as adds.
func bundleFromDumps(groups, flows string) (string, int, int) {
	var b strings.Builder
	ng, nf := 0, 0
	for _, l := range strings.Split(groups, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "group_id=") {
			b.WriteString("group add " + l + "\n")
			ng++
		}
	}
	for _, l := range strings.Split(flows, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "OFPST_") || strings.HasPrefix(l, "NXST_") {
			continue
		}
		b.WriteString("flow add " + l + "\n")
		nf++
	}
	return b.String(), ng, nf
}

// replayMany writes the captured bundle n times over ONE connection (a persistent OpenFlow
// session, as a library would keep) and returns each bundle's time to its commit reply.
func replayMany(sock string, stream []byte, n int) ([]time.Duration, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 1<<16)
	if _, err := c.Write(msg(ofptHello, 1, nil)); err != nil {
		return nil, err
	}
	if m, err := readMsg(r); err != nil || m.typ != ofptHello {
		return nil, fmt.Errorf("no hello: %v", err)
	}
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if _, err := c.Write(stream); err != nil {
			return nil, err
		}
		for {
			m, err := readMsg(r)
			if err != nil {
				return nil, err
			}
			if m.typ == ofptError {
				return nil, fmt.Errorf("switch answered with OpenFlow error %x", m.body[:min(len(m.body), 4)])
			}
			if m.typ == ofptBundleControl && len(m.body) >= 6 && binary.BigEndian.Uint16(m.body[4:6]) == bundleCommitReply {
				break
			}
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
