package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// traceFlow returns the ofproto/trace flow of the first packet of a new connection from client to
// entry arriving on the uplink (by port name) addressed to the node's MAC (br-ex's: ExClassifier
// hooks only frames to it), and the --ct-next states of its two recirculations:
// ct(nat) in ExServiceLB (a new connection) and the group bucket's ct(commit,nat) (DNATed).
func traceFlow(uplink string, nodeMAC net.HardwareAddr, proto string, client, entry netip.AddrPort) (string, []string, error) {
	if !client.Addr().Is4() || !entry.Addr().Is4() {
		return "", nil, fmt.Errorf("IPv4 client and entry point required (got %s, %s)", client, entry)
	}
	// Protocol-specific port fields: ofproto/trace rejects tp_src/tp_dst on a UDP flow.
	f := fmt.Sprintf("in_port=%s,%s,dl_dst=%s,nw_src=%s,nw_dst=%s,%s_src=%d,%s_dst=%d,nw_ttl=64",
		uplink, proto, nodeMAC, client.Addr(), entry.Addr(), proto, client.Port(), proto, entry.Port())
	switch proto {
	case "tcp":
		f += ",tcp_flags=syn"
	case "udp":
	default:
		return "", nil, fmt.Errorf("protocol %q: want tcp or udp", proto)
	}
	return f, []string{"trk,new", "trk,new,dnat"}, nil
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
var errFromRequired = errors.New("--from is required: the external client's address as the packet arrives on the uplink, IP:PORT (e.g. --from 198.51.100.10:40000)")

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
	var runDir, db, bridge, uplink, proto, from, to, dlDst string
	var full bool
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "ofproto/trace the first packet of a new external connection to an entry point (NodePort, LB IP, externalIP)",
		Long: "Builds the packet a client would send to an entry point through the uplink of br-ex and runs\n" +
			"ovs-appctl ofproto/trace with --ct-next for its two conntrack recirculations, then prints the\n" +
			"tables it hit (with cookies), the select-group bucket chosen and the datapath actions.\n" +
			"Without --uplink the uplink is found in the node's OVSDB as the agent finds it.\n" +
			"Example: srcipctl trace --from 198.51.100.10:40000 --to 192.0.2.11:30080",
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
			if uplink == "" {
				if db == "" {
					db = "unix:" + filepath.Join(runDir, "db.sock")
				}
				if uplink, err = findUplink(cmd.Context(), db, bridge); err != nil {
					return err
				}
			}
			of := ofctl.NewOpenFlow(bridge, ofctl.MgmtTarget(runDir, bridge))
			var nodeMAC net.HardwareAddr
			if dlDst != "" {
				if nodeMAC, err = net.ParseMAC(dlDst); err != nil {
					return fmt.Errorf("--dl-dst: %w", err)
				}
			} else if nodeMAC, err = of.LocalMAC(cmd.Context()); err != nil {
				return err
			}
			flow, ctNext, err := traceFlow(uplink, nodeMAC, proto, client, entry)
			if err != nil {
				return err
			}
			tr, err := of.Trace(cmd.Context(), flow, ctNext)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "# ofproto/trace %s %s --ct-next %s\n", bridge, flow, strings.Join(ctNext, " --ct-next "))
			if full {
				fmt.Fprint(out, tr)
				return nil
			}
			fmt.Fprint(out, summarize(tr))
			return nil
		},
	}
	runDirFlag(cmd, &runDir, "holds <bridge>.mgmt, db.sock and the ovs-vswitchd control socket")
	cmd.Flags().StringVar(&db, "ovsdb", "", "the node's OVSDB, to find the uplink when --uplink is not given; default unix:<node-rundir>/db.sock")
	cmd.Flags().StringVar(&bridge, "bridge", "br-ex", "the external bridge")
	cmd.Flags().StringVar(&uplink, "uplink", "", "the uplink port name on the external bridge; empty: the only port of the bridge that is not internal, patch or a tunnel (as the agent finds it)")
	cmd.Flags().StringVar(&proto, "proto", "tcp", "tcp or udp")
	cmd.Flags().StringVar(&from, "from", "", "the external client, IP:PORT (required)")
	cmd.Flags().StringVar(&to, "to", "", "the entry point, IP:PORT (node address:NodePort, LB IP:port or externalIP:port; required)")
	cmd.Flags().StringVar(&dlDst, "dl-dst", "", "the Ethernet destination of the packet (default: the bridge's LOCAL MAC, as the agent reads it)")
	cmd.Flags().BoolVar(&full, "full", false, "print the whole trace")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}
