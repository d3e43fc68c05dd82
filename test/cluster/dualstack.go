package cluster

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// The dual-stack lab's IPv6 plan (Config.DualStack; documentation prefix 2001:db8::/32, the same
// plan as the OVS lab's): every IPv6 address of a node or client is its IPv4 address's subnet
// twin with the same last digits (10.89.0.11 -> 2001:db8:0:2::11, 198.51.100.10 ->
// 2001:db8:0:100::10); the router is ::1 on both segments.
const (
	// DefaultClusterCIDR6 is kube-controller-manager's IPv6 --cluster-cidr (a /64 per node:
	// 2001:db8:244::/64, 2001:db8:244:1::/64, ... in registration order).
	DefaultClusterCIDR6 = "2001:db8:244::/48"
	// DefaultServiceCIDR6 is the second --service-cluster-ip-range (IPv6 ClusterIPs).
	DefaultServiceCIDR6 = "2001:db8:96::/112"
	// NodeSubnet6 is the underlay segment's IPv6 subnet (the router's br0 has ::1, every node's
	// br-ex IPv6Of its InternalIP). The Geneve underlay itself stays IPv4.
	NodeSubnet6 = "2001:db8:0:2::/64"
	// ClientSubnet6 is the client segment's IPv6 subnet (router ::1).
	ClientSubnet6 = "2001:db8:0:100::/64"
	// ExternalCIDR6 is the IPv6 LoadBalancer/external range, routed by the router to the node the
	// IPv4 one (203.0.113.0/24) goes to.
	ExternalCIDR6 = "2001:db8:0:113::/64"
)

// ipv6Sysctls are set in every lab netns that gets an IPv6 address (docs/lab-facts.md#pitfall-7:
// no router solicitations or advertisements, no autoconfiguration; no duplicate address
// detection, so addresses are usable at once).
var ipv6Sysctls = []string{"accept_dad=0", "accept_ra=0", "autoconf=0", "router_solicitations=0"}

// IPv6Of is v4's twin in the /64 subnet: the subnet's prefix and, as the last group, v4's last
// octet written in decimal digits (10.89.0.11 in 2001:db8:0:2::/64 is 2001:db8:0:2::11).
func IPv6Of(v4 netip.Addr, subnet string) netip.Addr {
	p := netip.MustParsePrefix(subnet)
	b := p.Addr().As16()
	last, _ := strconv.ParseUint(strconv.Itoa(int(v4.As4()[3])), 16, 16)
	b[14], b[15] = byte(last>>8), byte(last)
	return netip.AddrFrom16(b)
}

// routerIPv6 is the router's address in subnet (::1).
func routerIPv6(subnet string) netip.Addr { return netip.MustParsePrefix(subnet).Addr().Next() }

// clusterCIDRs is kube-controller-manager's --cluster-cidr (also kube-proxy's clusterCIDR and
// node-setup's --cluster-cidrs): ClusterCIDR, and ClusterCIDR6 after it when dual-stack.
func (c *Cluster) clusterCIDRs() string {
	if !c.cfg.DualStack {
		return c.cfg.ClusterCIDR
	}
	return c.cfg.ClusterCIDR + "," + c.cfg.ClusterCIDR6
}

// ServiceCIDRs is the control plane's --service-cluster-ip-range.
func (c *Cluster) ServiceCIDRs() string {
	if !c.cfg.DualStack {
		return "10.96.0.0/16"
	}
	return "10.96.0.0/16," + c.cfg.ServiceCIDR6
}

// serviceCIDREnv hands the dual-stack Service CIDRs to hack/controlplane/start.sh, which test/kube
// runs with this process's environment (SRCIP_CP_SERVICE_CIDR; test/kube has no option for it),
// and returns the function that puts the environment back. Nothing when IPv4-only.
func (c *Cluster) serviceCIDREnv() func() {
	if !c.cfg.DualStack {
		return func() {}
	}
	old, had := os.LookupEnv("SRCIP_CP_SERVICE_CIDR")
	os.Setenv("SRCIP_CP_SERVICE_CIDR", c.ServiceCIDRs())
	return func() {
		if had {
			os.Setenv("SRCIP_CP_SERVICE_CIDR", old)
		} else {
			os.Unsetenv("SRCIP_CP_SERVICE_CIDR")
		}
	}
}

// ClientIP6 is the IPv6 address of the lab client named name (dual-stack only; invalid
// otherwise or for an unknown client).
func (c *Cluster) ClientIP6(name string) netip.Addr {
	if !c.cfg.DualStack || c.Lab.Client(name) == nil {
		return netip.Addr{}
	}
	return IPv6Of(c.Lab.Client(name).IP, ClientSubnet6)
}

// nodeIPs is the kubelet's --node-ip: the InternalIP, and the IPv6 one after it when dual-stack.
func (kn *KNode) nodeIPs() string {
	if !kn.IP6.IsValid() {
		return kn.IP.String()
	}
	return kn.IP.String() + "," + kn.IP6.String()
}

// sysctl6 sets net.ipv6.conf.<iface>.disable_ipv6 in the node netns.
func (kn *KNode) sysctl6(iface, disable string) error {
	_, err := kn.c.run("ip", "netns", "exec", kn.Netns, "sysctl", "-q", "-w", "net.ipv6.conf."+iface+".disable_ipv6="+disable)
	return err
}

// enable6 turns IPv6 on for ifaces of netns (the lab creates every netns with IPv6 off), without
// DAD, RA or autoconfiguration, and with forwarding when forward is set.
func (c *Cluster) enable6(netns string, forward bool, ifaces ...string) error {
	args := []string{"ip", "netns", "exec", netns, "sysctl", "-q", "-w"}
	for _, i := range append([]string{"all", "default"}, ifaces...) {
		for _, s := range ipv6Sysctls {
			args = append(args, "net.ipv6.conf."+i+"."+s)
		}
	}
	if forward {
		args = append(args, "net.ipv6.conf.all.forwarding=1")
	}
	for _, i := range ifaces {
		args = append(args, "net.ipv6.conf."+i+".disable_ipv6=0")
	}
	_, err := c.run(args...)
	return err
}

func (c *Cluster) ipBatch6(netns string, cmds ...string) error {
	_, err := c.runIn(strings.Join(cmds, "\n")+"\n", "ip", "-n", netns, "-6", "-batch", "-")
	return err
}

// setupIPv6 gives the lab IPv6 beside IPv4 (Config.DualStack): the router ::1 on the underlay
// segment (br0) and the client segment (brc), forwarding, and the route of ExternalCIDR6 to the
// node the IPv4 external range goes to; every client its IPv6Of address and a default route; every
// node IPv6Of its InternalIP on br-ex (never on eth0, which belongs to OVS: the kernel would answer
// Neighbor Solicitations for it, the IPv6 twin of docs/lab-facts.md#pitfall-2) and a default route
// via the router. The router's routes of the nodes' IPv6 pod CIDRs follow their allocation
// (routePodCIDR). "replace" everywhere: a lab that already set IPv6 up is left as it is.
func (c *Cluster) setupIPv6() error {
	r := c.Lab.RouterNetns
	if err := c.enable6(r, true, "br0", "brc"); err != nil {
		return err
	}
	if err := c.ipBatch6(r,
		"addr replace "+routerIPv6(NodeSubnet6).String()+"/64 dev br0 nodad",
		"addr replace "+routerIPv6(ClientSubnet6).String()+"/64 dev brc nodad"); err != nil {
		return err
	}
	for _, cl := range c.Lab.Clients {
		if err := c.enable6(cl.Netns, false, "eth0"); err != nil {
			return fmt.Errorf("client %s: %w", cl.Name, err)
		}
		if err := c.ipBatch6(cl.Netns,
			"addr replace "+IPv6Of(cl.IP, ClientSubnet6).String()+"/64 dev eth0 nodad",
			"route replace default via "+routerIPv6(ClientSubnet6).String()); err != nil {
			return fmt.Errorf("client %s: %w", cl.Name, err)
		}
	}
	for _, n := range c.Lab.Nodes {
		if err := c.nodeIPv6(n); err != nil {
			return err
		}
	}
	if node, ok := c.Lab.Routes()["203.0.113.0/24"]; ok {
		if err := c.ipBatch6(r, "route replace "+ExternalCIDR6+" via "+IPv6Of(c.Lab.Node(node).IP, NodeSubnet6).String()); err != nil {
			return err
		}
	}
	return nil
}

// nodeIPv6 gives node n's br-ex its IPv6Of address and the IPv6 default route via the router
// (setupIPv6; again after an ovs-vswitchd restart, which recreates br-ex's tap device).
func (c *Cluster) nodeIPv6(n *lab.Node) error {
	if err := c.enable6(n.Netns, false, "br-ex"); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if err := c.ipBatch6(n.Netns,
		"addr replace "+IPv6Of(n.IP, NodeSubnet6).String()+"/64 dev br-ex nodad",
		"route replace default via "+routerIPv6(NodeSubnet6).String()); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	return nil
}
