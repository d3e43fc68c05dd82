package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
)

func statusCommand(out io.Writer) *cobra.Command {
	var runDir, agentAddr, output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "The node agent's status: syncs, conntrack zones, and per annotated Service (and, with --preserve-source-ip=all, per Service served without the annotation) whether it is opted in (and why not), entry points, endpoints and their nodes, refusals, conflicts, flows and groups",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := readReport(cmd, agentAddr, runDir)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(out, rep)
			}
			writeStatus(out, rep)
			return nil
		},
	}
	runDirFlag(cmd, &runDir, "holds the agent's srcip-agent.sock")
	agentFlag(cmd.Flags(), &agentAddr)
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: the agent's report as it sends it")
	return cmd
}

func getCommand(out io.Writer) *cobra.Command {
	get := &cobra.Command{Use: "get", Short: "List objects as the node agent sees them"}
	var runDir, agentAddr, output string
	svc := &cobra.Command{
		Use:     "services",
		Aliases: []string{"service", "svc"},
		Short:   "One line per annotated or served Service port: opted in (yes, or yes (all mode) without the annotation) or why not, entry points, endpoints, flows, buckets",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := readReport(cmd, agentAddr, runDir)
			if err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(out, rep.Services)
			}
			writeServices(out, rep)
			return nil
		},
	}
	runDirFlag(svc, &runDir, "holds the agent's srcip-agent.sock")
	agentFlag(svc.Flags(), &agentAddr)
	svc.Flags().StringVarP(&output, "output", "o", "", "json: the Services of the agent's report")
	get.AddCommand(svc, egressCommand(out))
	return get
}

func readReport(cmd *cobra.Command, agentAddr, runDir string) (*agent.Report, error) {
	c, err := nodeAgent(agentAddr, runDir)
	if err != nil {
		return nil, err
	}
	return c.Report(cmd.Context())
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%s (%s ago)", t.Format(time.RFC3339), now.Sub(t).Round(time.Second))
}

// writeStatus renders the report for people.
func writeStatus(out io.Writer, r *agent.Report) {
	fmt.Fprintf(out, "node %s\n", r.Node)
	fmt.Fprintf(out, "  last sync:      %s\n", ago(r.LastSync, r.Time))
	fmt.Fprintf(out, "  last full sync: %s\n", ago(r.LastFullSync, r.Time))
	if !r.FailingSince.IsZero() {
		fmt.Fprintf(out, "  FAILING since %s: %s\n", r.FailingSince.Format(time.RFC3339), r.LastError)
	} else {
		fmt.Fprintf(out, "  last error:     none\n")
	}
	if r.DataplaneError != "" {
		fmt.Fprintf(out, "  OVSDB error:    %s\n", r.DataplaneError)
	}
	perKind := map[string][2]int{}
	for _, fs := range r.FlowSets {
		v := perKind[fs.Kind]
		v[0]++
		v[1] += fs.Flows
		perKind[fs.Kind] = v
	}
	var kinds []string
	for k, v := range perKind {
		kinds = append(kinds, fmt.Sprintf("%s %d/%d", k, v[0], v[1]))
	}
	sortStrings(kinds)
	fmt.Fprintf(out, "  flow sets/flows by kind: %s\n", strings.Join(kinds, ", "))
	for _, z := range r.Zones {
		lim := "no limit"
		if z.Limit > 0 {
			lim = fmt.Sprintf("limit %d", z.Limit)
		}
		fmt.Fprintf(out, "  conntrack %s (zone %d): %d entries at the last full sync, %s\n", z.Name, z.Zone, z.Entries, lim)
	}
	if r.SCTP != "" {
		fmt.Fprintf(out, "  SCTP Service ports: declined: %s\n", r.SCTP)
	}
	if len(r.Drains) > 0 {
		fmt.Fprintf(out, "  draining entry points: %s\n", strings.Join(r.Drains, ", "))
	}
	fmt.Fprintf(out, "  nodes:")
	for _, n := range r.Nodes {
		down := ""
		if n.Down {
			down = " DOWN"
		}
		fmt.Fprintf(out, " %s %s %s%s;", n.Name, n.InternalIP, strings.Join(n.PodCIDRs, ","), down)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "  local pods:")
	for _, p := range r.Pods {
		fmt.Fprintf(out, " %s/%s %s (ofport %d);", p.Namespace, p.Name, strings.Join(p.IPs, ","), p.OFPort)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out)
	writeEgressStatus(out, r)
	fmt.Fprintln(out)
	all := r.PreserveSourceIP == string(agent.PreserveAll)
	if all {
		fmt.Fprintln(out, "--preserve-source-ip=all: every eligible Service is served unless annotated ovs-srcip.io/preserve-source-ip: \"false\"")
	}
	if len(r.Services) == 0 {
		if all {
			fmt.Fprintln(out, "no Service is served or carries the annotation ovs-srcip.io/preserve-source-ip")
		} else {
			fmt.Fprintln(out, "no Service carries the annotation ovs-srcip.io/preserve-source-ip")
		}
	}
	for _, s := range r.Services {
		state := "opted in"
		if s.Via == agent.ViaAll {
			state = "served: all mode"
		}
		if !s.OptedIn {
			state = "NOT opted in: " + s.Reason
		} else if len(s.Ports) == 0 && len(s.Declined) > 0 {
			state += ", but DECLINED: no port is served by ovs-srcip on this node (see below)"
		}
		annotation := fmt.Sprintf("annotation %q", s.Annotation)
		if !s.Annotated && s.Via == agent.ViaAll {
			annotation = "no annotation"
		}
		fmt.Fprintf(out, "service %s/%s (type %s, externalTrafficPolicy %s, %s): %s\n",
			s.Namespace, s.Name, s.Type, orDash(s.ExternalTrafficPolicy), annotation, state)
		for _, re := range s.Refused {
			fmt.Fprintf(out, "  refused %s: %s\n", re.Entry, re.Reason)
		}
		for _, c := range s.Conflicts {
			fmt.Fprintf(out, "  conflict: %s\n", c)
		}
		for _, p := range s.Problems {
			fmt.Fprintf(out, "  problem: %s\n", p)
		}
		for _, d := range s.Declined {
			fmt.Fprintf(out, "  %s\n", d)
		}
		for _, w := range s.Warnings {
			fmt.Fprintf(out, "  warning: %s\n", w)
		}
		for _, p := range s.Ports {
			applied := "applied, cookie " + p.Cookie
			if p.Cookie == "" {
				applied = "NOT applied"
			}
			if p.Rejected {
				applied += ", REJECTED by Open vSwitch (see the SourceIPRejected Event)"
			}
			fmt.Fprintf(out, "  port %s/%s %d", p.PortName, p.Protocol, p.Port)
			if p.NodePort != 0 {
				fmt.Fprintf(out, " nodePort %d", p.NodePort)
			}
			fmt.Fprintf(out, ": %s, %d flows, group %d with %d bucket(s)\n", applied, p.Flows, p.Group, p.Buckets)
			if p.Declined != "" {
				fmt.Fprintf(out, "    %s\n", p.Declined)
			}
			fmt.Fprintf(out, "    entry points: %s\n", orDash(strings.Join(p.EntryPoints, ", ")))
			if len(p.Endpoints) == 0 {
				fmt.Fprintf(out, "    endpoints: none (new connections are dropped: no-endpoints)\n")
			}
			for _, e := range p.Endpoints {
				fmt.Fprintf(out, "    %s (bucket %d)\n", endpointString(e), e.Bucket)
			}
			for _, w := range p.Warnings {
				fmt.Fprintf(out, "    warning: %s\n", w)
			}
		}
	}
}

// writeServices renders one line per served Service port (or per annotated Service not opted
// in); OPTED IN is "yes (all mode)" for a Service served without the annotation.
func writeServices(out io.Writer, r *agent.Report) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tPORT\tOPTED IN\tENTRY POINTS\tENDPOINTS\tFLOWS\tBUCKETS\tNOTES")
	for _, s := range r.Services {
		name := s.Namespace + "/" + s.Name
		var notes []string
		for _, re := range s.Refused {
			notes = append(notes, "refused "+re.Entry)
		}
		notes = append(notes, s.Conflicts...)
		if !s.OptedIn {
			fmt.Fprintf(tw, "%s\t-\tno\t-\t-\t-\t-\t%s\n", name, s.Reason)
			continue
		}
		optedIn := "yes"
		if s.Via == agent.ViaAll {
			optedIn = "yes (all mode)"
		}
		for _, d := range s.Declined {
			// The whole Service or an SCTP port: no entry point on this node, the host serves it.
			fmt.Fprintf(tw, "%s\t-\tdeclined\t-\t-\t-\t-\t%s\n", name, d)
		}
		notes = append(notes, s.Warnings...)
		for _, p := range s.Ports {
			var eps []string
			for _, e := range p.Endpoints {
				x := e.Addr
				if e.Pod != "" {
					x = e.Pod + "@" + e.Node
				}
				eps = append(eps, x)
			}
			n := append([]string(nil), notes...)
			if p.Declined != "" {
				n = append(n, p.Declined)
			}
			if p.Cookie == "" {
				n = append(n, "not applied")
			}
			fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\t%d\t%d\t%s\n", name, p.PortName, p.Protocol, optedIn,
				orDash(strings.Join(p.EntryPoints, ",")), orDash(strings.Join(eps, ",")), p.Flows, p.Buckets, orDash(strings.Join(n, "; ")))
		}
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// portsOf returns the node's ports and pod ports from its agent's report.
func portsOf(r *agent.Report) (flows.Ports, []agent.PodPort, error) {
	p := r.Ports
	if p.ExUplink == 0 || p.ExMAC == "" {
		return flows.Ports{}, nil, fmt.Errorf("the agent of %s has not read its ports from OVSDB yet (no full sync): %s", r.Node, r.LastError)
	}
	ports := flows.Ports{ExUplink: p.ExUplink, ExPatch: p.ExPatch, IntPatch: p.IntPatch, IntTunnel: p.IntTunnel,
		IntGateway: p.IntGateway, TunnelUDPPort: p.TunnelUDPPort}
	var err error
	if ports.ExMAC, err = net.ParseMAC(p.ExMAC); err != nil {
		return flows.Ports{}, nil, fmt.Errorf("agent report: br-ex MAC: %w", err)
	}
	if p.GatewayMAC != "" {
		if ports.GatewayMAC, err = net.ParseMAC(p.GatewayMAC); err != nil {
			return flows.Ports{}, nil, fmt.Errorf("agent report: gateway MAC: %w", err)
		}
	}
	for _, sr := range p.Secondary {
		u := flows.SecondaryUplink{Name: sr.Name, OFPort: sr.OFPort}
		for _, n := range sr.Subnets {
			pfx, err := netip.ParsePrefix(n)
			if err != nil {
				return flows.Ports{}, nil, fmt.Errorf("agent report: secondary uplink %s: %w", sr.Name, err)
			}
			u.Subnets = append(u.Subnets, pfx)
		}
		ports.Secondary = append(ports.Secondary, u)
	}
	pps := []agent.PodPort{}
	for _, pr := range r.Pods {
		pp := agent.PodPort{Namespace: pr.Namespace, Name: pr.Name, Interface: pr.Namespace + "_" + pr.Name, OFPort: pr.OFPort}
		if pp.MAC, err = net.ParseMAC(pr.MAC); err != nil {
			return flows.Ports{}, nil, fmt.Errorf("agent report: pod %s/%s: %w", pr.Namespace, pr.Name, err)
		}
		for _, ip := range pr.IPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				pp.IPs = append(pp.IPs, a)
			}
		}
		pps = append(pps, pp)
	}
	return ports, pps, nil
}

func sortStrings(s []string) { slices.Sort(s) }
