package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// egressView is one EgressGateway for `srcipctl get egress`: the agent's report of it and its
// flows on this node with their counters (read from the node's bridges).
type egressView struct {
	agent.EgressReport
	Flows []egressFlow `json:"flows"`
	// FlowsError says why the flows could not be read ("" : read).
	FlowsError string `json:"flowsError,omitempty"`
}

// egressFlow is one flow of a policy's flow sets as dump-flows shows it now.
type egressFlow struct {
	Bridge   string `json:"bridge"`
	Object   string `json:"object"` // kind and object of its flow set
	Table    string `json:"table"`
	Priority int    `json:"priority"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
	Flow     string `json:"flow"` // the dump-flows line
}

func egressCommand(out io.Writer) *cobra.Command {
	var runDir, agentAddr, output string
	cmd := &cobra.Command{
		Use:     "egress",
		Aliases: []string{"egressgateways", "egressgateway", "egw"},
		Short:   "Per EgressGateway: egress IPs, active gateway per IP, this node's role, its selected pods on this node, the egress flows with their packet counters, conditions",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := readReport(cmd, agentAddr, runDir)
			if err != nil {
				return err
			}
			views := egressViews(cmd.Context(), rep, runDir)
			if output == "json" {
				return writeJSON(out, views)
			}
			writeEgress(out, rep, views)
			return nil
		},
	}
	runDirFlag(cmd, &runDir, "holds the agent's srcip-agent.sock and br-int.mgmt, br-ex.mgmt")
	agentFlag(cmd.Flags(), &agentAddr)
	cmd.Flags().StringVarP(&output, "output", "o", "", "json: the policies as the agent reports them, with their flows and counters")
	return cmd
}

// egressViews reads the flows of each policy's flow sets (by exact cookie) from the node's
// bridges; a bridge that cannot be read leaves FlowsError set.
func egressViews(ctx context.Context, rep *agent.Report, runDir string) []egressView {
	n := newNames(rep)
	views := make([]egressView, 0, len(rep.Egress))
	for _, e := range rep.Egress {
		v := egressView{EgressReport: e, Flows: []egressFlow{}}
		for _, fs := range e.FlowSets {
			b := flows.BrInt
			if fs.Bridge == flows.BrEx.String() {
				b = flows.BrEx
			}
			of := ofctl.NewOpenFlow(fs.Bridge, ofctl.MgmtTarget(runDir, fs.Bridge))
			dump, err := of.DumpFlows(ctx, "cookie="+fs.Cookie+"/-1")
			if err != nil {
				v.FlowsError = err.Error()
				continue
			}
			for _, l := range strings.Split(strings.TrimSpace(dump), "\n") {
				f, t, ok := parseDumpLine(l, b, n)
				if !ok {
					continue
				}
				if fs.Kind == flows.KindPod.String() {
					if !flows.PodEgressFlow(t, f.Priority) {
						continue
					}
				}
				v.Flows = append(v.Flows, f)
			}
		}
		views = append(views, v)
	}
	return views
}

// parseDumpLine parses one dump-flows line of ours (false: no flow, or no cookie).
func parseDumpLine(l string, b flows.Bridge, n *names) (egressFlow, flows.Table, bool) {
	d, ok, err := ofctl.ParseFlowLine(l)
	if !ok || err != nil || d.Cookie == 0 {
		return egressFlow{}, 0, false
	}
	t, _ := tableOf(&d)
	return egressFlow{Bridge: b.String(), Object: n.cookie(d.Cookie), Table: t.Name(b), Priority: d.Priority,
		Packets: d.Packets, Bytes: d.Bytes, Flow: strings.TrimSpace(l)}, t, true
}

func writeEgress(out io.Writer, rep *agent.Report, views []egressView) {
	if len(views) == 0 {
		fmt.Fprintf(out, "no EgressGateway (node %s)\n", rep.Node)
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EGRESSGATEWAY\tEGRESS IP\tACTIVE GATEWAY\tTHIS NODE\tPODS ON "+rep.Node+"\tFLOWS\tPACKETS\tCONDITIONS")
	for _, v := range views {
		var pkts uint64
		for _, f := range v.Flows {
			pkts += f.Packets
		}
		var pods []string
		for _, p := range v.Pods {
			pods = append(pods, p.Namespace+"/"+p.Name+"("+strings.Join(p.IPs, ",")+"->"+egressIPs(p)+")")
		}
		conds := conditionsString(v.Conditions)
		if v.Invalid != "" {
			conds = "invalid: " + v.Invalid + "; " + conds
		}
		for i, ip := range v.IPs {
			name, podCol, flowCol, pktCol, condCol := v.Name, orDash(strings.Join(pods, ",")), strconv.Itoa(len(v.Flows)), strconv.FormatUint(pkts, 10), conds
			if i > 0 {
				name, podCol, flowCol, pktCol, condCol = "", "", "", "", ""
			}
			gw := orDash(ip.Gateway)
			if ip.Refused != "" {
				gw = "refused: " + ip.Refused
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, ip.IP, gw, ip.ThisNode, podCol, flowCol, pktCol, condCol)
		}
		if len(v.IPs) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%s\t%d\t%d\t%s\n", v.Name, orDash(strings.Join(pods, ",")), len(v.Flows), pkts, conds)
		}
	}
	tw.Flush()
	for _, v := range views {
		role := "not a gateway"
		if v.Gateway {
			role = "gateway"
		}
		fmt.Fprintf(out, "\negressgateway %s (generation %d) on %s: %s\n", v.Name, v.Generation, rep.Node, role)
		for _, ip := range v.IPs {
			if ip.Refused != "" {
				fmt.Fprintf(out, "  %s: refused (%s): %s\n", ip.IP, ip.Refused, ip.Message)
			}
		}
		if v.FlowsError != "" {
			fmt.Fprintf(out, "  flows not read: %s\n", v.FlowsError)
		}
		for _, f := range v.Flows {
			fmt.Fprintf(out, "  %-6s %-18s prio %-4d packets %-8d %s\n", f.Bridge, f.Table, f.Priority, f.Packets, f.Object)
			fmt.Fprintf(out, "         %s\n", f.Flow)
		}
	}
}

// conditionsString renders conditions as "Type=Status(Reason)".
func conditionsString(cs []metav1.Condition) string {
	var s []string
	for _, c := range cs {
		s = append(s, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return orDash(strings.Join(s, ","))
}

// writeEgressStatus is the egress part of `srcipctl status` (from the report only).
func writeEgressStatus(out io.Writer, r *agent.Report) {
	if len(r.Egress) == 0 {
		fmt.Fprintln(out, "no EgressGateway")
		return
	}
	for _, e := range r.Egress {
		role := "not a gateway"
		if e.Gateway {
			role = "gateway"
		}
		fmt.Fprintf(out, "egressgateway %s (generation %d): this node %s; %s\n", e.Name, e.Generation, role, conditionsString(e.Conditions))
		if e.Invalid != "" {
			fmt.Fprintf(out, "  invalid: %s\n", e.Invalid)
		}
		for _, ip := range e.IPs {
			if ip.Refused != "" {
				fmt.Fprintf(out, "  egress IP %s: refused (%s): %s\n", ip.IP, ip.Refused, ip.Message)
				continue
			}
			fmt.Fprintf(out, "  egress IP %s: active gateway %s, eligible %s, this node %s\n", ip.IP, orDash(ip.Gateway),
				orDash(strings.Join(ip.Eligible, ",")), ip.ThisNode)
		}
		for _, p := range e.Pods {
			fmt.Fprintf(out, "  selected pod %s/%s %s -> %s\n", p.Namespace, p.Name, strings.Join(p.IPs, ","), egressIPs(p))
		}
		var sets []string
		for _, fs := range e.FlowSets {
			sets = append(sets, fmt.Sprintf("%s %s (%d flows, cookie %s)", fs.Kind, fs.Object, fs.Flows, fs.Cookie))
		}
		fmt.Fprintf(out, "  flow sets: %s\n", orDash(strings.Join(sets, "; ")))
	}
}

// egressIPs is the pod's egress IP per family under the policy: "192.0.2.50", "2001:db8::50" or
// "192.0.2.50,2001:db8::50".
func egressIPs(p agent.EgressPodReport) string {
	var ips []string
	for _, ip := range []string{p.EgressIP, p.EgressIPv6} {
		if ip != "" {
			ips = append(ips, ip)
		}
	}
	return strings.Join(ips, ",")
}
