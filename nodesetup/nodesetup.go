// Package nodesetup is the node set-up step of ovs-srcip (srcip-agent node-setup and
// node-teardown, the DaemonSet's init container): br-ex built from a plain NIC (the NIC's IPv4
// and global IPv6 addresses and routes moved onto br-ex's internal port), br-int with the host's
// gateway port srcip-gw0 (a gateway address per pod CIDR, IPv4 and IPv6) and the routes to the
// cluster's pod CIDRs, the nftables masquerade of pod traffic leaving the cluster (table ip and,
// with an IPv6 pod CIDR, ip6 ovs-srcip), and the CNI install (plugin binaries and the conflist). Every step is
// idempotent: a second run changes nothing and says so. Teardown undoes all of it.
//
// OVS is reached only through package ofctl; links, addresses and routes through netlink;
// nftables through knftables (the nft binary).
package nodesetup

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// Defaults of Config.
const (
	DefaultBridgeEx    = "br-ex"
	DefaultBridgeInt   = "br-int"
	DefaultGatewayPort = "srcip-gw0"
	DefaultStateDir    = "/var/lib/ovs-srcip"
	DefaultCNIBinDir   = "/opt/cni/bin"
	DefaultCNIConfDir  = "/etc/cni/net.d"
	DefaultCNIDataDir  = "/var/lib/cni/networks"
	// DefaultCNISourceDir is where the image keeps srcip-cni, host-local, loopback and portmap.
	DefaultCNISourceDir = "/usr/local/lib/ovs-srcip/cni"
	// ConflistName is the conflist's file name in the CNI config directory.
	ConflistName = "10-ovs-srcip.conflist"
	// NetworkName is the conflist's network name (also host-local's directory under dataDir).
	NetworkName = "ovs-srcip"
	// NFTable is the nftables table of the masquerade: family ip, and its twin of family ip6 on a
	// node with an IPv6 pod CIDR.
	NFTable = "ovs-srcip"
	// StateFile is the file in StateDir that records what the br-ex step moved.
	StateFile = "node-setup.json"
	// GeneveOverhead is what Geneve adds to each packet over an IPv4 underlay, in bytes
	// (docs/field-cases.md#c09: outer IPv4 20 + UDP 8 + Geneve 8 + inner Ethernet 14): the pod
	// MTU is the underlay MTU minus this, for inner IPv4 and IPv6 packets alike.
	GeneveOverhead = 50
	// GeneveOverheadIPv6 is Geneve's overhead over an IPv6 underlay (a node whose NodeIP, its
	// InternalIP, is IPv6), in bytes: the 40-byte outer IPv6 header instead of IPv4's 20.
	GeneveOverheadIPv6 = 70
	// MinIPv6MTU is IPv6's minimum link MTU (RFC 8200): the least pod MTU of a node with an IPv6
	// pod CIDR.
	MinIPv6MTU = 1280
	// NICAuto as Config.NIC picks the interface of the IPv4 default route.
	NICAuto = "auto"
)

// CNIPlugins are the binaries the CNI install copies from CNISourceDir into CNIBinDir:
// the plugin, its IPAM, the loopback plugin containerd runs for every sandbox and portmap, chained
// after srcip-cni for the pods' hostPorts.
var CNIPlugins = []string{"srcip-cni", "host-local", "loopback", "portmap"}

// Config is what node-setup and node-teardown act on.
type Config struct {
	// NIC is the plain NIC to build br-ex from; "" when br-ex already exists (then it must);
	// NICAuto: the interface of the IPv4 default route (nothing to do when that is br-ex).
	NIC string
	// BridgeEx, BridgeInt and GatewayPort name br-ex, br-int and the host's gateway port.
	BridgeEx, BridgeInt, GatewayPort string
	// DatapathType is br-ex's datapath_type when node-setup creates it ("system" or "netdev");
	// br-int always gets br-ex's.
	DatapathType string
	// OVSDB is ovsdb-server's endpoint; OVSRunDir holds <bridge>.mgmt.
	OVSDB, OVSRunDir string
	// StateDir keeps the state file of the br-ex step.
	StateDir string
	// ClusterCIDRs are the cluster's pod CIDRs, IPv4 and IPv6 (routed to the gateway port; never
	// masqueraded).
	ClusterCIDRs []netip.Prefix
	// PodCIDRs are this node's pod CIDRs (IPv4, IPv6 or both: spec.podCIDRs): the gateway
	// addresses and the IPAM ranges (one range set per family). Without an IPv6 one nothing IPv6
	// is written: no IPv6 gateway address, no IPv6 range, no table ip6 ovs-srcip, no IPv6
	// forwarding sysctl.
	PodCIDRs []netip.Prefix
	// NonMasqueradeCIDRs are the routed pods' destinations, either family (the agent's
	// flows.NonMasqueradeSet of --non-masquerade-cidrs and --masquerade-link-local): pod traffic
	// to them leaves with the pod's IP (docs/routed-pods.md). Nil: everything leaving the
	// cluster is masqueraded.
	NonMasqueradeCIDRs []netip.Prefix
	// NodeIP is the node's InternalIP, the source of the host's routes to the cluster CIDRs
	// (gateway.go routeSource); invalid: br-ex's first global IPv4 address. An IPv6 NodeIP (a
	// Node without an IPv4 InternalIP) makes the Geneve underlay IPv6: the overhead is
	// GeneveOverheadIPv6, and the IPv4 routes take the IPv4 pod gateway address as source.
	NodeIP netip.Addr
	// MTU is the pod MTU (gateway port and conflist); 0: the underlay's MTU - the Geneve
	// overhead of the underlay's family (GeneveOverhead, GeneveOverheadIPv6). With an IPv6 pod
	// CIDR it must be at least MinIPv6MTU.
	MTU int
	// FlowWait is srcip-cni's bound on the wait for the agent's flows (conflist flowWait).
	FlowWait time.Duration
	// CNISourceDir, CNIBinDir, CNIConfDir and CNIDataDir: where the plugins come from and go,
	// where the conflist goes, host-local's dataDir.
	CNISourceDir, CNIBinDir, CNIConfDir, CNIDataDir string
	// VerifyTimeout bounds the check that the default gateway still answers after a move
	// (0: 10 s).
	VerifyTimeout time.Duration
	// EgressInterfaces are the secondary NICs (--egress-interface) made second uplinks of br-ex
	// for egress IPs in their subnets (egressnic.go; docs/egress.md "Secondary NICs").
	EgressInterfaces []EgressInterface
	// AgentPorts are the TCP addresses the agent will bind (--metrics-bind-address,
	// --debug-bind-address): Setup fails, before it changes anything, when one is in use by
	// another process (preflight.go checkAgentPorts).
	AgentPorts []AgentPort
	// GenevePort is the agent's --geneve-port (UDP, Geneve between the nodes): Setup fails, before
	// it changes anything, when another process or another overlay's tunnel device holds it
	// (checkGenevePort); 0: not checked.
	GenevePort int
	// FlowSnapshot is the agent's flow snapshot file (its --flow-snapshot): Teardown removes it
	// and the temporary files of an interrupted write beside it (flowsnap.WriteFile's
	// .<name>.*), so that a later install cannot replay the old pipeline; "": left alone.
	FlowSnapshot string
	// Logf reports each step's outcome (nil: discarded).
	Logf func(format string, args ...any)
}

// defaults fills in the defaults and checks what every run needs (a usable OVSDB endpoint),
// before anything on the node is changed.
func (c *Config) defaults() error {
	ep, err := ofctl.NormalizeEndpoint(c.OVSDB)
	if err != nil {
		return fmt.Errorf("--ovsdb: %w", err)
	}
	c.OVSDB = ep
	if c.BridgeEx == "" {
		c.BridgeEx = DefaultBridgeEx
	}
	if c.BridgeInt == "" {
		c.BridgeInt = DefaultBridgeInt
	}
	if c.GatewayPort == "" {
		c.GatewayPort = DefaultGatewayPort
	}
	if c.OVSRunDir == "" {
		c.OVSRunDir = ofctl.DefaultRunDir
	}
	if c.StateDir == "" {
		c.StateDir = DefaultStateDir
	}
	if c.CNIBinDir == "" {
		c.CNIBinDir = DefaultCNIBinDir
	}
	if c.CNIConfDir == "" {
		c.CNIConfDir = DefaultCNIConfDir
	}
	if c.CNIDataDir == "" {
		c.CNIDataDir = DefaultCNIDataDir
	}
	if c.CNISourceDir == "" {
		c.CNISourceDir = DefaultCNISourceDir
	}
	if c.FlowWait == 0 {
		c.FlowWait = 20 * time.Second
	}
	if c.VerifyTimeout == 0 {
		c.VerifyTimeout = 10 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.VerifyTimeout < 0 {
		return fmt.Errorf("--verify-timeout %s: must be positive", c.VerifyTimeout)
	}
	return nil
}

// Result counts what a run changed; Changes == 0 means the node was already set up (or torn
// down).
type Result struct{ Changes int }

type run struct {
	cfg *Config
	db  *ofctl.DB
	res Result
}

func (r *run) changed(format string, args ...any) {
	r.res.Changes++
	r.cfg.Logf("changed: "+format, args...)
}

func (r *run) unchanged(format string, args ...any) {
	r.cfg.Logf("unchanged: "+format, args...)
}

// Setup runs every step of the node set-up. It stops at the first error, which says what to do.
func Setup(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	if len(cfg.PodCIDRs) == 0 {
		return Result{}, errors.New("no pod CIDR: give --pod-cidr, or --node-name with a Node whose spec.podCIDRs is set (kube-controller-manager --allocate-node-cidrs)")
	}
	if err := checkPodCIDRFamilies(cfg.PodCIDRs); err != nil {
		return Result{}, err
	}
	if cfg.MTU != 0 {
		if err := checkIPv6MTU(cfg.MTU, cfg.PodCIDRs, cfg.NodeIP); err != nil {
			return Result{}, err
		}
	}
	if hasV6(cfg.PodCIDRs) {
		if _, err := os.Stat(ipv6ForwardPath); err != nil {
			return Result{}, fmt.Errorf("the node has the IPv6 pod CIDR %v but this kernel has no IPv6 (%s: %w; booted with ipv6.disable=1?): nothing was changed", ofFamily(cfg.PodCIDRs, knftables.IPv6Family), ipv6ForwardPath, err)
		}
	}
	if len(cfg.ClusterCIDRs) == 0 {
		return Result{}, errors.New("no cluster CIDR: give --cluster-cidrs (kube-controller-manager's --cluster-cidr, e.g. 10.244.0.0/16)")
	}
	if err := checkPodCIDRsInCluster(cfg.PodCIDRs, cfg.ClusterCIDRs); err != nil {
		return Result{}, err
	}
	if err := checkClusterRoutes(cfg.GatewayPort, cfg.ClusterCIDRs); err != nil {
		return Result{}, err
	}
	if err := checkEgressInterfaces(cfg); err != nil {
		return Result{}, err
	}
	if err := checkAgentPorts(cfg.AgentPorts, cfg.Logf); err != nil {
		return Result{}, err
	}
	if err := checkGenevePort(cfg.GenevePort, cfg.Logf); err != nil {
		return Result{}, err
	}
	db, err := ofctl.Connect(ctx, cfg.OVSDB)
	if err != nil {
		return Result{}, fmt.Errorf("%w (is Open vSwitch running, and %s its database socket?)", err, cfg.OVSDB)
	}
	defer db.Close()
	r := &run{cfg: &cfg, db: db}
	if err := r.preflightEgressInterfaces(ctx); err != nil {
		return r.res, err
	}
	underlayMTU, err := r.setupBrEx(ctx)
	if err != nil {
		return r.res, fmt.Errorf("br-ex: %w", err)
	}
	if err := r.setupEgressNICs(ctx); err != nil {
		return r.res, fmt.Errorf("egress interfaces: %w", err)
	}
	if err := r.writeBootScript(); err != nil {
		return r.res, fmt.Errorf("br-ex boot script: %w", err)
	}
	if cfg.MTU == 0 {
		cfg.MTU = underlayMTU - UnderlayOverhead(cfg.NodeIP)
	}
	if err := checkIPv6MTU(cfg.MTU, cfg.PodCIDRs, cfg.NodeIP); err != nil {
		return r.res, err
	}
	if err := r.setupGateway(ctx); err != nil {
		return r.res, fmt.Errorf("gateway port: %w", err)
	}
	if err := r.setupNFT(ctx); err != nil {
		return r.res, fmt.Errorf("nftables: %w", err)
	}
	if err := r.setupForwarding(); err != nil {
		return r.res, err
	}
	if err := r.installCNI(); err != nil {
		return r.res, fmt.Errorf("CNI install: %w", err)
	}
	return r.res, nil
}

// checkPodCIDRFamilies refuses a pod CIDR too small for a gateway and a pod (an IPv4 network
// longer than /30, an IPv6 one longer than /126) and two IPv6 pod CIDRs (srcip-cni gives a pod
// one address per family: host-local takes one range set per family, and a second IPv6 range
// would be a second range set). Several IPv4 pod CIDRs stay allowed (one range set, as before).
func checkPodCIDRFamilies(pods []netip.Prefix) error {
	v6 := 0
	for _, p := range pods {
		switch {
		case p.Addr().Is4() && p.Bits() > 30:
			return fmt.Errorf("pod CIDR %s: want an IPv4 network of at most /30", p)
		case p.Addr().Is6() && p.Bits() > 126:
			return fmt.Errorf("pod CIDR %s: want an IPv6 network of at most /126", p)
		case p.Addr().Is6():
			v6++
		}
	}
	if v6 > 1 {
		return fmt.Errorf("pod CIDRs %v: at most one IPv6 pod CIDR per node (spec.podCIDRs has one per family)", pods)
	}
	return nil
}

// UnderlayOverhead is Geneve's overhead on the underlay of a node whose InternalIP is nodeIP:
// GeneveOverheadIPv6 (70 bytes) for an IPv6 one, GeneveOverhead (50) otherwise (IPv4, or not
// known: br-ex's IPv4 address is the node IP then).
func UnderlayOverhead(nodeIP netip.Addr) int {
	if nodeIP.Is6() {
		return GeneveOverheadIPv6
	}
	return GeneveOverhead
}

// checkIPv6MTU refuses a pod MTU below IPv6's minimum link MTU on a node with an IPv6 pod CIDR;
// the least underlay MTU it names is that minimum plus the Geneve overhead of nodeIP's family.
func checkIPv6MTU(mtu int, pods []netip.Prefix, nodeIP netip.Addr) error {
	if hasV6(pods) && mtu < MinIPv6MTU {
		family := "IPv4"
		if nodeIP.Is6() {
			family = "IPv6"
		}
		return fmt.Errorf("pod MTU %d is below IPv6's minimum link MTU %d and the node has the IPv6 pod CIDR %v: give the underlay (br-ex) an MTU of at least %d (Geneve over %s adds %d bytes), or --mtu", mtu, MinIPv6MTU, ofFamily(pods, knftables.IPv6Family), MinIPv6MTU+UnderlayOverhead(nodeIP), family, UnderlayOverhead(nodeIP))
	}
	return nil
}

// checkPodCIDRsInCluster refuses a node pod CIDR that is not inside one of the cluster CIDRs:
// its pods' traffic would be masqueraded towards other nodes and never routed back to them.
func checkPodCIDRsInCluster(pods, cluster []netip.Prefix) error {
	for _, p := range pods {
		if !slices.ContainsFunc(cluster, func(cc netip.Prefix) bool {
			return cc.Bits() <= p.Bits() && cc.Contains(p.Masked().Addr())
		}) {
			return fmt.Errorf("pod CIDR %s is not inside the cluster CIDRs %v: give --cluster-cidrs the cluster's pod network (kube-controller-manager --cluster-cidr) that contains the node's pod CIDR", p, cluster)
		}
	}
	return nil
}

// Teardown undoes Setup: the CNI files, the nftables table, br-int with the gateway port, and
// br-ex when node-setup built it (the NIC gets its addresses and routes back). It checks its
// configuration and connects to OVSDB before it removes anything (a bad flag or an unreachable
// OVSDB changes nothing); after that it goes on after an error and returns them all.
func Teardown(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	db, err := ofctl.Connect(ctx, cfg.OVSDB)
	if err != nil {
		return Result{}, fmt.Errorf("%w (is Open vSwitch running, and %s its database socket?); nothing was removed", err, cfg.OVSDB)
	}
	defer db.Close()
	r := &run{cfg: &cfg, db: db}
	var errs []error
	if err := r.removeFlowSnapshot(); err != nil {
		errs = append(errs, fmt.Errorf("flow snapshot: %w", err))
	}
	if err := r.removeCNI(); err != nil {
		errs = append(errs, fmt.Errorf("CNI files: %w", err))
	}
	if err := r.teardownNFT(ctx); err != nil {
		errs = append(errs, fmt.Errorf("nftables: %w", err))
	}
	if err := r.teardownGateway(ctx); err != nil {
		errs = append(errs, fmt.Errorf("gateway port: %w", err))
	}
	if err := r.teardownEgressNICs(ctx); err != nil {
		errs = append(errs, fmt.Errorf("egress interfaces: %w", err))
	}
	if err := r.teardownBrEx(ctx); err != nil {
		errs = append(errs, fmt.Errorf("br-ex: %w", err))
	}
	return r.res, errors.Join(errs...)
}

// removeFlowSnapshot removes cfg.FlowSnapshot and the temporary files of an interrupted write
// beside it; the directory stays (the DaemonSet's hostPath, maybe a mount point here).
func (r *run) removeFlowSnapshot() error {
	p := r.cfg.FlowSnapshot
	if p == "" {
		return nil
	}
	files := []string{p}
	dir, tmpPrefix := filepath.Dir(p), "."+filepath.Base(p)+"."
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) && e.Type().IsRegular() {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	var errs []error
	for i, f := range files {
		switch err := os.Remove(f); {
		case err == nil:
			r.changed("removed the flow snapshot %s", f)
		case errors.Is(err, os.ErrNotExist):
			if i == 0 {
				r.unchanged("no flow snapshot %s", f)
			}
		default:
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// GatewayPrefix is the host's gateway address of pod CIDR p: its first address, with p's length
// (10.244.1.0/24 -> 10.244.1.1/24).
func GatewayPrefix(p netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(p.Masked().Addr().Next(), p.Bits())
}
