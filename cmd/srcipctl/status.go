package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
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
			writeStatus(out, rep, readCounters(cmd, agentAddr, runDir))
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
		Short:   "One line per annotated or served Service port: opted in (yes, or yes (all mode) without the annotation) or why not, entry points, endpoints, flows (-o wide: all of them, buckets)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := readReport(cmd, agentAddr, runDir)
			if err != nil {
				return err
			}
			switch output {
			case "json":
				return writeJSON(out, rep.Services)
			case "", "wide":
				writeServices(out, rep, output == "wide")
				return nil
			}
			return fmt.Errorf("-o %q: json or wide", output)
		},
	}
	runDirFlag(svc, &runDir, "holds the agent's srcip-agent.sock")
	agentFlag(svc.Flags(), &agentAddr)
	svc.Flags().StringVarP(&output, "output", "o", "", "wide: every entry point and endpoint, the buckets and the whole notes (the default fits 100 columns); json: the Services of the agent's report")
	get.AddCommand(svc, egressCommand(out))
	return get
}

// readCounters returns the per Service port counters of the agent's /metrics, nil (and a note on
// stderr) when they cannot be read.
func readCounters(cmd *cobra.Command, agentAddr, runDir string) map[counterKey]*serviceCounters {
	c, err := nodeAgent(agentAddr, runDir)
	if err == nil {
		var text string
		if text, err = c.Metrics(cmd.Context()); err == nil {
			var m map[counterKey]*serviceCounters
			if m, err = parseServiceCounters(strings.NewReader(text)); err == nil {
				return m
			}
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "# no per Service counters: %v\n", err)
	return nil
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

// writeStatus renders the report for people, with the per Service port counters of the agent's
// /metrics under each port (counters nil: none, they could not be read; a port without them
// gets "counters: none", e.g. not applied).
func writeStatus(out io.Writer, r *agent.Report, counters map[counterKey]*serviceCounters) {
	fmt.Fprintf(out, "node %s\n", r.Node)
	if r.Version != "" {
		fmt.Fprintf(out, "  agent version:  %s\n", r.Version)
	}
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
			fmt.Fprintf(out, "  port %s/%s%s %d", p.PortName, p.Protocol, familySuffix(p), p.Port)
			if p.NodePort != 0 {
				fmt.Fprintf(out, " nodePort %d", p.NodePort)
			}
			fmt.Fprintf(out, ": %s, %d flows, group %d with %d bucket(s)\n", applied, p.Flows, p.Group, p.Buckets)
			if p.Declined != "" {
				fmt.Fprintf(out, "    %s\n", p.Declined)
			}
			fmt.Fprintf(out, "    entry points: %s\n", orDash(strings.Join(p.EntryPoints, ", ")))
			if counters != nil {
				if c := counters[counterKey{s.Namespace, s.Name, p.PortName, p.Protocol}]; c != nil {
					both := ""
					if dualPort(s.Ports, p) {
						both = " (IPv4 and IPv6 together)"
					}
					fmt.Fprintf(out, "    counters%s: %s\n", both, c)
				} else {
					fmt.Fprintf(out, "    counters: none\n")
				}
			}
			if len(p.Endpoints) == 0 {
				fmt.Fprintf(out, "    endpoints: none (new connections go to the host, whose kube-proxy rejects them: no-endpoints)\n")
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

// narrowWidth is the width get services' default table fits: its last column (NOTES) is cut to
// it, ending in "...".
const narrowWidth = 100

// writeServices renders one line per served Service port (or per annotated Service not opted
// in); OPTED IN is "yes (all mode)" for a Service served without the annotation. The default
// (wide false) fits narrowWidth columns: the first entry point and "+N" for the others, the
// number of endpoints, the notes cut (and a line that says so); wide prints every entry point
// and endpoint (pod@node or ip:port), the flows, the buckets and the whole notes.
func writeServices(out io.Writer, r *agent.Report, wide bool) {
	header := []string{"SERVICE", "PORT", "OPTED IN", "ENTRY POINTS", "ENDPOINTS", "NOTES"}
	if wide {
		header = []string{"SERVICE", "PORT", "OPTED IN", "ENTRY POINTS", "ENDPOINTS", "FLOWS", "BUCKETS", "NOTES"}
	}
	rows := [][]string{header}
	for _, s := range r.Services {
		name := s.Namespace + "/" + s.Name
		var notes []string
		for _, re := range s.Refused {
			notes = append(notes, "refused "+re.Entry)
		}
		notes = append(notes, s.Conflicts...)
		if !s.OptedIn {
			row := []string{name, "-", "no", "-", "-", strings.ReplaceAll(s.Reason, "annotation "+agent.AnnotationPreserveSourceIP, "annotation")}
			if wide {
				row = []string{name, "-", "no", "-", "-", "-", "-", s.Reason}
			}
			rows = append(rows, row)
			continue
		}
		optedIn := "yes"
		if s.Via == agent.ViaAll {
			optedIn = "yes (all mode)"
		}
		for _, d := range s.Declined {
			// The whole Service or an SCTP port: no entry point on this node, the host serves it.
			row := []string{name, "-", "declined", "-", "-", d}
			if wide {
				row = []string{name, "-", "declined", "-", "-", "-", "-", d}
			}
			rows = append(rows, row)
		}
		notes = append(notes, s.Warnings...)
		for _, p := range s.Ports {
			n := append([]string(nil), notes...)
			if p.Declined != "" {
				n = append(n, p.Declined)
			}
			if p.Cookie == "" {
				n = append(n, "not applied")
			}
			port := p.PortName + "/" + p.Protocol
			if p.PortName == "" {
				// A Service's only port may be unnamed: its number then.
				port = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
			}
			port += familySuffix(p)
			if !wide {
				entries := "-"
				if len(p.EntryPoints) > 0 {
					entries = p.EntryPoints[0]
					if len(p.EntryPoints) > 1 {
						entries += fmt.Sprintf(" +%d", len(p.EntryPoints)-1)
					}
				}
				rows = append(rows, []string{name, port, optedIn, entries, fmt.Sprint(len(p.Endpoints)), orDash(strings.Join(n, "; "))})
				continue
			}
			var eps []string
			for _, e := range p.Endpoints {
				x := e.Addr
				if e.Pod != "" {
					x = e.Pod + "@" + e.Node
				}
				eps = append(eps, x)
			}
			rows = append(rows, []string{name, port, optedIn, orDash(strings.Join(p.EntryPoints, ",")), orDash(strings.Join(eps, ",")),
				fmt.Sprint(p.Flows), fmt.Sprint(p.Buckets), orDash(strings.Join(n, "; "))})
		}
	}
	width := 0
	if !wide {
		width = narrowWidth
	}
	if writeTable(out, rows, width) > 0 {
		fmt.Fprintln(out, "(notes cut to 100 columns: -o wide prints them whole)")
	}
}

// writeTable prints rows as columns two spaces apart (as tabwriter with padding 2), without
// trailing blanks. maxWidth > 0 cuts the last column so that each line fits maxWidth (the cut
// ends in "..."; the last column keeps at least 12 characters). It returns the number of cells
// cut.
func writeTable(out io.Writer, rows [][]string, maxWidth int) int {
	if len(rows) == 0 {
		return 0
	}
	cut := 0
	cols := len(rows[0])
	widths := make([]int, cols)
	for _, r := range rows {
		for i, c := range r[:cols-1] {
			widths[i] = max(widths[i], len(c))
		}
	}
	lead := 0
	for _, w := range widths[:cols-1] {
		lead += w + 2
	}
	for _, r := range rows {
		var sb strings.Builder
		for i, c := range r[:cols-1] {
			sb.WriteString(c)
			sb.WriteString(strings.Repeat(" ", widths[i]-len(c)+2))
		}
		last := r[cols-1]
		if room := max(maxWidth-lead, 12); maxWidth > 0 && len(last) > room {
			last = last[:room-3] + "..."
			cut++
		}
		sb.WriteString(last)
		fmt.Fprintln(out, strings.TrimRight(sb.String(), " "))
	}
	return cut
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

// familySuffix is "/IPv6" for the IPv6 flow set of a Service port ("" for IPv4, whose output is
// as before families): a dual-stack port is one flow set per family (agent.ServicePortReport.
// Family), shown as "http/TCP" and "http/TCP/IPv6" like their keys.
func familySuffix(p agent.ServicePortReport) string {
	if p.Family == "IPv6" {
		return "/IPv6"
	}
	return ""
}

// dualPort reports whether ports has p's Service port in another family too (the metrics add
// the families of a port up).
func dualPort(ports []agent.ServicePortReport, p agent.ServicePortReport) bool {
	for _, o := range ports {
		if o.PortName == p.PortName && o.Protocol == p.Protocol && o.Family != p.Family {
			return true
		}
	}
	return false
}
