// Package lab builds an emulated multi-node Open vSwitch cluster on one machine
// (network namespaces, one ovsdb-server + ovs-vswitchd per node, userspace
// datapath) from the same Kubernetes manifests srcip-agent reads in
// --manifests mode. See docs/lab-facts.md for the pitfalls each step avoids
// ("pitfall N" below is docs/lab-facts.md#pitfall-N).
//
// The lab is dual-stack where the manifests are: a Node with an IPv6 InternalIP and an IPv6 pod
// CIDR, a pod with an IPv6 status.podIPs entry and a client with ClientSpec.IP6 get IPv6
// addresses from 2001:db8::/32 beside their IPv4 ones, the router both families and a route of
// 2001:db8:0:113::/64 to the ingress node; the underlay stays IPv4. test/README.md ("The lab's
// addresses") has the plan.
package lab

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// RouterPrefix is the router's address on the node underlay with the underlay's length
// (Config.RouterCIDR).
func (l *Lab) RouterPrefix() netip.Prefix { return l.routerIP }

// Config describes a lab. Only ManifestsDir is required.
type Config struct {
	// ManifestsDir holds Node, Pod, Service and EndpointSlice manifests.
	ManifestsDir string
	// AgentBin is the srcip-agent binary StartAgent runs (optional).
	AgentBin string
	// EchoBin is the test/echo binary; pods run "echo serve" and Request runs
	// "echo get". Without it no echo servers are started and Request fails.
	EchoBin string
	// Logf receives every command the lab runs (pass t.Logf). Nil: silent.
	Logf func(format string, args ...any)

	// Prefix names every netns and veth of the lab; default "sl" + 4 random
	// hex digits. It must match ^[a-z][a-z0-9]{1,6}$.
	Prefix string
	// BaseDir holds <Prefix>/<node>/ (OVS run/db/log dirs, logs); default
	// /tmp. Keep it short: unix socket paths must stay under 108 bytes.
	BaseDir string
	// RouterCIDR is the router's address on the node underlay; default
	// 192.0.2.1/24. All node InternalIPs must be inside it.
	RouterCIDR string
	// ClientGatewayCIDR is the router's address on the client side;
	// default 198.51.100.1/24.
	ClientGatewayCIDR string
	// RouterCIDR6 is the router's IPv6 address on the node underlay; default 2001:db8:0:2::1/64.
	// A Node with an IPv6 InternalIP must have it inside (test/README.md, the lab's addresses).
	RouterCIDR6 string
	// ClientGatewayCIDR6 is the router's IPv6 address on the client side; default
	// 2001:db8:0:100::1/64.
	ClientGatewayCIDR6 string
	// Clients are the external client netns; default one client named
	// "client" with 198.51.100.10 and 2001:db8:0:100::10.
	Clients []ClientSpec
	// Routes in the router: prefix (either family) -> node name. Default
	// {"203.0.113.0/24": IngressNode, "2001:db8:0:113::/64": IngressNode} (the IPv6 one only
	// when the ingress node has an IPv6 InternalIP). An IPv6 prefix is routed to the node's IPv6
	// InternalIP.
	Routes map[string]string
	// IngressNode is the node the default route above points to; default
	// the first node by name.
	IngressNode string
	// ClusterCIDR is the cluster's pod CIDR (every node's pod CIDR is inside it), routed by each
	// node's host into its gateway port; default 10.244.0.0/16.
	ClusterCIDR string
	// ClusterCIDR6 is the cluster's IPv6 pod CIDR (every node's IPv6 pod CIDR is inside it);
	// default 2001:db8:244::/48.
	ClusterCIDR6 string
	// NoGateway leaves out the gateway port srcip-gw0 and the masquerade (SetupGateway).
	NoGateway bool
	// GenevePort is passed to the agent as --geneve-port; default 6081.
	GenevePort int
	// AgentVerbosity is passed as --v; default 2.
	AgentVerbosity int
	// AgentArgs are appended to the agent's contract flags.
	AgentArgs []string
	// Kubeconfig, when set, makes the agents watch that Kubernetes API server (--kubeconfig)
	// instead of ManifestsDir (which still describes the lab's nodes and pods). The agents then
	// run in the root network namespace, where the API server's loopback address is; they reach
	// their node's OVS through its unix sockets, which need no namespace. Each agent's metrics
	// server is disabled there (the nodes would share one loopback).
	Kubeconfig string
	// AgentStopTimeout is how long StopAgent waits after SIGTERM before
	// SIGKILL; default 10s.
	AgentStopTimeout time.Duration
	// CommandTimeout bounds each helper command; default 60s.
	CommandTimeout time.Duration
	// RequestTimeout is passed to "echo get --timeout"; default 3s.
	RequestTimeout time.Duration
	// CopyManifests copies ManifestsDir to <Dir>/manifests and gives the agents the copy
	// (Lab.ManifestsDir): edits of the copy reach the running agents, the original stays as it
	// is. The copy goes with the lab's directory at Close.
	CopyManifests bool
}

// ClientSpec is one external client.
type ClientSpec struct {
	Name string // logical name, e.g. "client"
	IP   string // e.g. "198.51.100.10"
	// IP6 is the client's IPv6 address, e.g. "2001:db8:0:100::10"; empty: an IPv4-only client.
	IP6 string
}

// Client is a running external client netns.
type Client struct {
	Name  string
	IP    netip.Addr
	IP6   netip.Addr // invalid for an IPv4-only client
	Netns string
}

// Node is one emulated node.
type Node struct {
	Name    string
	IP      netip.Addr   // InternalIP, on br-ex
	MAC     string       // br-ex other_config:hwaddr, 02:00:<ip bytes>
	PodCIDR netip.Prefix // the IPv4 entry of spec.podCIDRs
	Gateway netip.Addr   // first address of PodCIDR: the host's address on srcip-gw0 (SetupGateway)
	// IP6, PodCIDR6 and Gateway6 are the IPv6 InternalIP (on br-ex beside IP), the IPv6 entry of
	// spec.podCIDRs and its first address (on srcip-gw0 beside Gateway): all invalid on an
	// IPv4-only Node, which then gets no IPv6 address at all.
	IP6      netip.Addr
	PodCIDR6 netip.Prefix
	Gateway6 netip.Addr
	Netns    string
	// Dir is OVS_RUNDIR = OVS_DBDIR = OVS_LOGDIR of this node.
	Dir string
	// RouterPort is the router's veth end facing this node.
	RouterPort string
	// OvsdbPid and VswitchdPid are the daemons started for this node.
	OvsdbPid, VswitchdPid int

	mu    sync.Mutex // serialises pod attachment (ovs-vsctl add-br br-int)
	agent *proc
	// extraArgs are appended to this node's agent command line (SetAgentExtraArgs).
	extraArgs []string
}

// Pod is one emulated pod.
type Pod struct {
	Namespace string
	Name      string
	NodeName  string
	IP        netip.Addr
	Prefix    netip.Prefix // IP with the node's pod CIDR length
	// IP6 is the pod's IPv6 address from status.podIPs (by family, not index) and Prefix6 it
	// with the node's IPv6 pod CIDR length; invalid for an IPv4-only pod.
	IP6      netip.Addr
	Prefix6  netip.Prefix
	MAC      string // 0a:58:<ip bytes>
	Netns    string
	HostPort string // veth end on the node's br-int
	IfaceID  string // <namespace>_<name>
	UID      string // metadata.uid, written as external_ids:iface-id-ver when set
	TCPPorts []int
	UDPPorts []int
	EchoLog  string // JSON lines logged by the echo server
	EchoPid  int

	echo *proc
}

// Lab is a running emulated cluster. Create it with New, end it with Close.
type Lab struct {
	Prefix      string
	Dir         string
	RouterNetns string
	Manifests   *Manifests
	// ManifestsDir is the directory the agents read with --manifests: Config.ManifestsDir, or
	// its copy under Dir (Config.CopyManifests).
	ManifestsDir string
	Nodes        []*Node
	Pods         []*Pod
	Clients      []*Client
	// SetupTime is how long New took.
	SetupTime time.Duration

	cfg         Config
	routerIP    netip.Prefix
	clientGW    netip.Prefix
	routerIP6   netip.Prefix
	clientGW6   netip.Prefix
	routes      map[string]string
	ingress     string
	allNetns    []string
	closeOnce   sync.Once
	closeErr    error
	closeTime   time.Duration
	mu          sync.Mutex
	netnsByName map[string]string
	// nonMasq are the routed pods' destinations the masquerade leaves out (SetNonMasquerade).
	nonMasq []netip.Prefix
}

func (l *Lab) logf(format string, args ...any) {
	if l.cfg.Logf != nil {
		l.cfg.Logf(format, args...)
	}
}

// New builds the lab: router, clients, nodes with their OVS and br-ex, pods
// attached to br-int, echo servers. Agents are not started. On error
// everything already created is torn down.
func New(cfg Config) (l *Lab, err error) {
	start := time.Now()
	if err := CheckPrograms(LabPrograms); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if cfg.ManifestsDir == "" {
		return nil, errors.New("lab: Config.ManifestsDir is required")
	}
	if cfg.ManifestsDir, err = filepath.Abs(cfg.ManifestsDir); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	m, err := LoadManifests(cfg.ManifestsDir)
	if err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if cfg.Prefix == "" {
		b := make([]byte, 2)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("lab: random prefix: %w", err)
		}
		cfg.Prefix = "sl" + hex.EncodeToString(b)
	}
	if !validPrefix(cfg.Prefix) {
		return nil, fmt.Errorf("lab: bad prefix %q (want ^[a-z][a-z0-9]{1,6}$)", cfg.Prefix)
	}
	if cfg.BaseDir == "" {
		cfg.BaseDir = "/tmp"
	}
	if cfg.RouterCIDR == "" {
		cfg.RouterCIDR = "192.0.2.1/24"
	}
	if cfg.ClientGatewayCIDR == "" {
		cfg.ClientGatewayCIDR = "198.51.100.1/24"
	}
	if cfg.RouterCIDR6 == "" {
		cfg.RouterCIDR6 = "2001:db8:0:2::1/64"
	}
	if cfg.ClientGatewayCIDR6 == "" {
		cfg.ClientGatewayCIDR6 = "2001:db8:0:100::1/64"
	}
	if len(cfg.Clients) == 0 {
		cfg.Clients = []ClientSpec{{Name: "client", IP: "198.51.100.10", IP6: "2001:db8:0:100::10"}}
	}
	if cfg.ClusterCIDR == "" {
		cfg.ClusterCIDR = "10.244.0.0/16"
	}
	if cfg.ClusterCIDR6 == "" {
		cfg.ClusterCIDR6 = "2001:db8:244::/48"
	}
	if cfg.GenevePort == 0 {
		cfg.GenevePort = 6081
	}
	if cfg.AgentVerbosity == 0 {
		cfg.AgentVerbosity = 2
	}
	if cfg.AgentStopTimeout == 0 {
		cfg.AgentStopTimeout = 10 * time.Second
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 3 * time.Second
	}
	l = &Lab{
		Prefix:      cfg.Prefix,
		Dir:         filepath.Join(cfg.BaseDir, cfg.Prefix),
		RouterNetns: cfg.Prefix + "-router",
		Manifests:   m,
		cfg:         cfg,
		netnsByName: map[string]string{},
	}
	if err := l.plan(); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if _, err := os.Stat(l.Dir); err == nil {
		return nil, fmt.Errorf("lab: %s already exists (prefix in use?)", l.Dir)
	}
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if err := writeOwner(l.Dir); err != nil {
		os.RemoveAll(l.Dir)
		return nil, fmt.Errorf("lab: %w", err)
	}
	l.ManifestsDir = cfg.ManifestsDir
	if cfg.CopyManifests {
		l.ManifestsDir = filepath.Join(l.Dir, "manifests")
		if err := os.CopyFS(l.ManifestsDir, os.DirFS(cfg.ManifestsDir)); err != nil {
			os.RemoveAll(l.Dir)
			return nil, fmt.Errorf("lab: copy the manifests: %w", err)
		}
		l.cfg.ManifestsDir = l.ManifestsDir
	}
	defer func() {
		if err != nil {
			if cerr := l.Close(); cerr != nil {
				l.logf("lab: cleanup after failed setup: %v", cerr)
			}
			l = nil
		}
	}()
	l.logf("lab %s: %d nodes, %d pods, dir %s", l.Prefix, len(l.Nodes), len(l.Pods), l.Dir)
	if err := l.setup(); err != nil {
		return l, fmt.Errorf("lab %s: %w", l.Prefix, err)
	}
	l.SetupTime = time.Since(start)
	l.logf("lab %s: setup took %s", l.Prefix, l.SetupTime.Round(time.Millisecond))
	return l, nil
}

func validPrefix(p string) bool {
	if len(p) < 2 || len(p) > 7 || p[0] < 'a' || p[0] > 'z' {
		return false
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// plan derives names and addresses from the manifests without touching the
// system.
func (l *Lab) plan() error {
	var err error
	if l.routerIP, err = netip.ParsePrefix(l.cfg.RouterCIDR); err != nil {
		return fmt.Errorf("RouterCIDR: %w", err)
	}
	if l.clientGW, err = netip.ParsePrefix(l.cfg.ClientGatewayCIDR); err != nil {
		return fmt.Errorf("ClientGatewayCIDR: %w", err)
	}
	if l.routerIP6, err = netip.ParsePrefix(l.cfg.RouterCIDR6); err != nil || !l.routerIP6.Addr().Is6() {
		return fmt.Errorf("RouterCIDR6 %q: not an IPv6 prefix (%v)", l.cfg.RouterCIDR6, err)
	}
	if l.clientGW6, err = netip.ParsePrefix(l.cfg.ClientGatewayCIDR6); err != nil || !l.clientGW6.Addr().Is6() {
		return fmt.Errorf("ClientGatewayCIDR6 %q: not an IPv6 prefix (%v)", l.cfg.ClientGatewayCIDR6, err)
	}
	cluster6, err := netip.ParsePrefix(l.cfg.ClusterCIDR6)
	if err != nil || !cluster6.Addr().Is6() {
		return fmt.Errorf("ClusterCIDR6 %q: not an IPv6 prefix (%v)", l.cfg.ClusterCIDR6, err)
	}
	l.netnsByName["router"] = l.RouterNetns
	used := map[string]bool{"router": true}
	for i := range l.Manifests.Nodes {
		kn := &l.Manifests.Nodes[i]
		ip, cidr, err := nodeFacts(kn)
		if err != nil {
			return err
		}
		if !l.routerIP.Masked().Contains(ip) {
			return fmt.Errorf("node %s: InternalIP %s outside router subnet %s", kn.Name, ip, l.routerIP)
		}
		ip6, cidr6, err := nodeFacts6(kn)
		if err != nil {
			return err
		}
		if ip6.IsValid() && !l.routerIP6.Masked().Contains(ip6) {
			return fmt.Errorf("node %s: IPv6 InternalIP %s outside router subnet %s", kn.Name, ip6, l.routerIP6)
		}
		if cidr6.IsValid() && !cluster6.Contains(cidr6.Addr()) {
			return fmt.Errorf("node %s: IPv6 pod CIDR %s outside ClusterCIDR6 %s", kn.Name, cidr6, cluster6)
		}
		if used[kn.Name] {
			return fmt.Errorf("node name %q clashes with another lab name", kn.Name)
		}
		used[kn.Name] = true
		n := &Node{
			Name:       kn.Name,
			IP:         ip,
			MAC:        "02:00:" + macBytes(ip),
			PodCIDR:    cidr,
			Gateway:    cidr.Addr().Next(),
			IP6:        ip6,
			PodCIDR6:   cidr6,
			Netns:      l.Prefix + "-" + sanitize(kn.Name),
			Dir:        filepath.Join(l.Dir, sanitize(kn.Name)),
			RouterPort: l.Prefix + "r" + strconv.Itoa(i+1),
		}
		if cidr6.IsValid() {
			n.Gateway6 = cidr6.Addr().Next()
		}
		if len(n.Dir)+len("/ovs-vswitchd.1234567.ctl") > 100 {
			return fmt.Errorf("node %s: run dir %s too long for unix sockets", n.Name, n.Dir)
		}
		l.Nodes = append(l.Nodes, n)
		l.netnsByName[n.Name] = n.Netns
	}
	for i, cs := range l.cfg.Clients {
		ip, err := netip.ParseAddr(cs.IP)
		if err != nil {
			return fmt.Errorf("client %s: %w", cs.Name, err)
		}
		if !l.clientGW.Masked().Contains(ip) {
			return fmt.Errorf("client %s: %s outside %s", cs.Name, ip, l.clientGW)
		}
		if cs.Name == "" || used[cs.Name] {
			return fmt.Errorf("client %d: empty or duplicate name %q", i, cs.Name)
		}
		used[cs.Name] = true
		c := &Client{Name: cs.Name, IP: ip, Netns: l.Prefix + "-" + sanitize(cs.Name)}
		if cs.IP6 != "" {
			if c.IP6, err = netip.ParseAddr(cs.IP6); err != nil || !c.IP6.Is6() || !l.clientGW6.Masked().Contains(c.IP6) {
				return fmt.Errorf("client %s: IPv6 address %q not inside %s (%v)", cs.Name, cs.IP6, l.clientGW6, err)
			}
		}
		l.Clients = append(l.Clients, c)
		l.netnsByName[c.Name] = c.Netns
	}
	l.ingress = l.cfg.IngressNode
	if l.ingress == "" {
		l.ingress = l.Nodes[0].Name
	}
	if l.Node(l.ingress) == nil {
		return fmt.Errorf("IngressNode %q is not a node", l.ingress)
	}
	l.routes = l.cfg.Routes
	if l.routes == nil {
		l.routes = map[string]string{"203.0.113.0/24": l.ingress}
		if l.Node(l.ingress).IP6.IsValid() {
			l.routes["2001:db8:0:113::/64"] = l.ingress
		}
	}
	for pfx, node := range l.routes {
		p, err := netip.ParsePrefix(pfx)
		if err != nil {
			return fmt.Errorf("route %s: %w", pfx, err)
		}
		n := l.Node(node)
		if n == nil {
			return fmt.Errorf("route %s: unknown node %q", pfx, node)
		}
		if p.Addr().Is6() && !n.IP6.IsValid() {
			return fmt.Errorf("route %s: node %s has no IPv6 InternalIP", pfx, node)
		}
	}
	netnsUsed := map[string]bool{}
	for _, ns := range l.netnsByName {
		netnsUsed[ns] = true
	}
	hostUsed := map[string]bool{}
	for i := range l.Manifests.Pods {
		kp := &l.Manifests.Pods[i]
		if kp.Spec.HostNetwork {
			continue
		}
		n := l.Node(kp.Spec.NodeName)
		if n == nil {
			return fmt.Errorf("pod %s/%s: spec.nodeName %q is not a node", kp.Namespace, kp.Name, kp.Spec.NodeName)
		}
		ip, ip6, err := podIPs(kp)
		if err != nil {
			return err
		}
		if !n.PodCIDR.Contains(ip) || ip == n.Gateway || ip == n.PodCIDR.Addr() {
			return fmt.Errorf("pod %s/%s: IP %s not a usable address of node %s's pod CIDR %s", kp.Namespace, kp.Name, ip, n.Name, n.PodCIDR)
		}
		if ip6.IsValid() && (!n.PodCIDR6.Contains(ip6) || ip6 == n.Gateway6 || ip6 == n.PodCIDR6.Addr()) {
			return fmt.Errorf("pod %s/%s: IPv6 %s not a usable address of node %s's IPv6 pod CIDR %v", kp.Namespace, kp.Name, ip6, n.Name, n.PodCIDR6)
		}
		p := &Pod{
			Namespace: kp.Namespace,
			Name:      kp.Name,
			NodeName:  n.Name,
			IP:        ip,
			Prefix:    netip.PrefixFrom(ip, n.PodCIDR.Bits()),
			MAC:       "0a:58:" + macBytes(ip),
			IfaceID:   kp.Namespace + "_" + kp.Name,
			UID:       string(kp.UID),
		}
		if ip6.IsValid() {
			p.IP6, p.Prefix6 = ip6, netip.PrefixFrom(ip6, n.PodCIDR6.Bits())
		}
		p.Netns = l.Prefix + "-" + sanitize(kp.Name)
		if len(p.Netns) > 40 || netnsUsed[p.Netns] {
			p.Netns = fmt.Sprintf("%s-pod%d", l.Prefix, i)
		}
		netnsUsed[p.Netns] = true
		p.HostPort = l.Prefix + "-" + sanitize(kp.Name)
		if len(p.HostPort) > 15 || hostUsed[p.HostPort] {
			p.HostPort = fmt.Sprintf("%sp%d", l.Prefix, i)
		}
		hostUsed[p.HostPort] = true
		for _, c := range kp.Spec.Containers {
			for _, cp := range c.Ports {
				switch cp.Protocol {
				case corev1.ProtocolUDP:
					p.UDPPorts = appendUniq(p.UDPPorts, int(cp.ContainerPort))
				case corev1.ProtocolSCTP:
				default:
					p.TCPPorts = appendUniq(p.TCPPorts, int(cp.ContainerPort))
				}
			}
		}
		if len(p.TCPPorts) == 0 && len(p.UDPPorts) == 0 {
			p.TCPPorts, p.UDPPorts = []int{8080}, []int{8080}
		}
		l.Pods = append(l.Pods, p)
		if _, dup := l.netnsByName[p.Name]; !dup {
			l.netnsByName[p.Name] = p.Netns
		}
		l.netnsByName[p.Namespace+"/"+p.Name] = p.Netns
	}
	l.allNetns = []string{l.RouterNetns}
	for _, c := range l.Clients {
		l.allNetns = append(l.allNetns, c.Netns)
	}
	for _, n := range l.Nodes {
		l.allNetns = append(l.allNetns, n.Netns)
	}
	for _, p := range l.Pods {
		l.allNetns = append(l.allNetns, p.Netns)
	}
	return nil
}

// podIPs returns a pod's IPv4 and IPv6 address from status.podIPs (status.podIP without it), by
// family, never by index; the IPv4 one is required, the IPv6 one optional.
func podIPs(kp *corev1.Pod) (ip, ip6 netip.Addr, err error) {
	strs := []string{kp.Status.PodIP}
	if len(kp.Status.PodIPs) > 0 {
		strs = strs[:0]
		for _, s := range kp.Status.PodIPs {
			strs = append(strs, s.IP)
		}
	}
	for _, s := range strs {
		a, perr := netip.ParseAddr(s)
		if perr != nil {
			return ip, ip6, fmt.Errorf("pod %s/%s: status.podIPs: %q: %w", kp.Namespace, kp.Name, s, perr)
		}
		switch a = a.Unmap(); {
		case a.Is4() && !ip.IsValid():
			ip = a
		case a.Is6() && !ip6.IsValid():
			ip6 = a
		default:
			return ip, ip6, fmt.Errorf("pod %s/%s: status.podIPs %v: two addresses of one family", kp.Namespace, kp.Name, strs)
		}
	}
	if !ip.IsValid() {
		return ip, ip6, fmt.Errorf("pod %s/%s: status.podIPs %v: no IPv4 address", kp.Namespace, kp.Name, strs)
	}
	return ip, ip6, nil
}

func appendUniq(s []int, v int) []int {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	s = append(s, v)
	sort.Ints(s)
	return s
}

func macBytes(ip netip.Addr) string {
	b := ip.As4()
	return fmt.Sprintf("%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

func sanitize(s string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

// Node returns the node by name, or nil.
func (l *Lab) Node(name string) *Node {
	for _, n := range l.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Pod returns the pod by "name" or "namespace/name", or nil.
func (l *Lab) Pod(name string) *Pod {
	for _, p := range l.Pods {
		if p.Name == name || p.Namespace+"/"+p.Name == name {
			return p
		}
	}
	return nil
}

// Client returns the client by name ("" = the first one), or nil.
func (l *Lab) Client(name string) *Client {
	for _, c := range l.Clients {
		if name == "" || c.Name == name {
			return c
		}
	}
	return nil
}

// IngressNode is the node the router sends LB/external IPs to by default.
func (l *Lab) IngressNode() *Node { return l.Node(l.ingress) }

// Netns maps a logical name ("router", a client, node or pod name, or
// "namespace/pod") to the lab's netns name. A netns name of this lab is
// returned unchanged.
func (l *Lab) Netns(name string) (string, error) {
	if ns, ok := l.netnsByName[name]; ok {
		return ns, nil
	}
	for _, ns := range l.allNetns {
		if ns == name {
			return ns, nil
		}
	}
	return "", fmt.Errorf("lab %s: no netns for %q", l.Prefix, name)
}

// Routes are the router's routes to nodes: prefix -> node name (Config.Routes, default
// {"203.0.113.0/24": IngressNode}): the LoadBalancer and externalIP range the lab sends to nodes.
func (l *Lab) Routes() map[string]string { return maps.Clone(l.routes) }

// NetnsNames lists every netns of the lab.
func (l *Lab) NetnsNames() []string { return append([]string(nil), l.allNetns...) }

// Pids lists the processes the lab started and tracks, by role
// ("node1/ovsdb-server", "node1/ovs-vswitchd", "node1/agent", "pod/demo/echo-a").
func (l *Lab) Pids() map[string]int {
	m := map[string]int{}
	for _, n := range l.Nodes {
		if n.OvsdbPid > 0 {
			m[n.Name+"/ovsdb-server"] = n.OvsdbPid
		}
		if n.VswitchdPid > 0 {
			m[n.Name+"/ovs-vswitchd"] = n.VswitchdPid
		}
		if n.agent != nil {
			m[n.Name+"/agent"] = n.agent.pid
		}
	}
	for _, p := range l.Pods {
		if p.echo != nil {
			m["pod/"+p.Namespace+"/"+p.Name] = p.echo.pid
		}
	}
	return m
}
