// Command echo is the lab's backend and client.
//
//	echo serve --tcp :8080 --udp :8080 --name <pod> --node <node> [--log FILE]
//
// answers every TCP connection and every UDP datagram with one JSON line
// {"pod":..,"node":..,"client":"<peer ip:port as seen by the server>"} and
// logs that line to FILE (or stdout). It prints "ready" to stderr once all
// sockets are bound. A wildcard address (":8080") is bound once per family (an IPv4 socket and an
// IPV6_V6ONLY one, the latter only where the netns has IPv6), so a peer is reported in its own
// family; every client command below dials the family of its --addr ("[2001:db8::1]:80" is
// IPv6).
//
//	echo get --proto tcp|udp --addr IP:PORT [--timeout 3s] [--local-port N] [--local-addr IP]
//
// sends "hello" and prints {"pod","node","client","from","local"}, "from"
// being the address the answer came from (the TCP peer, or the source of the
// UDP reply datagram, read from an unconnected socket). It exits 1 on error
// or timeout.
//
//	echo stream --addr IP:PORT [--timeout 2s] [--local-port N]
//
// opens one TCP connection, sends "stream" (the server then keeps the
// connection open and answers every request line) and prints the answer as
// "get" does; then, for every line read from stdin, sends one request on the
// same connection and prints its answer, each within --timeout (an empty line sends "hello",
// any other line is sent as it is: "delay 8s" makes the server answer after 8 s, so the server
// speaks first after a silence; the server caps D at a minute). On any error it
// prints "ERROR <reason>" and exits 1; at the end of stdin it closes the
// connection and exits 0. Tests use it to exchange data on an established
// connection before, during and after a change.
//
//	echo udpstream --addr IP:PORT [--every 50ms]
//
// sends one datagram every --every from one UDP socket (one 5-tuple, one conntrack entry) until
// stdin ends, reads the answers, and then prints one JSON line {"sent","received","maxGapMs",
// "clients"}: the longest time without an answer (from the first answer to the end) and every
// source address the server reported. Tests use it as the UDP stream of a failover.
//
//	echo probe --proto tcp|udp --addr IP:PORT [--timeout 3s]
//
// opens one connection (TCP: connect; UDP: a connected socket, sends "hello" and reads) and
// prints {"result","error","ms"}: result "answered", "refused" (ECONNREFUSED: a RST, or an ICMP
// port unreachable), "timeout" or "error", and the milliseconds it took. It exits 0 whatever the
// result. Tests use it to see how a connection fails.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// streamRequest as the first request line of a TCP connection keeps it open: the server
// answers it and then every further line, one answer line per request line.
const streamRequest = "stream\n"

// streamIdle closes a streaming connection that sent no request for that long.
const streamIdle = 10 * time.Minute

// streamMaxDelay bounds a streaming request's "delay D".
const streamMaxDelay = time.Minute

type reply struct {
	Pod    string `json:"pod"`
	Node   string `json:"node"`
	Client string `json:"client"`
	From   string `json:"from,omitempty"`
	Local  string `json:"local,omitempty"`
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, strings.Split(v, ",")...); return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: echo serve|get|stream [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "get":
		err = get(os.Args[2:])
	case "stream":
		err = stream(os.Args[2:])
	case "udpstream":
		err = udpStream(os.Args[2:])
	case "probe":
		err = probe(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want serve, get or stream)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var tcps, udps listFlag
	fs.Var(&tcps, "tcp", "TCP listen address (repeatable, comma separated)")
	fs.Var(&udps, "udp", "UDP listen address (repeatable, comma separated)")
	name := fs.String("name", "", "pod name to report")
	node := fs.String("node", "", "node name to report")
	logPath := fs.String("log", "", "append answered lines to this file (default stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(tcps) == 0 && len(udps) == 0 {
		tcps, udps = listFlag{":8080"}, listFlag{":8080"}
	}
	var out io.Writer = os.Stdout
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	var mu sync.Mutex
	logLine := func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		out.Write(b)
	}
	answer := func(peer string) []byte {
		b, _ := json.Marshal(reply{Pod: *name, Node: *node, Client: peer})
		return append(b, '\n')
	}
	var tcpLns []net.Listener
	for _, a := range tcps {
		lns, err := listenFamilies(a, func(network string) (net.Listener, error) { return net.Listen(network, a) })
		if err != nil {
			return err
		}
		tcpLns = append(tcpLns, lns...)
	}
	var udpPCs []net.PacketConn
	for _, a := range udps {
		pcs, err := listenFamilies(a, func(network string) (net.PacketConn, error) {
			return net.ListenPacket("udp"+network[len("tcp"):], a)
		})
		if err != nil {
			return err
		}
		udpPCs = append(udpPCs, pcs...)
	}
	errc := make(chan error, len(tcpLns)+len(udpPCs))
	for _, ln := range tcpLns {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					errc <- err
					return
				}
				go func() {
					defer c.Close()
					// Read the request line (bounded), then answer.
					c.SetReadDeadline(time.Now().Add(2 * time.Second))
					br := bufio.NewReader(c)
					req, _ := br.ReadString('\n')
					b := answer(c.RemoteAddr().String())
					c.SetWriteDeadline(time.Now().Add(2 * time.Second))
					if _, err := c.Write(b); err != nil {
						return
					}
					logLine(b)
					if req != streamRequest {
						// Let the client close first (it does, once it has the answer): the
						// server then closes passively and keeps no TIME_WAIT for the client's
						// ip:port. A client that reaches this pod through another entry address
						// (another node, the LB IP) from the same ip:port would otherwise meet
						// that TIME_WAIT (PAWS) and wait for a SYN retransmission.
						c.SetReadDeadline(time.Now().Add(time.Second))
						_, _ = io.Copy(io.Discard, br)
						return
					}
					// Streaming: answer every further request line on this connection, as it
					// arrives, until the client closes it or stays silent for streamIdle.
					for {
						c.SetReadDeadline(time.Now().Add(streamIdle))
						req, err := br.ReadString('\n')
						if err != nil {
							return
						}
						// "delay D": answer after D, the server speaking first after a
						// silence (at most streamMaxDelay).
						if d, ok := strings.CutPrefix(strings.TrimSpace(req), "delay "); ok {
							if dur, err := time.ParseDuration(d); err == nil && dur > 0 {
								time.Sleep(min(dur, streamMaxDelay))
							}
						}
						c.SetWriteDeadline(time.Now().Add(2 * time.Second))
						if _, err := c.Write(b); err != nil {
							return
						}
					}
				}()
			}
		}()
	}
	for _, pc := range udpPCs {
		go func() {
			buf := make([]byte, 65536)
			for {
				_, peer, err := pc.ReadFrom(buf)
				if err != nil {
					errc <- err
					return
				}
				b := answer(peer.String())
				pc.WriteTo(b, peer)
				logLine(b)
			}
		}()
	}
	fmt.Fprintf(os.Stderr, "\nready tcp=%v udp=%v pod=%s node=%s\n", []string(tcps), []string(udps), *name, *node)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "exiting on %v\n", s)
		return nil
	case err := <-errc:
		return err
	}
}

// ipOrNil is a as a net.IP, nil when a is the zero Addr (bind to the wildcard address).
func ipOrNil(a netip.Addr) net.IP {
	if !a.IsValid() {
		return nil
	}
	return net.IP(a.AsSlice())
}

func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	proto := fs.String("proto", "tcp", "tcp or udp")
	addr := fs.String("addr", "", "IP:PORT to query")
	timeout := fs.Duration("timeout", 3*time.Second, "overall timeout")
	localPort := fs.Int("local-port", 0, "local port to bind (0: ephemeral)")
	localAddr := fs.String("local-addr", "", "local address to bind (empty: the kernel's source address for the route)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		return errors.New("--addr is required")
	}
	var local netip.Addr
	if *localAddr != "" {
		a, err := netip.ParseAddr(*localAddr)
		if err != nil {
			return fmt.Errorf("--local-addr: %w", err)
		}
		local = a
	}
	deadline := time.Now().Add(*timeout)
	var r reply
	var line string
	switch *proto {
	case "tcp":
		d := net.Dialer{Deadline: deadline}
		if *localPort > 0 || local.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: ipOrNil(local), Port: *localPort}
		}
		c, err := d.Dial(network("tcp", *addr), *addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(deadline)
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return err
		}
		line, err = bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return fmt.Errorf("read from %s: %w", *addr, err)
		}
		r.From, r.Local = c.RemoteAddr().String(), c.LocalAddr().String()
	case "udp":
		udp := network("udp", *addr)
		dst, err := net.ResolveUDPAddr(udp, *addr)
		if err != nil {
			return err
		}
		pc, err := net.ListenUDP(udp, &net.UDPAddr{IP: ipOrNil(local), Port: *localPort})
		if err != nil {
			return err
		}
		defer pc.Close()
		pc.SetDeadline(deadline)
		if _, err := pc.WriteTo([]byte("hello\n"), dst); err != nil {
			return err
		}
		buf := make([]byte, 65536)
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("read reply to %s: %w", *addr, err)
		}
		line = string(buf[:n])
		r.From = from.String()
		wild := "0.0.0.0"
		if udp == "udp6" {
			wild = "::"
		}
		r.Local = net.JoinHostPort(wild, strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))
	default:
		return fmt.Errorf("--proto %q: want tcp or udp", *proto)
	}
	var srv reply
	if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &srv); err != nil {
		return fmt.Errorf("bad answer %q from %s: %w", line, r.From, err)
	}
	r.Pod, r.Node, r.Client = srv.Pod, srv.Node, srv.Client
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return nil
}

// probe reports how one connection to --addr ends (see the package comment).
func probe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	proto := fs.String("proto", "tcp", "tcp or udp")
	addr := fs.String("addr", "", "IP:PORT to connect to")
	timeout := fs.Duration("timeout", 3*time.Second, "overall timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *proto != "tcp" && *proto != "udp" {
		return fmt.Errorf("--proto %q: want tcp or udp", *proto)
	}
	start := time.Now()
	deadline := start.Add(*timeout)
	err := func() error {
		c, err := (&net.Dialer{Deadline: deadline}).Dial(network(*proto, *addr), *addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(deadline)
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return err
		}
		_, err = bufio.NewReader(c).ReadString('\n')
		return err
	}()
	out := struct {
		Result string `json:"result"`
		Error  string `json:"error,omitempty"`
		MS     int64  `json:"ms"`
	}{Result: "answered", MS: time.Since(start).Milliseconds()}
	var ne net.Error
	switch {
	case err == nil:
	case errors.Is(err, syscall.ECONNREFUSED):
		out.Result = "refused"
	case errors.As(err, &ne) && ne.Timeout():
		out.Result = "timeout"
	default:
		out.Result = "error"
	}
	if err != nil {
		out.Error = err.Error()
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	return nil
}

func stream(args []string) error {
	fs := flag.NewFlagSet("stream", flag.ContinueOnError)
	addr := fs.String("addr", "", "IP:PORT to connect to (TCP)")
	timeout := fs.Duration("timeout", 2*time.Second, "bound of the connect and of each exchange")
	localPort := fs.Int("local-port", 0, "bind this source port (0: the kernel picks one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" {
		return errors.New("--addr is required")
	}
	fail := func(err error) error {
		fmt.Printf("ERROR %v\n", err)
		return err
	}
	d := net.Dialer{Timeout: *timeout}
	if *localPort != 0 {
		d.LocalAddr = &net.TCPAddr{Port: *localPort}
	}
	c, err := d.Dial(network("tcp", *addr), *addr)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	exchange := func(req string) error {
		c.SetDeadline(time.Now().Add(*timeout))
		if _, err := c.Write([]byte(req)); err != nil {
			return err
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("read from %s: %w", *addr, err)
		}
		var r reply
		if err := json.Unmarshal([]byte(strings.TrimSpace(line)), &r); err != nil {
			return fmt.Errorf("bad answer %q: %w", line, err)
		}
		r.From, r.Local = c.RemoteAddr().String(), c.LocalAddr().String()
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		return nil
	}
	if err := exchange(streamRequest); err != nil {
		return fail(err)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		req := "hello\n"
		if l := strings.TrimSpace(in.Text()); l != "" {
			req = l + "\n"
		}
		if err := exchange(req); err != nil {
			return fail(err)
		}
	}
	return in.Err()
}

// udpStreamResult is what udpstream prints.
type udpStreamResult struct {
	Sent     int      `json:"sent"`
	Received int      `json:"received"`
	MaxGapMs int64    `json:"maxGapMs"`
	Clients  []string `json:"clients"`
}

func udpStream(args []string) error {
	fs := flag.NewFlagSet("udpstream", flag.ContinueOnError)
	addr := fs.String("addr", "", "IP:PORT to send to (UDP)")
	every := fs.Duration("every", 50*time.Millisecond, "interval between two datagrams")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dst, err := net.ResolveUDPAddr(network("udp", *addr), *addr)
	if err != nil {
		return err
	}
	c, err := net.DialUDP(network("udp", *addr), nil, dst)
	if err != nil {
		return err
	}
	defer c.Close()
	var mu sync.Mutex
	res := udpStreamResult{}
	seen := map[string]bool{}
	var last time.Time
	var maxGap time.Duration
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := c.Read(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue // ICMP errors while the path is down
			}
			var r reply
			now := time.Now()
			mu.Lock()
			if json.Unmarshal(buf[:n], &r) == nil {
				if h, _, err := net.SplitHostPort(r.Client); err == nil && !seen[h] {
					seen[h] = true
					res.Clients = append(res.Clients, h)
				}
			}
			res.Received++
			if !last.IsZero() && now.Sub(last) > maxGap {
				maxGap = now.Sub(last)
			}
			last = now
			mu.Unlock()
		}
	}()
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	t := time.NewTicker(*every)
	defer t.Stop()
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-t.C:
			if _, err := c.Write([]byte("hello\n")); err == nil {
				mu.Lock()
				res.Sent++
				mu.Unlock()
			}
		}
	}
	time.Sleep(500 * time.Millisecond) // the last answers
	mu.Lock()
	defer mu.Unlock()
	if !last.IsZero() && time.Since(last)-500*time.Millisecond > maxGap {
		maxGap = time.Since(last) - 500*time.Millisecond
	}
	res.MaxGapMs = maxGap.Milliseconds()
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return nil
}

// network returns base ("tcp" or "udp") with the family of addr's host: "tcp6" for an IPv6
// literal ("[2001:db8::1]:80"), else "tcp4" (an IPv4 literal or a name: the lab is IPv4 first).
func network(base, addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() && !a.Is4In6() {
		return base + "6"
	}
	return base + "4"
}

// listenFamilies binds addr ("IP:PORT" or ":PORT") with listen, given "tcp4" or "tcp6": an address
// with an IP in its own family; a wildcard one in both, one socket each (a "tcp6" socket is
// IPV6_V6ONLY), so that a peer's address is reported in its own family, never IPv4-mapped. The
// IPv6 socket of a wildcard address is left out when the host has no IPv6 (an IPv4-only netns).
func listenFamilies[T any](addr string, listen func(network string) (T, error)) ([]T, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host != "" {
		c, err := listen(network("tcp", addr))
		if err != nil {
			return nil, err
		}
		return []T{c}, nil
	}
	c4, err := listen("tcp4")
	if err != nil {
		return nil, err
	}
	out := []T{c4}
	if c6, err := listen("tcp6"); err == nil {
		out = append(out, c6)
	} else {
		fmt.Fprintf(os.Stderr, "echo: no IPv6 listener on %s: %v\n", addr, err)
	}
	return out, nil
}
