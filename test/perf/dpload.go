package main

// The data path's sink and load generator: `perf dp-sink` runs in each backend pod's network
// namespace, `perf dp-load` in the external client's. One TCP protocol for all three
// measurements; the first byte the client sends selects the operation:
//
//	'r'  request/response: the sink answers "<source IP it saw>\n" and closes once the client
//	     has closed (the client closes first and keeps the TIME_WAIT; dp-load's default);
//	'R'  the same, but the sink closes first (-client-closes=false): the TIME_WAIT is the pod's,
//	     and with one client address a reused client port meets it - at ~10^4 connections per
//	     window some connections then never get an answer to their SYNs (5 s dial timeout) on
//	     both paths, an artefact of one client address that the default avoids;
//	'D'  download: the sink writes "<source IP>\n", then 128 KiB blocks until the client closes;
//	'U'  upload: the sink reads to EOF, then answers "<source IP> <bytes read>\n".
//
// The source IP in every answer is how the benchmark checks which path it measured: the
// client's address on the preserved-source path, the ingress node's on the SNAT path.

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// dpSink serves the protocol above on -listen until killed.
func dpSink(args []string) error {
	fs := flag.NewFlagSet("dp-sink", flag.ExitOnError)
	listen := fs.String("listen", ":8080", "TCP address to listen on")
	_ = fs.Parse(args)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go sinkConn(c.(*net.TCPConn))
	}
}

func sinkConn(c *net.TCPConn) {
	defer c.Close()
	src := c.RemoteAddr().(*net.TCPAddr).IP.String()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	op := make([]byte, 1)
	if _, err := io.ReadFull(c, op); err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	switch op[0] {
	case 'R':
		_, _ = c.Write([]byte(src + "\n"))
	case 'r': // as 'R', but the client closes first (its side keeps the TIME_WAIT)
		if _, err := c.Write([]byte(src + "\n")); err == nil {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.Copy(io.Discard, c)
		}
	case 'D':
		if _, err := c.Write([]byte(src + "\n")); err != nil {
			return
		}
		buf := make([]byte, 128<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	case 'U':
		n, _ := io.Copy(io.Discard, c)
		_, _ = fmt.Fprintf(c, "%s %d\n", src, n)
	}
}

// loadResult is what `perf dp-load` prints (JSON on stdout).
type loadResult struct {
	Mode    string
	Seconds float64 // measured window (after the warm-up)
	// cps: connections completed inside the window, their rate, connect+response latency.
	Conns  int
	Errors int // failed connections (dial, write or read), warm-up included
	// ErrorKinds counts the failures by step and error ("dial: i/o timeout", ...).
	ErrorKinds map[string]int `json:",omitempty"`
	CPS        float64
	P50ms      float64
	P99ms      float64
	// down / up: bytes moved inside the window, in Mbit/s (10^6 bit/s).
	Bytes int64
	Mbps  float64
	// Seen: the source addresses the sink reported, with how many answers gave each.
	Seen map[string]int
}

var clientCloses = new(bool)

// dpLoad runs one measurement against -addr and prints a loadResult.
func dpLoad(args []string) error {
	fs := flag.NewFlagSet("dp-load", flag.ExitOnError)
	addr := fs.String("addr", "", "IP:port (the NodePort on the ingress node)")
	mode := fs.String("mode", "cps", "cps (short connections), down (bulk, sink to client), up (bulk, client to sink), probe (one request)")
	workers := fs.Int("workers", 16, "cps: concurrent connections; down/up: streams")
	dur := fs.Duration("duration", 10*time.Second, "measured window")
	warmup := fs.Duration("warmup", time.Second, "load before the window, not counted")
	clientCloses = fs.Bool("client-closes", true, "cps: the client closes first (false: the sink does, the TIME_WAIT is the pod's)")
	_ = fs.Parse(args)
	if *addr == "" {
		return errors.New("dp-load: -addr is required")
	}
	var r *loadResult
	var err error
	switch *mode {
	case "probe":
		r = &loadResult{Mode: "probe", Seen: map[string]int{}}
		var src string
		src, _, err = request(*addr, 2*time.Second)
		if err == nil {
			r.Seen[src]++
			r.Conns = 1
		}
	case "cps":
		r, err = loadCPS(*addr, *workers, *warmup, *dur)
	case "down", "up":
		r, err = loadBulk(*addr, *mode, *workers, *warmup, *dur)
	default:
		err = fmt.Errorf("dp-load: unknown -mode %q", *mode)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// request makes one short connection: connect, 'R', read the answer to EOF, close. It returns
// the source address the sink saw and the time from the dial to the end of the answer.
func request(addr string, timeout time.Duration) (string, time.Duration, error) {
	t0 := time.Now()
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", 0, fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(t0.Add(timeout))
	op := byte('R')
	if *clientCloses {
		op = 'r'
	}
	if _, err := c.Write([]byte{op}); err != nil {
		return "", 0, fmt.Errorf("write: %w", err)
	}
	var b []byte
	if *clientCloses {
		var s string
		s, err = bufio.NewReader(c).ReadString('\n')
		b = []byte(s)
	} else {
		b, err = io.ReadAll(c)
	}
	if err != nil {
		return "", 0, fmt.Errorf("read: %w", err)
	}
	d := time.Since(t0)
	src := strings.TrimSpace(string(b))
	if src == "" {
		return "", 0, errors.New("empty answer")
	}
	return src, d, nil
}

func loadCPS(addr string, workers int, warmup, dur time.Duration) (*loadResult, error) {
	start := time.Now()
	from, to := start.Add(warmup), start.Add(warmup+dur)
	type wres struct {
		lat    []time.Duration
		seen   map[string]int
		kinds  map[string]int
		errors int
		last   error
	}
	res := make([]wres, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w *wres) {
			defer wg.Done()
			w.seen, w.kinds = map[string]int{}, map[string]int{}
			for {
				t0 := time.Now()
				if !t0.Before(to) {
					return
				}
				src, d, err := request(addr, 5*time.Second)
				if err != nil {
					w.errors++
					w.last = err
					w.kinds[errorKind(err)]++
					continue
				}
				w.seen[src]++
				if !t0.Before(from) && t0.Add(d).Before(to) {
					w.lat = append(w.lat, d)
				}
			}
		}(&res[w])
	}
	wg.Wait()
	r := &loadResult{Mode: "cps", Seconds: dur.Seconds(), Seen: map[string]int{}, ErrorKinds: map[string]int{}}
	var all []time.Duration
	var last error
	for _, w := range res {
		all = append(all, w.lat...)
		r.Errors += w.errors
		if w.last != nil {
			last = w.last
		}
		for k, v := range w.seen {
			r.Seen[k] += v
		}
		for k, v := range w.kinds {
			r.ErrorKinds[k] += v
		}
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("cps: no connection completed (%d errors, last: %v)", r.Errors, last)
	}
	s := stats(all)
	r.Conns, r.CPS, r.P50ms, r.P99ms = s.N, float64(s.N)/dur.Seconds(), s.P50ms, s.P99ms
	return r, nil
}

func loadBulk(addr, mode string, streams int, warmup, dur time.Duration) (*loadResult, error) {
	var moved atomic.Int64
	var stop atomic.Bool
	r := &loadResult{Mode: mode, Seen: map[string]int{}}
	var mu sync.Mutex
	errs := make(chan error, streams)
	var wg sync.WaitGroup
	for i := 0; i < streams; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			stop.Store(true)
			wg.Wait()
			return nil, err
		}
		wg.Add(1)
		go func(c *net.TCPConn) {
			defer wg.Done()
			defer c.Close()
			seen := func(s string) { mu.Lock(); r.Seen[s]++; mu.Unlock() }
			buf := make([]byte, 128<<10)
			if mode == "down" {
				if _, err := c.Write([]byte{'D'}); err != nil {
					errs <- err
					return
				}
				br := bufio.NewReaderSize(c, 128<<10)
				line, err := br.ReadString('\n')
				if err != nil {
					errs <- err
					return
				}
				seen(strings.TrimSpace(line))
				for !stop.Load() {
					_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
					n, err := br.Read(buf)
					moved.Add(int64(n))
					if err != nil {
						errs <- err
						return
					}
				}
				return
			}
			if _, err := c.Write([]byte{'U'}); err != nil {
				errs <- err
				return
			}
			for !stop.Load() {
				_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				n, err := c.Write(buf)
				moved.Add(int64(n))
				if err != nil {
					errs <- err
					return
				}
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_ = c.CloseWrite()
			b, err := io.ReadAll(c)
			if err != nil {
				errs <- err
				return
			}
			f := strings.Fields(string(b))
			if len(f) != 2 {
				errs <- fmt.Errorf("upload: answer %q", b)
				return
			}
			if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
				errs <- fmt.Errorf("upload: answer %q", b)
				return
			}
			seen(f[0])
		}(c.(*net.TCPConn))
	}
	time.Sleep(warmup)
	b0, t0 := moved.Load(), time.Now()
	time.Sleep(dur)
	b1, t1 := moved.Load(), time.Now()
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, fmt.Errorf("%s: %w", mode, err)
	}
	r.Seconds = t1.Sub(t0).Seconds()
	r.Bytes = b1 - b0
	r.Mbps = float64(r.Bytes) * 8 / r.Seconds / 1e6
	return r, nil
}

// errorKind is err without the addresses and ports in it: "dial: i/o timeout",
// "read: connection reset by peer".
func errorKind(err error) string {
	step, _, _ := strings.Cut(err.Error(), ":")
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return step + ": " + op.Err.Error()
	}
	return err.Error()
}
