package main

import (
	"net"
	"testing"
	"time"
)

// startSink serves the dp-sink protocol on a loopback port for the test's lifetime.
func startSink(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sinkConn(c.(*net.TCPConn))
		}
	}()
	return ln.Addr().String()
}

// The load generator against the sink over loopback: every mode moves data, counts it, and
// reports the source address the sink saw.
func TestLoadAgainstSink(t *testing.T) {
	addr := startSink(t)
	for _, closes := range []bool{true, false} {
		*clientCloses = closes
		r, err := loadCPS(addr, 4, 100*time.Millisecond, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("cps (client closes %v): %v", closes, err)
		}
		if r.Conns == 0 || r.CPS <= 0 || r.Errors != 0 || r.P50ms <= 0 || r.P99ms < r.P50ms {
			t.Errorf("cps (client closes %v): %+v", closes, r)
		}
		if len(r.Seen) != 1 || r.Seen["127.0.0.1"] < r.Conns {
			t.Errorf("cps (client closes %v): sink saw %v, want only 127.0.0.1 (at least %d answers)", closes, r.Seen, r.Conns)
		}
	}
	*clientCloses = true
	for _, mode := range []string{"down", "up"} {
		r, err := loadBulk(addr, mode, 2, 100*time.Millisecond, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if r.Bytes <= 0 || r.Mbps <= 0 || r.Seen["127.0.0.1"] != 2 {
			t.Errorf("%s: %+v", mode, r)
		}
	}
	// Nothing listening: the failure is counted by kind, not a crash.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if _, err := loadCPS(dead, 1, 0, 50*time.Millisecond); err == nil {
		t.Errorf("cps against a closed port: no error")
	}
	if _, _, err := request(dead, time.Second); err == nil || errorKind(err) != "dial: connect: connection refused" {
		t.Errorf("request against a closed port: %v (kind %q)", err, errorKind(err))
	}
}
