// Command srcipctl is the ovs-srcip debugging CLI. It names what Open vSwitch shows: it decodes
// cookies into the objects they serve, lists the agent's flows with table names, objects and drop
// reasons, traces a new external connection across nodes with a verdict, shows the node agent's
// status per Service, and renders (desired) or compares (diff) the flows the agent would write for
// a manifests directory or a live cluster.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

func main() {
	// The agent code srcipctl runs (desired, diff) logs through klog; its problems are shown
	// another way (desired prints them as comments).
	klog.SetLogger(logr.Discard())
	if err := newCommand(os.Stdout).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "srcipctl:", err)
		os.Exit(1)
	}
}

func newCommand(out io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "srcipctl",
		Short:         "Inspect what srcip-agent writes into Open vSwitch",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.AddCommand(cookieCommand(out), flowsCommand(out), desiredCommand(out), diffCommand(out), traceCommand(out),
		statusCommand(out), getCommand(out), groupsCommand(out), versionCommand(out))
	return root
}

func parseKind(s string) (flows.Kind, error) {
	if k, ok := flows.KindByName(s); ok {
		return k, nil
	}
	return 0, fmt.Errorf("unknown kind %q (one of %s)", s, strings.Join(flows.KindNames(), ", "))
}

// describeCookie renders owner, kind and fingerprint of c, and the object it serves when n knows
// it.
func describeCookie(c flows.Cookie, n *names) string {
	owner := "not ours"
	if c.Owned() {
		owner = "ovs-srcip"
	}
	s := fmt.Sprintf("cookie=%s owner=%#02x (%s) kind=%#02x (%s) fingerprint=%#012x",
		c, uint64(c)>>56, owner, uint8(c.Kind()), c.Kind(), uint64(c)&(1<<48-1))
	if n != nil && c.Owned() {
		s += " object=" + n.cookie(c)
		if fs, ok := n.cookies[c.String()]; ok {
			s += fmt.Sprintf(" bridge=%s flows=%d", fs.Bridge, fs.Flows)
			for _, g := range fs.Groups {
				s += fmt.Sprintf(" group=%d (%s)", g, n.group(g))
			}
		}
	}
	return s
}

// optionalNames returns the names of the node's agent, or nil (and a note on w) when it cannot be
// reached: the commands then print kinds and tables only.
func optionalNames(ctx context.Context, w io.Writer, agentAddr, runDir string) *names {
	c, err := nodeAgent(agentAddr, runDir)
	if err != nil {
		fmt.Fprintf(w, "# %v\n", err)
		return nil
	}
	rep, err := c.Report(ctx)
	if err != nil {
		fmt.Fprintf(w, "# objects not named: %v\n", err)
		return nil
	}
	return newNames(rep)
}

func cookieCommand(out io.Writer) *cobra.Command {
	var runDir, agentAddr string
	cmd := &cobra.Command{
		Use:   "cookie COOKIE...",
		Short: "Decode flow cookies (hex, as dump-flows prints them) into owner, kind, fingerprint and, from the node's agent, the object they serve",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var cs []flows.Cookie
			for _, a := range args {
				v, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(a, "cookie="), "0x"), 16, 64)
				if err != nil {
					return fmt.Errorf("cookie %q: %w", a, err)
				}
				cs = append(cs, flows.Cookie(v))
			}
			n := optionalNames(cmd.Context(), cmd.ErrOrStderr(), agentAddr, runDir)
			for _, c := range cs {
				fmt.Fprintln(out, describeCookie(c, n))
			}
			return nil
		},
	}
	runDirFlag(cmd, &runDir, "holds the agent's srcip-agent.sock")
	agentFlag(cmd.Flags(), &agentAddr)
	return cmd
}

func flowsCommand(out io.Writer) *cobra.Command {
	var runDir, bridge, kind, agentAddr string
	cmd := &cobra.Command{
		Use:   "flows",
		Short: "Dump the agent's flows of one bridge (dump-flows filtered by the owner byte), each annotated with its table name, the object it serves and the reason of a drop",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := parseBridge(bridge)
			if err != nil {
				return err
			}
			filter := fmt.Sprintf("cookie=%#x/%#x", uint64(flows.NewCookie(0, 0)), uint64(flows.OwnerMask))
			if kind != "" {
				k, err := parseKind(kind)
				if err != nil {
					return err
				}
				filter = fmt.Sprintf("cookie=%#x/%#x", uint64(flows.NewCookie(k, 0)), uint64(flows.OwnerMask|0x00ff000000000000))
			}
			of := ofctl.NewOpenFlow(bridge, ofctl.MgmtTarget(runDir, bridge))
			dump, err := of.DumpFlows(cmd.Context(), filter)
			if err != nil {
				return err
			}
			n := optionalNames(cmd.Context(), cmd.ErrOrStderr(), agentAddr, runDir)
			fmt.Fprint(out, annotateDump(dump, b, n))
			return nil
		},
	}
	runDirFlag(cmd, &runDir, "holds <bridge>.mgmt and the agent's srcip-agent.sock")
	agentFlag(cmd.Flags(), &agentAddr)
	cmd.Flags().StringVar(&bridge, "bridge", "br-ex", "bridge to dump (br-ex or br-int)")
	cmd.Flags().StringVar(&kind, "kind", "", "only flows of this kind ("+strings.Join(flows.KindNames(), ", ")+")")
	return cmd
}

// runDirFlag adds --node-rundir: the node's OVS run directory, by default $OVS_RUNDIR (as the
// ovs-* tools use it), else ofctl.DefaultRunDir.
func runDirFlag(cmd *cobra.Command, runDir *string, holds string) {
	def := ofctl.DefaultRunDir
	if d := os.Getenv("OVS_RUNDIR"); d != "" {
		def = d
	}
	cmd.Flags().StringVar(runDir, "node-rundir", def, "the node's OVS run directory ("+holds+"); the default is $OVS_RUNDIR when it is set")
}

// sourceFlags are the cluster objects desired and diff render from (a manifests directory or a
// live API server) and the agent flags that change the flows.
type sourceFlags struct {
	manifests, kubeconfig, node string
	externalIPCIDRs             []string
	nodePortAddresses           []string
	egressClusterCIDRs          []string
	nonMasqueradeCIDRs          []string
	preserveSourceIP            string
	nodePortRange               string
}

func (f *sourceFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.manifests, "manifests", "", "manifests directory (as srcip-agent --manifests)")
	cmd.Flags().StringVar(&f.kubeconfig, "kubeconfig", "", "read Nodes, Services, EndpointSlices and the node's Pods from this cluster instead (as srcip-agent --kubeconfig)")
	cmd.Flags().StringVar(&f.node, "node", "", "node name (must be one of the cluster's Nodes)")
	cmd.Flags().StringSliceVar(&f.externalIPCIDRs, "external-ip-cidrs", nil, "as srcip-agent --external-ip-cidrs: the ranges externalIPs may be served from (default none)")
	cmd.Flags().StringSliceVar(&f.nodePortAddresses, "nodeport-addresses", nil, "as srcip-agent --nodeport-addresses")
	cmd.Flags().StringSliceVar(&f.egressClusterCIDRs, "egress-cluster-cidrs", nil, "as srcip-agent --egress-cluster-cidrs")
	cmd.Flags().StringSliceVar(&f.nonMasqueradeCIDRs, "non-masquerade-cidrs", nil, "the routed pods' CIDRs as srcip-agent status reports them (its --non-masquerade-cidrs with 169.254.0.0/16 unless --masquerade-link-local; docs/routed-pods.md)")
	cmd.Flags().StringVar(&f.preserveSourceIP, "preserve-source-ip", string(agent.PreserveAnnotated), "as srcip-agent --preserve-source-ip: annotated (only Services annotated \"true\") or all (every eligible Service not annotated \"false\")")
	cmd.Flags().StringVar(&f.nodePortRange, "service-node-port-range", agent.FormatPortRange(agent.DefaultNodePortRange), "as srcip-agent --service-node-port-range")
}

// fromAgent sets every agent flag of f not given on cmd's command line to the agent's value
// (its report's flags), and the source to the agent's --manifests when neither --manifests nor
// --kubeconfig is given. It returns the flags as "--name=value" for people (those not set
// are left out), and false when the agent does not report its flags (f is unchanged).
func (f *sourceFlags) fromAgent(cmd *cobra.Command, af *agent.FlagsReport) ([]string, bool) {
	if af == nil {
		return nil, false
	}
	changed := cmd.Flags().Changed
	if !changed("manifests") && !changed("kubeconfig") {
		f.manifests = af.Manifests
	}
	if !changed("external-ip-cidrs") {
		f.externalIPCIDRs = af.ExternalIPCIDRs
	}
	if !changed("nodeport-addresses") {
		f.nodePortAddresses = af.NodePortAddresses
	}
	if !changed("egress-cluster-cidrs") {
		f.egressClusterCIDRs = af.EgressClusterCIDRs
	}
	if !changed("non-masquerade-cidrs") {
		f.nonMasqueradeCIDRs = af.NonMasqueradeCIDRs
	}
	if !changed("preserve-source-ip") && af.PreserveSourceIP != "" {
		f.preserveSourceIP = af.PreserveSourceIP
	}
	if !changed("service-node-port-range") && af.ServiceNodePortRange != "" {
		f.nodePortRange = af.ServiceNodePortRange
	}
	var out []string
	for _, kv := range [][2]string{{"manifests", f.manifests}, {"kubeconfig", f.kubeconfig},
		{"nodeport-addresses", strings.Join(f.nodePortAddresses, ",")}, {"external-ip-cidrs", strings.Join(f.externalIPCIDRs, ",")},
		{"egress-cluster-cidrs", strings.Join(f.egressClusterCIDRs, ",")}, {"non-masquerade-cidrs", strings.Join(f.nonMasqueradeCIDRs, ",")},
		{"preserve-source-ip", f.preserveSourceIP},
		{"service-node-port-range", f.nodePortRange}} {
		if kv[1] != "" {
			out = append(out, "--"+kv[0]+"="+kv[1])
		}
	}
	return out, true
}

// objects reads the cluster objects and the agent flags.
func (f *sourceFlags) objects(ctx context.Context) ([]runtime.Object, agent.DesiredOptions, error) {
	var o agent.DesiredOptions
	var err error
	if o.ExternalIPCIDRs, err = agent.ParseCIDRs(f.externalIPCIDRs); err != nil {
		return nil, o, fmt.Errorf("--external-ip-cidrs: %w", err)
	}
	if o.NodePortCIDRs, err = agent.ParseCIDRs(f.nodePortAddresses); err != nil {
		return nil, o, fmt.Errorf("--nodeport-addresses: %w", err)
	}
	if o.EgressClusterCIDRs, err = agent.ParseCIDRs(f.egressClusterCIDRs); err != nil {
		return nil, o, fmt.Errorf("--egress-cluster-cidrs: %w", err)
	}
	if o.NonMasqueradeCIDRs, err = agent.ParseCIDRs(f.nonMasqueradeCIDRs); err != nil {
		return nil, o, fmt.Errorf("--non-masquerade-cidrs: %w", err)
	}
	if o.PreserveSourceIP, err = agent.ParsePreserveMode(f.preserveSourceIP); err != nil {
		return nil, o, fmt.Errorf("--preserve-source-ip: %w", err)
	}
	if o.NodePortRange, err = agent.ParsePortRange(f.nodePortRange); err != nil {
		return nil, o, fmt.Errorf("--service-node-port-range: %w", err)
	}
	switch {
	case f.node == "":
		return nil, o, errors.New("--node is required")
	case (f.manifests == "") == (f.kubeconfig == ""):
		return nil, o, errors.New("give one of --manifests DIR and --kubeconfig FILE")
	case f.manifests != "":
		objs, err := agent.ReadManifestDir(f.manifests)
		return objs, o, err
	}
	objs, err := clusterObjects(ctx, f.kubeconfig, f.node)
	return objs, o, err
}

// clusterObjects lists what the agent of node watches: every Node, Service and EndpointSlice, and
// the Pods scheduled on node.
func clusterObjects(ctx context.Context, kubeconfig, node string) ([]runtime.Object, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	var objs []runtime.Object
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Nodes: %w", err)
	}
	for i := range nodes.Items {
		objs = append(objs, &nodes.Items[i])
	}
	svcs, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Services: %w", err)
	}
	for i := range svcs.Items {
		objs = append(objs, &svcs.Items[i])
	}
	slices, err := cs.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list EndpointSlices: %w", err)
	}
	for i := range slices.Items {
		objs = append(objs, &slices.Items[i])
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("list the Pods of %s: %w", node, err)
	}
	for i := range pods.Items {
		objs = append(objs, &pods.Items[i])
	}
	return objs, nil
}

func desiredCommand(out io.Writer) *cobra.Command {
	var src sourceFlags
	var bridge string
	cmd := &cobra.Command{
		Use:   "desired",
		Short: "Print the flows and groups the agent would write for a node of a manifests directory or a cluster (placeholder ofports and MACs; OVS untouched)",
		Long: `Renders what a first full sync of the node's agent would write into empty bridges, from a
manifests directory (--manifests) or a live cluster (--kubeconfig), with placeholder ofports and
MACs (agent.PlaceholderPorts; pod ports 100, 101, ... in name order). It fails when --node is not
one of the Nodes. Compare with a node's bridges with "srcipctl diff", which uses the node's real
ports.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			objs, o, err := src.objects(ctx)
			if err != nil {
				return err
			}
			ev := &eventList{}
			o.Events = ev
			lines, rep, err := agent.Desired(ctx, src.node, objs, o)
			if err != nil {
				return err
			}
			n := newNames(&rep)
			for _, e := range ev.lines {
				fmt.Fprintf(out, "# event: %s\n", e)
			}
			for _, b := range []flows.Bridge{flows.BrEx, flows.BrInt} {
				if bridge != "" && bridge != b.String() {
					continue
				}
				fmt.Fprintf(out, "# %s\n", b)
				fmt.Fprint(out, annotateDesired(lines[b], b, n))
			}
			return nil
		},
	}
	src.add(cmd)
	cmd.Flags().StringVar(&bridge, "bridge", "", "only this bridge (br-ex or br-int)")
	return cmd
}

func diffCommand(out io.Writer) *cobra.Command {
	var src sourceFlags
	var runDir, agentAddr string
	cmd := &cobra.Command{
		Use:   "diff",
		Short: "Compare the flow sets the agent should hold for a manifests directory or a cluster with what the node's bridges hold",
		Long: `Renders the desired flow sets of the node (as desired does) with the node's real ofports, MACs and
pod ports, read from its agent's status (so no placeholder enters the comparison), reads each
bridge's inventory (flow count per cookie, groups with their bucket counts) and prints the plan
the agent's full sync would make from them (flows.FullDiff): one line per flow set it would
re-add, with why (missing, another flow count, a group missing or with another bucket count), and
per cookie or group on a bridge that nothing desires, named by its object; it fails when there is
any. Drains and learned flows are runtime state and are listed, not counted. --node defaults to
the agent's node; every agent flag not given (--external-ip-cidrs, --nodeport-addresses,
--egress-cluster-cidrs, --preserve-source-ip, --service-node-port-range) and, without --manifests
and --kubeconfig, the agent's --manifests are taken from the agent's status, and printed in the
first line ("# rendered with ..."). An agent that does not report its flags gets a note on
stderr and the defaults of these flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := nodeAgent(agentAddr, runDir)
			if err != nil {
				return err
			}
			live, err := c.Report(ctx)
			if err != nil {
				return fmt.Errorf("diff needs the node's ofports and pod ports from its agent: %w", err)
			}
			if src.node == "" {
				src.node = live.Node
			}
			if used, ok := src.fromAgent(cmd, live.Flags); ok {
				fmt.Fprintf(out, "# rendered with %s (the agent's flags unless given)\n", strings.Join(used, " "))
			} else {
				fmt.Fprintln(cmd.ErrOrStderr(), "# the agent does not report its flags: rendering with srcipctl's (give the agent's --external-ip-cidrs and the rest)")
			}
			if src.manifests == "" && src.kubeconfig == "" {
				return errors.New("the agent reads the Kubernetes API: give --kubeconfig FILE (or --manifests DIR)")
			}
			objs, o, err := src.objects(ctx)
			if err != nil {
				return err
			}
			ports, podPorts, err := portsOf(live)
			if err != nil {
				return err
			}
			o.Ports, o.PodPorts, o.Events = &ports, podPorts, &eventList{}
			sets, _, err := agent.DesiredFlowSets(ctx, src.node, objs, o)
			if err != nil {
				return err
			}
			n := newNames(live)
			diffs := 0
			for _, b := range []flows.Bridge{flows.BrEx, flows.BrInt} {
				of := ofctl.NewOpenFlow(b.String(), ofctl.MgmtTarget(runDir, b.String()))
				inv, err := of.Inventory(ctx)
				if err != nil {
					return err
				}
				diffs += writeDiff(out, b, sets[b], inv, n)
			}
			if diffs > 0 {
				return fmt.Errorf("%d difference(s) between the desired flow sets of %s and its bridges", diffs, src.node)
			}
			fmt.Fprintln(out, "no difference")
			return nil
		},
	}
	src.add(cmd)
	runDirFlag(cmd, &runDir, "holds <bridge>.mgmt and the agent's srcip-agent.sock")
	agentFlag(cmd.Flags(), &agentAddr)
	return cmd
}

// writeDiff prints the plan of a full sync of bridge b, flows.FullDiff of desired against inv:
// "-" lines for the flow sets it re-adds (with what differs), "+" lines for the cookies and groups
// it deletes, and the runtime state it keeps or that is not the agent's to compare (learned flows,
// drains). It returns the number of differences ("-" and "+" lines).
func writeDiff(out io.Writer, b flows.Bridge, desired []*flows.FlowSet, inv flows.Inventory, n *names) int {
	plan := flows.FullDiff(b, desired, inv)
	diffs := 0
	for _, fs := range plan.Add {
		c, want := fs.Cookie(), len(fs.FlowLines())
		var problems []string
		switch got := inv.Flows[c]; {
		case got == 0 && want > 0:
			problems = append(problems, fmt.Sprintf("missing: no flow with cookie %s (want %d flows)", c, want))
		case got != want:
			problems = append(problems, fmt.Sprintf("cookie %s has %d flows, want %d", c, got, want))
		}
		for _, g := range fs.Groups {
			if !inv.Groups[g.ID] {
				problems = append(problems, fmt.Sprintf("group %d missing", g.ID))
			} else if got, ok := inv.Buckets[g.ID]; ok && got != len(g.Buckets) {
				problems = append(problems, fmt.Sprintf("group %d has %d buckets, want %d", g.ID, got, len(g.Buckets)))
			}
		}
		name := strings.TrimSpace(fs.Key.Kind.String() + " " + agent.ObjectName(fs.Key))
		diffs++
		fmt.Fprintf(out, "%s - %s: %s\n", b, name, strings.Join(problems, "; "))
	}
	// FullDiff leaves learned flows alone (but for affinity flows no flow set names, which it
	// deletes); they are listed with the cookies it deletes.
	extra := slices.Clone(plan.DeleteCookies)
	for c := range inv.Flows {
		if c.Learned() && !slices.Contains(plan.DeleteCookies, c) {
			extra = append(extra, c)
		}
	}
	slices.Sort(extra)
	for _, c := range extra {
		switch {
		case c.Learned() && !slices.Contains(plan.DeleteCookies, c):
			fmt.Fprintf(out, "%s   %s: %d learned flow(s) (runtime state)\n", b, c.Kind(), inv.Flows[c])
		case c.Kind() == flows.KindServiceDrain:
			fmt.Fprintf(out, "%s   %s: draining (runtime state)\n", b, n.cookie(c))
		default:
			diffs++
			fmt.Fprintf(out, "%s + %s: cookie %s with %d flow(s) on the bridge, not desired\n", b, n.cookie(c), c, inv.Flows[c])
		}
	}
	for _, g := range plan.DeleteGroups {
		diffs++
		fmt.Fprintf(out, "%s + group %d (%s): on the bridge, not desired\n", b, g, n.group(g))
	}
	fmt.Fprintf(out, "%s: %d flow set(s) as desired\n", b, len(desired)-len(plan.Add))
	return diffs
}

// eventList collects the Events the rendering agent would send.
type eventList struct{ lines []string }

func (e *eventList) Warn(obj runtime.Object, reason, message string) {
	name := ""
	if m, ok := obj.(metav1.Object); ok {
		name = m.GetNamespace() + "/" + m.GetName() + " "
	}
	e.lines = append(e.lines, name+reason+": "+message)
}

// parseBridge returns the bridge a --bridge flag names: br-ex or br-int.
func parseBridge(name string) (flows.Bridge, error) {
	switch name {
	case "br-ex":
		return flows.BrEx, nil
	case "br-int":
		return flows.BrInt, nil
	}
	return 0, fmt.Errorf("--bridge %q: br-ex or br-int", name)
}
