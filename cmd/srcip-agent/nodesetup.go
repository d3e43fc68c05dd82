package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/nodesetup"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

type nodeSetupOptions struct {
	cfg          nodesetup.Config
	clusterCIDRs []string
	podCIDRs     []string
	nodeName     string
	kubeconfig   string
	podCIDRWait  time.Duration
	nodeIP       string
	// egressInterfaces are the --egress-interface values (NIC[=ROUTER]).
	egressInterfaces []string
	// metricsAddr and debugAddr are the agent's --metrics-bind-address and
	// --debug-bind-address, checked free before anything changes.
	metricsAddr, debugAddr string
	// routed are --non-masquerade-cidrs and --masquerade-link-local (routedFlags).
	routed routedOptions
}

// routedOptions are the routed pods' flags, the same on node-setup and the agent (give both the
// same values): ip-masq-agent's nonMasqueradeCIDRs and masqLinkLocal (docs/routed-pods.md).
type routedOptions struct {
	nonMasqueradeCIDRs  []string
	masqueradeLinkLocal string
}

// The routed pods' environment variables, the flags' defaults: the DaemonSet sets them from its
// ConfigMap instead of passing flags, so that an older srcip-agent image (a rollback that changes
// only the image tag) starts with the same manifests and ignores them.
const (
	envNonMasqueradeCIDRs  = "NON_MASQUERADE_CIDRS"
	envMasqueradeLinkLocal = "MASQUERADE_LINK_LOCAL"
)

func routedFlags(f *pflag.FlagSet, o *routedOptions) {
	var def []string
	for _, s := range strings.Split(os.Getenv(envNonMasqueradeCIDRs), ",") {
		if s = strings.TrimSpace(s); s != "" {
			def = append(def, s)
		}
	}
	f.StringSliceVar(&o.nonMasqueradeCIDRs, "non-masquerade-cidrs", def, "comma-separated CIDRs, either family (ip-masq-agent's nonMasqueradeCIDRs): routed pods - pod traffic to them leaves with the pod's IP, and hosts in them reach pods by their IP through any node (replies return through that node); hosts elsewhere reach no pod address from the uplink. Give node-setup and the agent the same value; default $"+envNonMasqueradeCIDRs+"; empty: every pod packet leaving the cluster is masqueraded (docs/routed-pods.md)")
	f.StringVar(&o.masqueradeLinkLocal, "masquerade-link-local", os.Getenv(envMasqueradeLinkLocal), "true: with --non-masquerade-cidrs, masquerade pod traffic to 169.254.0.0/16 too (ip-masq-agent's masqLinkLocal); false or empty: that range joins the non-masquerade CIDRs, as ip-masq-agent does; default $"+envMasqueradeLinkLocal)
	f.Lookup("masquerade-link-local").NoOptDefVal = "true"
}

// set returns the routed pods' CIDRs (flows.NonMasqueradeSet), nil when routed pods are off.
func (o routedOptions) set() ([]netip.Prefix, error) {
	masqLL := false
	if v := strings.TrimSpace(o.masqueradeLinkLocal); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("--masquerade-link-local (or $%s) %q: want true or false", envMasqueradeLinkLocal, v)
		}
		masqLL = b
	}
	cidrs, err := parsePrefixes(o.nonMasqueradeCIDRs)
	if err != nil {
		return nil, fmt.Errorf("--non-masquerade-cidrs: %w", err)
	}
	if len(cidrs) == 0 && masqLL {
		return nil, fmt.Errorf("--masquerade-link-local needs --non-masquerade-cidrs (without it everything leaving the cluster is masqueraded already)")
	}
	for _, p := range cidrs {
		switch {
		case p.Bits() == 0:
			return nil, fmt.Errorf("--non-masquerade-cidrs %s: every host would reach every pod by its IP and see pod addresses; list the networks that may (e.g. 192.168.10.0/24)", p)
		case p.Addr().IsLinkLocalUnicast() && p.Addr().Is6(), p.Addr().IsMulticast():
			return nil, fmt.Errorf("--non-masquerade-cidrs %s: a link-local or multicast range is never routed to or from pods", p)
		}
	}
	return flows.NonMasqueradeSet(cidrs, masqLL), nil
}

// checkNonMasquerade refuses non-masquerade CIDRs that overlap the cluster's pod CIDRs (pod
// traffic to pods is never masqueraded anyway, and pod addresses must never be a source that
// reaches pods from outside).
func checkNonMasquerade(nonMasq, cluster []netip.Prefix) error {
	for _, p := range nonMasq {
		for _, c := range cluster {
			if p.Overlaps(c) {
				return fmt.Errorf("--non-masquerade-cidrs %s overlaps the cluster CIDR %s (--cluster-cidrs): list the networks outside the cluster whose hosts may see and reach pod addresses", p, c)
			}
		}
	}
	return nil
}

// commonNodeFlags are the flags node-setup and node-teardown share.
func commonNodeFlags(f *pflag.FlagSet, o *nodeSetupOptions) {
	f.StringVar(&o.cfg.BridgeEx, "bridge-ex", nodesetup.DefaultBridgeEx, "the external bridge")
	f.StringVar(&o.cfg.BridgeInt, "bridge-int", nodesetup.DefaultBridgeInt, "the pod (integration) bridge")
	f.StringVar(&o.cfg.GatewayPort, "gateway-port", nodesetup.DefaultGatewayPort, "the host's internal port on the pod bridge, holding the pod gateway address")
	f.StringVar(&o.cfg.OVSDB, "ovsdb", "unix:/var/run/openvswitch/db.sock", "OVSDB endpoint of the node's ovsdb-server: unix:PATH (a bare /PATH is taken as unix:PATH), tcp:IP:PORT or ssl:IP:PORT")
	f.StringVar(&o.cfg.OVSRunDir, "ovs-rundir", ofctl.DefaultRunDir, "OVS run directory (<bridge>.mgmt sockets)")
	f.StringVar(&o.cfg.StateDir, "state-dir", nodesetup.DefaultStateDir, "directory of the state file that records what was moved from the NIC (node-teardown puts it back)")
	f.StringVar(&o.cfg.CNIBinDir, "cni-bin-dir", nodesetup.DefaultCNIBinDir, "the node's CNI plugin directory")
	f.StringVar(&o.cfg.CNIConfDir, "cni-conf-dir", nodesetup.DefaultCNIConfDir, "the node's CNI configuration directory (the conflist is "+nodesetup.ConflistName+")")
	f.StringVar(&o.cfg.CNIDataDir, "cni-data-dir", nodesetup.DefaultCNIDataDir, "host-local's dataDir (its allocations of network "+nodesetup.NetworkName+" are under it)")
	f.DurationVar(&o.cfg.VerifyTimeout, "verify-timeout", 10*time.Second, "how long the default gateway has to answer ARP after the NIC's addresses moved (else the move is rolled back)")
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stdout, format+"\n", args...)
}

func newNodeSetupCommand() *cobra.Command {
	o := &nodeSetupOptions{}
	cmd := &cobra.Command{
		Use:   "node-setup",
		Short: "Prepare this node for ovs-srcip (br-ex, br-int + srcip-gw0, masquerade, CNI install); idempotent",
		Long: `node-setup prepares the node, idempotently (a second run changes nothing and says so):
 1. br-ex from a plain NIC (--nic; nothing to do when br-ex already holds it): creates br-ex
    (--datapath-type, fail_mode=secure with a NORMAL flow until the agent's flows replace it) with
    the NIC's MAC, adds the NIC and moves its IPv4 and global IPv6 addresses and routes onto br-ex in one quick
    sequence, then checks that the default gateway answers through br-ex (else it rolls back).
    What was moved is saved in --state-dir for node-teardown, with a boot script
    (--state-dir/brex-boot.sh) that puts br-ex back after a reboot (docs/install.md "Reboots").
 2. br-int with the internal port srcip-gw0 holding the first address of each pod CIDR (IPv4
    and IPv6), at the pod MTU, and the cluster CIDRs routed through it.
 3. nftables table ip ovs-srcip (and ip6 ovs-srcip with an IPv6 pod CIDR): pod traffic to
    outside the cluster CIDRs is masqueraded (but to --non-masquerade-cidrs, routed pods:
    docs/routed-pods.md); forwarding through srcip-gw0 accepted;
    net.ipv4.ip_forward=1 (and net.ipv6.conf.all.forwarding=1 with an IPv6 pod CIDR).
 1b. --egress-interface NIC[=ROUTER] (repeatable): each secondary NIC becomes a second uplink of
    br-ex (Port tag 4094, external_ids ovs-srcip.io/egress-subnets), its addresses and routes move
    to br-ex, and ip rule from <its subnets> lookup <table 7100+> (default via ROUTER) routes what
    is sourced there out of it (egress IPs in those subnets, docs/egress.md "Secondary NICs").
 4. CNI: srcip-cni, host-local, loopback and portmap copied from --cni-source-dir into --cni-bin-dir, the
    conflist written in place into --cni-conf-dir.
Refused before anything changes: a NIC configured by DHCP (a dynamic address, IPv6 SLAAC
included, an IPv6 route from a router advertisement, or a DHCP client running for it: configure
it statically first), a TCP port of the agent
(--metrics-bind-address, --debug-bind-address: give the agent's values) another process listens
on, and the Geneve port (--geneve-port) held by another process or overlay than Open vSwitch.
The pod CIDR comes from --pod-cidr or from the Node object (--node-name), waiting for
spec.podCIDRs. It runs as the DaemonSet's init container (privileged, host network).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runNodeSetup(ctx, o)
		},
	}
	f := cmd.Flags()
	commonNodeFlags(f, o)
	f.StringVar(&o.cfg.NIC, "nic", "", `the plain NIC to build br-ex from ("auto": the interface of the IPv4 default route); empty: br-ex must exist already`)
	f.StringVar(&o.cfg.DatapathType, "datapath-type", "system", `datapath_type of a br-ex that node-setup creates: "system" (the openvswitch kernel module) or "netdev" (userspace); br-int gets br-ex's`)
	f.StringSliceVar(&o.clusterCIDRs, "cluster-cidrs", nil, "comma-separated pod CIDRs of the whole cluster, IPv4 and IPv6 (kube-controller-manager --cluster-cidr), routed to srcip-gw0 and never masqueraded; required")
	f.StringSliceVar(&o.podCIDRs, "pod-cidr", nil, "this node's pod CIDR(s): IPv4, or IPv4 and one IPv6 (dual-stack); default: the Node's spec.podCIDRs (--node-name)")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's Node object, for spec.podCIDRs; default $NODE_NAME")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the Kubernetes API; empty inside a Pod: the in-cluster config")
	f.DurationVar(&o.podCIDRWait, "pod-cidr-wait", 5*time.Minute, "how long to wait for the Node's spec.podCIDRs")
	f.StringVar(&o.nodeIP, "node-ip", "", "the node's InternalIP, the source address of the host's routes to the cluster CIDRs (its connections to pods on other nodes come from it); default: the Node's InternalIP when the Node is read (--node-name without --pod-cidr: its first IPv4 InternalIP, else its first IPv6 one, which makes the Geneve underlay IPv6), else br-ex's first global IPv4 address")
	f.IntVar(&o.cfg.MTU, "mtu", 0, "pod MTU (srcip-gw0 and the conflist); 0: the underlay's (br-ex's) MTU - Geneve's overhead: 50 bytes over an IPv4 underlay, 70 when the node IP (--node-ip, the Node's InternalIP) is IPv6; at least 1280 with an IPv6 pod CIDR")
	f.DurationVar(&o.cfg.FlowWait, "flow-wait", 20*time.Second, "srcip-cni's bound on the wait for the agent's flows (conflist flowWait)")
	f.StringVar(&o.cfg.CNISourceDir, "cni-source-dir", nodesetup.DefaultCNISourceDir, "directory holding srcip-cni, host-local, loopback and portmap to install")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:9464", `the agent's --metrics-bind-address (give the same value): node-setup fails, before it changes anything, when another process listens on it; "0": not checked`)
	f.IntVar(&o.cfg.GenevePort, "geneve-port", ofctl.DefaultGeneveUDPPort, `the agent's --geneve-port (UDP, Geneve between the nodes; give the same value): node-setup fails, before it changes anything, when a process other than ovs-vswitchd or another overlay's geneve/vxlan device holds it; 0: not checked`)
	f.StringVar(&o.debugAddr, "debug-bind-address", "", `the agent's --debug-bind-address (give the same value), checked like --metrics-bind-address; empty: none`)
	routedFlags(f, &o.routed)
	f.StringArrayVar(&o.egressInterfaces, "egress-interface", nil, `repeatable: NIC[=ROUTER], a secondary NIC (e.g. eth1=203.0.113.1) made a second uplink of br-ex for egress IPs inside its subnets: its addresses and routes move to br-ex, and what is sourced in its subnets is routed to ROUTER (default: the gateway of the NIC's own routes) by ip rule + table `+strconv.Itoa(nodesetup.EgressRouteTableBase)+`+ (docs/egress.md "Secondary NICs")`)
	return cmd
}

func newNodeTeardownCommand() *cobra.Command {
	o := &nodeSetupOptions{}
	cmd := &cobra.Command{
		Use:   "node-teardown",
		Short: "Undo node-setup: CNI files, nftables table, br-int with srcip-gw0, br-ex (the NIC gets its addresses and routes back); idempotent",
		Long: `node-teardown undoes node-setup, idempotently: removes the conflist, srcip-cni, host-local
and loopback and host-local's allocations of the network, deletes the nftables tables ip and ip6 ovs-srcip,
deletes br-int (with srcip-gw0 and every pod port on it), and, when node-setup built br-ex from a
NIC (its state file in --state-dir), deletes br-ex and puts the NIC's IPv4 and IPv6 addresses and routes back,
then checks that the default gateway answers, and removes the agent's flow snapshot
(--flow-snapshot), so that a later install cannot replay the old flows. net.ipv4.ip_forward and
net.ipv6.conf.all.forwarding are left at 1 (kube-proxy needs them). Stop the DaemonSet on the node first (the agent would re-create br-int).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			o.cfg.Logf = logf
			res, err := nodesetup.Teardown(ctx, o.cfg)
			if err != nil {
				return err
			}
			summary("node-teardown", res)
			return nil
		},
	}
	commonNodeFlags(cmd.Flags(), o)
	cmd.Flags().StringVar(&o.cfg.FlowSnapshot, "flow-snapshot", DefaultFlowSnapshot, `the agent's flow snapshot (its --flow-snapshot), removed with the temporary files of an interrupted write beside it; "": left alone`)
	return cmd
}

func summary(what string, res nodesetup.Result) {
	if res.Changes == 0 {
		logf("%s: nothing changed, the node was already in the wanted state", what)
	} else {
		logf("%s: done, %d changes", what, res.Changes)
	}
}

func runNodeSetup(ctx context.Context, o *nodeSetupOptions) error {
	o.cfg.Logf = logf
	o.cfg.AgentPorts = []nodesetup.AgentPort{{Flag: "--metrics-bind-address", Addr: o.metricsAddr}, {Flag: "--debug-bind-address", Addr: o.debugAddr}}
	var err error
	for _, v := range o.egressInterfaces {
		ei, err := nodesetup.ParseEgressInterface(v)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(o.cfg.EgressInterfaces, func(x nodesetup.EgressInterface) bool { return x.NIC == ei.NIC }) {
			return fmt.Errorf("--egress-interface %s given twice", ei.NIC)
		}
		o.cfg.EgressInterfaces = append(o.cfg.EgressInterfaces, ei)
	}
	if o.cfg.ClusterCIDRs, err = parsePrefixes(o.clusterCIDRs); err != nil {
		return fmt.Errorf("--cluster-cidrs: %w", err)
	}
	if o.cfg.PodCIDRs, err = parsePrefixes(o.podCIDRs); err != nil {
		return fmt.Errorf("--pod-cidr: %w", err)
	}
	if o.cfg.NonMasqueradeCIDRs, err = o.routed.set(); err != nil {
		return err
	}
	if err := checkNonMasquerade(o.cfg.NonMasqueradeCIDRs, o.cfg.ClusterCIDRs); err != nil {
		return err
	}
	if o.nodeIP != "" {
		if o.cfg.NodeIP, err = parseNodeIP(o.nodeIP); err != nil {
			return fmt.Errorf("--node-ip: %w", err)
		}
	}
	if len(o.cfg.PodCIDRs) == 0 {
		if o.nodeName == "" {
			return fmt.Errorf("give --pod-cidr, or --node-name (or $NODE_NAME) to read the Node's spec.podCIDRs")
		}
		cfg, err := kubeConfig(o.kubeconfig)
		if err != nil {
			return err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		if o.cfg.PodCIDRs, err = nodesetup.PodCIDRsFromNode(ctx, cs, o.nodeName, o.podCIDRWait, logf); err != nil {
			return err
		}
		logf("node %s: pod CIDRs %v", o.nodeName, o.cfg.PodCIDRs)
		o.cfg.PodCIDRs = familiesServed(o.cfg.PodCIDRs, o.cfg.ClusterCIDRs, logf)
		if !o.cfg.NodeIP.IsValid() {
			if o.cfg.NodeIP, err = nodesetup.NodeInternalIP(ctx, cs, o.nodeName); err != nil {
				return err
			}
			logf("node %s: InternalIP %v (the source of the routes to the cluster CIDRs)", o.nodeName, o.cfg.NodeIP)
		}
	}
	res, err := nodesetup.Setup(ctx, o.cfg)
	if err != nil {
		return err
	}
	summary("node-setup", res)
	return nil
}

// familiesServed drops the Node's IPv6 pod CIDR when --cluster-cidrs has no IPv6 CIDR (a
// dual-stack cluster whose DaemonSet was configured before ovs-srcip served IPv6): the node stays
// IPv4-only as before, and says how to serve IPv6, instead of refusing the pod CIDR as outside the
// cluster CIDRs. A --pod-cidr given by hand is taken as it is.
func familiesServed(pods, cluster []netip.Prefix, logf func(string, ...any)) []netip.Prefix {
	if slices.ContainsFunc(cluster, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
		return pods
	}
	out := slices.DeleteFunc(slices.Clone(pods), func(p netip.Prefix) bool { return p.Addr().Is6() })
	if len(out) != len(pods) {
		logf("note: the Node's IPv6 pod CIDR is not served: --cluster-cidrs %v has no IPv6 CIDR (add the cluster's IPv6 --cluster-cidr to serve IPv6 pods); pod CIDRs %v", cluster, out)
	}
	return out
}

// parseNodeIP reads --node-ip: an IPv4 address, or an IPv6 one (the node's InternalIP on an
// IPv6 underlay: Geneve's overhead is then 70 bytes); an IPv4-mapped IPv6 address reads as its
// IPv4 address. Errors: not an address, or no global unicast one (loopback, link-local,
// multicast, unspecified), which no other node could reach.
func parseNodeIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q: not an IPv4 or IPv6 address", s)
	}
	if a = a.Unmap(); !a.IsGlobalUnicast() {
		return netip.Addr{}, fmt.Errorf("%q: not a global unicast address (other nodes reach this node's host from it)", s)
	}
	return a, nil
}

func parsePrefixes(ss []string) ([]netip.Prefix, error) {
	cidrs, err := agent.ParseCIDRs(ss)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, p := range cidrs {
		out = append(out, p.Masked())
	}
	// IPv4 first, then IPv6, each in the given order (the conflist's range sets, the tables).
	slices.SortStableFunc(out, func(a, b netip.Prefix) int {
		switch {
		case a.Addr().Is4() == b.Addr().Is4():
			return 0
		case a.Addr().Is4():
			return -1
		}
		return 1
	})
	return out, nil
}
