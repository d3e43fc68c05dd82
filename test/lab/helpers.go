package lab

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Exec runs argv inside the netns named by a logical name (see Netns) via
// "ip netns exec" and returns its stdout; the error includes stderr.
func (l *Lab) Exec(netns string, argv ...string) (string, error) {
	ns, err := l.Netns(netns)
	if err != nil {
		return "", err
	}
	return l.nsExec(ns, argv...)
}

func (l *Lab) ovsTool(node, tool string, args ...string) (string, error) {
	n := l.Node(node)
	if n == nil {
		return "", fmt.Errorf("lab: no node %q", node)
	}
	return l.run(runOpts{env: n.ovsEnv()}, append([]string{tool}, args...)...)
}

// Ofctl runs ovs-ofctl against node's ovs-vswitchd (OVS_RUNDIR of that node).
func (l *Lab) Ofctl(node string, args ...string) (string, error) {
	return l.ovsTool(node, "ovs-ofctl", args...)
}

// Appctl runs ovs-appctl against node's daemons (default target ovs-vswitchd;
// pass "-t", "ovsdb-server" first for the database).
func (l *Lab) Appctl(node string, args ...string) (string, error) {
	return l.ovsTool(node, "ovs-appctl", args...)
}

// Vsctl runs ovs-vsctl against node's ovsdb-server.
func (l *Lab) Vsctl(node string, args ...string) (string, error) {
	n := l.Node(node)
	if n == nil {
		return "", fmt.Errorf("lab: no node %q", node)
	}
	return l.ovsTool(node, "ovs-vsctl", append([]string{"--db=unix:" + n.DBSock(), "--timeout=30"}, args...)...)
}

// DumpFlows returns "ovs-ofctl -O OpenFlow15 dump-flows bridge [match]" of
// node, e.g. DumpFlows("node1", "br-ex", "cookie=0x5c00000000000000/0xff00000000000000").
func (l *Lab) DumpFlows(node, bridge string, match ...string) (string, error) {
	return l.Ofctl(node, append([]string{"-O", "OpenFlow15", "dump-flows", bridge}, match...)...)
}

// DumpGroups returns "ovs-ofctl -O OpenFlow15 dump-groups bridge".
func (l *Lab) DumpGroups(node, bridge string) (string, error) {
	return l.Ofctl(node, "-O", "OpenFlow15", "dump-groups", bridge)
}

// Reply is what "echo get" reports.
type Reply struct {
	Pod  string `json:"pod"`  // backend pod name
	Node string `json:"node"` // backend pod's node
	// Client is the peer address (ip:port) the backend saw.
	Client string `json:"client"`
	// From is the remote address the client saw the answer come from (the
	// TCP peer, or the source of the UDP reply datagram).
	From string `json:"from"`
	// Local is the client's own address of the exchange.
	Local string `json:"local"`
}

// ClientIP is the host part of Client.
func (r Reply) ClientIP() string { return hostOf(r.Client) }

// FromIP is the host part of From.
func (r Reply) FromIP() string { return hostOf(r.From) }

func hostOf(hp string) string {
	h, _, err := net.SplitHostPort(hp)
	if err != nil {
		return hp
	}
	return h
}

// RequestOpts tunes RequestWith.
type RequestOpts struct {
	LocalPort int    // 0: ephemeral
	LocalAddr string // the address to bind ("": the kernel's source address for the route)
	Timeout   string // e.g. "3s"; default Config.RequestTimeout
}

// Request runs "echo get" inside the netns of client (a client name, or any
// logical netns name: a pod or node can be a client too; "" = the first
// client) and returns the parsed reply. proto is "tcp" or "udp", addr
// "IP:PORT".
func (l *Lab) Request(client, proto, addr string) (Reply, error) {
	return l.RequestWith(client, proto, addr, RequestOpts{})
}

// RequestWith is Request with options.
func (l *Lab) RequestWith(client, proto, addr string, o RequestOpts) (Reply, error) {
	if l.cfg.EchoBin == "" {
		return Reply{}, fmt.Errorf("lab: Config.EchoBin not set")
	}
	if client == "" {
		client = l.Clients[0].Name
	}
	timeout := o.Timeout
	if timeout == "" {
		timeout = l.cfg.RequestTimeout.String()
	}
	argv := []string{l.cfg.EchoBin, "get", "--proto", proto, "--addr", addr, "--timeout", timeout}
	if o.LocalPort > 0 {
		argv = append(argv, "--local-port", strconv.Itoa(o.LocalPort))
	}
	if o.LocalAddr != "" {
		argv = append(argv, "--local-addr", o.LocalAddr)
	}
	out, err := l.Exec(client, argv...)
	if err != nil {
		return Reply{}, fmt.Errorf("request %s %s from %s: %w", proto, addr, client, err)
	}
	var r Reply
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		return Reply{}, fmt.Errorf("request %s %s from %s: bad reply %q: %w", proto, addr, client, out, err)
	}
	return r, nil
}

// EchoBin is the echo binary the lab runs (Config.EchoBin).
func (l *Lab) EchoBin() string { return l.cfg.EchoBin }
