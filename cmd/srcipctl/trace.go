package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// traceFlow returns the ofproto/trace flow of the first packet of a new connection from client to
// entry arriving on the uplink (by port name) addressed to the node's MAC (br-ex's: ExClassifier
// hooks only frames to it), and the --ct-next states of its two recirculations:
// ct(nat) in ExServiceLB (a new connection) and the group bucket's ct(commit,nat) (DNATed).
// client and entry are of one family, IPv4 or IPv6 (tcp6/udp6 with ipv6_src/ipv6_dst; nw_ttl
// is the hop limit there, ovs-fields(7)).
func traceFlow(uplink string, nodeMAC net.HardwareAddr, proto string, client, entry netip.AddrPort) (string, []string, error) {
	if err := sameFamily(client, entry); err != nil {
		return "", nil, err
	}
	if proto != "tcp" && proto != "udp" {
		return "", nil, fmt.Errorf("protocol %q: want tcp or udp", proto)
	}
	// Protocol-specific port fields: ofproto/trace rejects tp_src/tp_dst on a UDP flow.
	f := fmt.Sprintf("in_port=%s,%s,dl_dst=%s,%s,%s_src=%d,%s_dst=%d,nw_ttl=64",
		uplink, l3(proto, client.Addr()), nodeMAC, addrs(client.Addr(), entry.Addr()), proto, client.Port(), proto, entry.Port())
	if proto == "tcp" {
		f += ",tcp_flags=syn"
	}
	return f, []string{"trk,new", "trk,new,dnat"}, nil
}

// sameFamily fails unless client and entry are both IPv4 or both IPv6 (an IPv4-mapped IPv6
// address counts as IPv4): a connection does not change family on the way.
func sameFamily(client, entry netip.AddrPort) error {
	c, e := client.Addr().Unmap(), entry.Addr().Unmap()
	if c.Is4() != e.Is4() {
		return fmt.Errorf("client and entry point of one family required (got %s, %s)", client, entry)
	}
	return nil
}

// l3 is the ofproto/trace protocol keyword of proto ("tcp" or "udp") over a's family: tcp, udp,
// tcp6 or udp6.
func l3(proto string, a netip.Addr) string {
	if a.Unmap().Is4() {
		return proto
	}
	return proto + "6"
}

// addrs renders the address fields of a flow from src to dst: nw_src/nw_dst for IPv4,
// ipv6_src/ipv6_dst for IPv6.
func addrs(src, dst netip.Addr) string {
	src, dst = src.Unmap(), dst.Unmap()
	if src.Is4() {
		return fmt.Sprintf("nw_src=%s,nw_dst=%s", src, dst)
	}
	return fmt.Sprintf("ipv6_src=%s,ipv6_dst=%s", src, dst)
}

// summarize picks the lines of an ofproto/trace output a reader looks for first: the tables hit
// with their cookies, the chosen bucket and every "Datapath actions" line.
func summarize(trace string) string {
	var b strings.Builder
	for _, l := range strings.Split(trace, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(t, "Datapath actions:"), strings.HasPrefix(t, "bridge(\""),
			strings.HasPrefix(t, "-> using bucket"), strings.Contains(t, ", cookie 0x"):
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// errFromRequired is returned by trace without --from: there is no sensible default client.
var errFromRequired = errors.New("--from is required: the external client's address as the packet arrives on the uplink, IP:PORT (e.g. --from 198.51.100.10:40000, --from [2001:db8:51::10]:40000)")

// findUplink asks the node's OVSDB (ovs-vsctl --db=db) which port of bridge is the uplink, with the
// agent's rule when --uplink is not given (ofctl.DB.EnsureIntegration): the only port that is not
// the bridge's own port and whose interface (of the same name) is not internal, patch or a tunnel.
// A port without an interface of its own name (a bond) is not a candidate. It fails when there is
// not exactly one candidate.
func findUplink(ctx context.Context, db, bridge string) (string, error) {
	vsctl := func(args ...string) (string, error) {
		argv := append([]string{"--db=" + db, "--timeout=10"}, args...)
		out, err := exec.CommandContext(ctx, "ovs-vsctl", argv...).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
			}
			return "", fmt.Errorf("ovs-vsctl %s: %w", strings.Join(argv, " "), err)
		}
		return string(out), nil
	}
	ports, err := vsctl("list-ports", bridge)
	if err != nil {
		return "", err
	}
	ifaces, err := vsctl("--format=csv", "--data=bare", "--no-headings", "--columns=name,type", "list", "Interface")
	if err != nil {
		return "", err
	}
	types := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(ifaces), "\n") {
		if name, typ, ok := strings.Cut(l, ","); ok {
			types[strings.Trim(name, `"`)] = strings.Trim(typ, `"`)
		}
	}
	var cands []string
	for _, p := range strings.Fields(ports) {
		typ, ok := types[p]
		if p == bridge || !ok {
			continue
		}
		switch typ {
		case "internal", "patch", "geneve", "vxlan", "gre", "stt":
			continue
		}
		cands = append(cands, p)
	}
	if len(cands) != 1 {
		slices.Sort(cands)
		return "", fmt.Errorf("cannot tell the uplink of %s: %d candidate ports %v; name it with --uplink", bridge, len(cands), cands)
	}
	return cands[0], nil
}

func traceCommand(out io.Writer) *cobra.Command {
	var runDir, db, bridge, uplink, proto, from, to, dlDst, agentAddr, clientMAC string
	var peers map[string]string
	var full, local bool
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Trace a new external connection to an entry point across nodes, with its reply, and give a verdict",
		Long: `Traces the first packet of a new connection from an external client (--from) to an entry point
(--to: node address:NodePort, LB IP:port or externalIP:port) with ofproto/trace: on the ingress node
(the node of --node-rundir / $OVS_RUNDIR, or --agent), the chosen endpoint, then on the endpoint's
node (traced on that node's OVS through its agent), the reply back to the ingress node and its
un-DNAT. Every table is printed with its name, the object of the flow's cookie, the group and
bucket chosen (endpoint pod and node) and the reason of a drop. The last line is the verdict:
delivered, dropped where and why, or not handled by ovs-srcip.

Each node's agent serves ofproto/trace and its status on its status socket
(<ovs-rundir>/srcip-agent.sock) and on --debug-bind-address (not on --metrics-bind-address).
Other nodes' agents are found with --peer NODE=ADDR; without it, at <parent of
--node-rundir>/<node>/srcip-agent.sock (the lab's layout). On a cluster, reach each agent with
kubectl port-forward (the DaemonSet's --debug-bind-address is the node's 127.0.0.1:9465) and name
it with --peer node2=http://127.0.0.1:PORT, or run srcipctl in the agent's Pod with kubectl exec.

Without a reachable agent (or with --local) only the ingress node is traced, through its OVS
sockets, as before: tables, bucket and datapath actions, without object names.

Client and entry point are of one family, IPv4 or IPv6 (an IPv6 address in brackets:
--from [2001:db8:51::10]:40000 --to [2001:db8::11]:30080); the underlay between the nodes is IPv4.

Example: srcipctl trace --from 198.51.100.10:40000 --to 203.0.113.100:80`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return errFromRequired
			}
			client, err := netip.ParseAddrPort(from)
			if err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			entry, err := netip.ParseAddrPort(to)
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			if proto != "tcp" && proto != "udp" {
				return fmt.Errorf("protocol %q: want tcp or udp", proto)
			}
			client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
			entry = netip.AddrPortFrom(entry.Addr().Unmap(), entry.Port())
			if err := sameFamily(client, entry); err != nil {
				return err
			}
			ctx := cmd.Context()
			if !local {
				ac, err := nodeAgent(agentAddr, runDir)
				if err != nil {
					return err
				}
				rep, rerr := ac.Report(ctx)
				if rerr == nil {
					mac, err := net.ParseMAC(clientMAC)
					if err != nil {
						return fmt.Errorf("--client-mac: %w", err)
					}
					base := pathTracer{full: full, clientMAC: mac, peer: peerFinder(peers, runDir)}
					return pathTrace(ctx, out, base, ac, rep, traceAttempts, proto, client, entry)
				}
				if agentAddr != "" {
					return rerr
				}
				fmt.Fprintf(out, "# %v\n# tracing this node's OVS only, without names (--local)\n", rerr)
			}
			return localTrace(ctx, out, runDir, db, bridge, uplink, dlDst, proto, client, entry, full)
		},
	}
	runDirFlag(cmd, &runDir, "holds <bridge>.mgmt, db.sock, the ovs-vswitchd control socket and srcip-agent.sock")
	agentFlag(cmd.Flags(), &agentAddr)
	cmd.Flags().StringToStringVar(&peers, "peer", nil, "NODE=ADDR: the agent of another node (unix:PATH, a run directory, or http://HOST:PORT); repeat per node. Default: <parent of --node-rundir>/<node>")
	cmd.Flags().StringVar(&clientMAC, "client-mac", "02:00:5e:00:53:01", "the Ethernet source of the client's packets as they arrive on the uplink (its router's MAC); replies go back to it")
	cmd.Flags().BoolVar(&local, "local", false, "trace only this node's OVS through its sockets, without its agent (no names, no other nodes)")
	cmd.Flags().StringVar(&db, "ovsdb", "", "--local: the node's OVSDB, to find the uplink when --uplink is not given; unix:PATH or a bare PATH; default unix:<node-rundir>/db.sock")
	cmd.Flags().StringVar(&bridge, "bridge", "br-ex", "--local: the external bridge")
	cmd.Flags().StringVar(&uplink, "uplink", "", "--local: the uplink port name on the external bridge; empty: the only port of the bridge that is not internal, patch or a tunnel (as the agent finds it)")
	cmd.Flags().StringVar(&proto, "proto", "tcp", "tcp or udp")
	cmd.Flags().StringVar(&from, "from", "", "the external client, IP:PORT or [IPv6]:PORT (required)")
	cmd.Flags().StringVar(&to, "to", "", "the entry point, IP:PORT or [IPv6]:PORT of the client's family (node address:NodePort, LB IP:port or externalIP:port; required)")
	cmd.Flags().StringVar(&dlDst, "dl-dst", "", "--local: the Ethernet destination of the packet (default: the bridge's LOCAL MAC, as the agent reads it)")
	cmd.Flags().BoolVar(&full, "full", false, "also print every ofproto/trace output whole")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// traceAttempts is how many times srcipctl trace runs a path trace whose flows are newer than
// the agents' reports before it prints the last one with a note.
const traceAttempts = 3

// pathTrace runs the path trace of base (its out, ingress, step and stale are set here) from the
// ingress node's agent ac with its report rep, and prints it with its verdict to out. The reports
// are read before the flows are traced, so a change the agent applies in between leaves flows
// whose cookies the report does not name ("not applied by the agent now") and an entry-point
// verdict from the old report; such a trace is run again with a new report of ac (the peers'
// reports are read anew by each attempt), at most attempts times in all. The last stale one is
// printed with a note that says so. Errors: those of the trace and of reading ac's report.
func pathTrace(ctx context.Context, out io.Writer, base pathTracer, ac *agentClient, rep *agent.Report, attempts int,
	proto string, client, entry netip.AddrPort) error {
	for i := 1; ; i++ {
		var buf bytes.Buffer
		t := base
		t.out = &buf
		t.ingress = &nodeView{name: rep.Node, c: ac, rep: rep, names: newNames(rep)}
		verdict, err := t.run(ctx, proto, client, entry)
		if err != nil {
			return err
		}
		if !t.stale || i >= attempts {
			if _, err := buf.WriteTo(out); err != nil {
				return err
			}
			if t.stale {
				fmt.Fprintf(out, "\n# note: some traced flows carry cookies that the agents' reports do not list, in %d attempts: the agent is applying changes, or another agent (an old version) wrote them\n", attempts)
			}
			fmt.Fprintf(out, "\nverdict: %s\n", verdict)
			return nil
		}
		if rep, err = ac.Report(ctx); err != nil {
			return err
		}
	}
}

// peerFinder returns how trace reaches another node's agent: peers[node], else the status socket
// in the sibling run directory <parent of runDir>/<node> (the lab's layout).
func peerFinder(peers map[string]string, runDir string) func(context.Context, string) (*agentClient, error) {
	return func(_ context.Context, node string) (*agentClient, error) {
		if a, ok := peers[node]; ok {
			return newAgentClient(a)
		}
		sock := filepath.Join(filepath.Dir(filepath.Clean(runDir)), node, statusSocketName)
		if _, err := os.Stat(sock); err != nil {
			return nil, fmt.Errorf("no agent address for node %s: give --peer %s=unix:PATH or http://HOST:PORT (looked for %s)", node, node, sock)
		}
		return newAgentClient("unix:" + sock)
	}
}

// localTrace is the single-node trace through the node's OVS sockets (no agent): the tables, the
// bucket and the datapath actions, with table names and drop reasons.
func localTrace(ctx context.Context, out io.Writer, runDir, db, bridge, uplink, dlDst, proto string, client, entry netip.AddrPort, full bool) error {
	var err error
	if uplink == "" {
		if db == "" {
			db = "unix:" + filepath.Join(runDir, "db.sock")
		}
		if db, err = ofctl.NormalizeEndpoint(db); err != nil {
			return fmt.Errorf("--ovsdb: %w", err)
		}
		if uplink, err = findUplink(ctx, db, bridge); err != nil {
			return err
		}
	}
	of := ofctl.NewOpenFlow(bridge, ofctl.MgmtTarget(runDir, bridge))
	var nodeMAC net.HardwareAddr
	if dlDst != "" {
		if nodeMAC, err = net.ParseMAC(dlDst); err != nil {
			return fmt.Errorf("--dl-dst: %w", err)
		}
	} else if nodeMAC, err = of.LocalMAC(ctx); err != nil {
		return err
	}
	flow, ctNext, err := traceFlow(uplink, nodeMAC, proto, client, entry)
	if err != nil {
		return err
	}
	tr, err := of.Trace(ctx, flow, ctNext)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "# ofproto/trace %s %s --ct-next %s\n", bridge, flow, strings.Join(ctNext, " --ct-next "))
	if full {
		fmt.Fprint(out, tr)
	} else {
		fmt.Fprint(out, summarize(tr))
	}
	r := ofctl.ParseTrace(tr, map[string]flows.Bridge{bridge: flows.BrEx, "br-int": flows.BrInt})
	t := &pathTracer{out: out}
	t.printHits(&nodeView{name: "this node"}, r)
	last, _ := r.Last()
	switch {
	case r.Dropped():
		fmt.Fprintf(out, "\nverdict: %s\n", dropVerdict("this node", r))
	case noEndpoints(last):
		fmt.Fprintf(out, "\nverdict: %s\n", rejectVerdict("this node"))
	case last.Bridge == flows.BrEx && last.Has("LOCAL"):
		fmt.Fprintf(out, "\nverdict: not handled by ovs-srcip: handed to the host stack\n")
	case r.TunDst != "":
		fmt.Fprintf(out, "\nverdict: DNAT to %s, Geneve to %s (other nodes not traced without the agent)\n", r.NATDst, r.TunDst)
	default:
		fmt.Fprintf(out, "\nverdict: DNAT to %s, delivered on this node\n", r.NATDst)
	}
	return nil
}
