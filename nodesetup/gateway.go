package nodesetup

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// setupGateway makes br-int (br-ex's datapath type) with the internal port srcip-gw0 holding the
// gateway address of each pod CIDR (IPv4 and IPv6) at the pod MTU, up, and the cluster CIDRs
// routed through it from the node IP (routeSource; IPv6: routeSource6).
func (r *run) setupGateway(ctx context.Context) error {
	c := r.cfg
	_, dpType, err := r.db.Bridge(ctx, c.BridgeEx)
	if err != nil {
		return err
	}
	changes, err := r.db.EnsureBridge(ctx, ofctl.BridgeSpec{Name: c.BridgeInt, DatapathType: dpType,
		InternalPorts: map[string]int{c.GatewayPort: c.MTU}})
	if err != nil {
		return err
	}
	for _, ch := range changes {
		r.changed("%s", ch)
	}
	if len(changes) == 0 {
		r.unchanged("%s with internal port %s (mtu_request %d)", c.BridgeInt, c.GatewayPort, c.MTU)
	}
	if _, _, err := r.db.WaitInterface(ctx, c.GatewayPort, true, 30*time.Second); err != nil {
		return err
	}
	link, err := waitLink(ctx, c.GatewayPort, 10*time.Second)
	if err != nil {
		return err
	}
	if link.Attrs().MTU != c.MTU {
		if err := netlink.LinkSetMTU(link, c.MTU); err != nil {
			return fmt.Errorf("MTU %d on %s: %w", c.MTU, c.GatewayPort, err)
		}
		r.changed("MTU %d on %s", c.MTU, c.GatewayPort)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("set %s up: %w", c.GatewayPort, err)
		}
		r.changed("%s up", c.GatewayPort)
	}

	// Addresses: exactly the gateway addresses, link-scoped, and the node IP as a /32 of global
	// scope without a prefix route. The pods' gateway is never the host's source for traffic that
	// leaves the link: a masquerade out of srcip-gw0 (kube-proxy's, for the node's own
	// connections to a NodePort or ClusterIP whose endpoint is a pod) ignores the route's src
	// and takes the outgoing device's first address of global scope (inet_select_addr), which is
	// then the node IP - on a multi-homed host too, where without it the kernel would take the
	// host's first global address in device order, maybe another NIC's (e2e: "expected client
	// IP to be preserved" of the ExternalTrafficPolicy short-circuit).
	//
	// IPv6: the gateway address of each IPv6 pod CIDR, nodad (usable at once); its prefix route
	// (the kernel's) routes the node's IPv6 pod CIDR to srcip-gw0. IPv6 has no address scope to
	// set: the kernel's link-local fe80:: address stays, every other IPv6 address goes.
	var src netip.Addr
	want := map[netip.Prefix]int{}
	switch {
	case hasV4(c.ClusterCIDRs) && c.NodeIP.Is6():
		// An IPv6 underlay (no IPv4 InternalIP): the IPv4 routes' source is the IPv4 pod
		// gateway address, as IPv6's is (routeSource6), and no IPv4 node address is held here;
		// the replies route back by their destination, this node's pod CIDR (the flows commit
		// no OriginNode over an IPv6 underlay).
		src = routeSourceV4Gateway(c)
	case hasV4(c.ClusterCIDRs):
		if src, err = routeSource(c); err != nil {
			return err
		}
		want[netip.PrefixFrom(src, 32)] = unix.RT_SCOPE_UNIVERSE
	}
	nodeIP := netip.PrefixFrom(src, 32)
	for _, p := range c.PodCIDRs {
		want[GatewayPrefix(p)] = unix.RT_SCOPE_LINK
		if p.Addr().Is6() {
			want[GatewayPrefix(p)] = unix.RT_SCOPE_UNIVERSE
		}
	}
	if hasV6(c.PodCIDRs) {
		// A new device takes net.ipv6.conf.default: IPv6 may be off on it.
		if err := ensureIPv6On(c.GatewayPort); err != nil {
			return err
		}
	}
	have, err := netlink.AddrList(link, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", c.GatewayPort, err)
	}
	have6, err := netlink.AddrList(link, unix.AF_INET6)
	if err != nil {
		return fmt.Errorf("IPv6 addresses of %s: %w", c.GatewayPort, err)
	}
	for _, a := range have6 {
		if !a.IP.IsLinkLocalUnicast() {
			have = append(have, a)
		}
	}
	for _, a := range have {
		p := ipNetPrefix(a.IPNet)
		scope, ok := want[p]
		if ok && (a.Scope == scope || p.Addr().Is6()) {
			delete(want, p)
			r.unchanged("address %s on %s", p, c.GatewayPort)
			continue
		}
		if err := netlink.AddrDel(link, &a); err != nil {
			return fmt.Errorf("remove stale address %s from %s: %w", p, c.GatewayPort, err)
		}
		if ok {
			r.changed("removed address %s from %s to add it with scope %d", p, c.GatewayPort, scope)
			continue
		}
		r.changed("removed stale address %s from %s", p, c.GatewayPort)
	}
	for _, p := range sortedKeys(want) {
		addr := &netlink.Addr{IPNet: prefixIPNet(p), Scope: want[p]}
		if p == nodeIP {
			addr.Flags = unix.IFA_F_NOPREFIXROUTE
		}
		if p.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return fmt.Errorf("address %s on %s: %w", p, c.GatewayPort, err)
		}
		r.changed("address %s on %s", p, c.GatewayPort)
	}

	// Routes: each cluster CIDR dev srcip-gw0 src <node IP>; a cluster CIDR routed through
	// another device is refused (checkClusterRoutes, again here for a route added since).
	if err := checkClusterRoutes(c.GatewayPort, c.ClusterCIDRs); err != nil {
		return err
	}
	var src6 netip.Addr
	if hasV6(c.ClusterCIDRs) {
		if src6, err = routeSource6(c); err != nil {
			return err
		}
	}
	for _, cc := range c.ClusterCIDRs {
		want := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixIPNet(cc.Masked()), Src: net.IP(src.AsSlice()),
			Scope: netlink.SCOPE_LINK, Table: unix.RT_TABLE_MAIN, Protocol: unix.RTPROT_STATIC, Family: unix.AF_INET}
		if cc.Addr().Is6() {
			// IPv6 routes have no scope (universe); the source is the node's IPv6 pod gateway
			// address (routeSource6), else the kernel's choice.
			want.Family, want.Scope, want.Src, want.Priority = unix.AF_INET6, netlink.SCOPE_UNIVERSE, nil, ipv6RouteMetric
			if src6.IsValid() {
				want.Src = net.IP(src6.AsSlice())
			}
		}
		src := src
		if cc.Addr().Is6() {
			src = src6
		}
		routes, err := netlink.RouteListFiltered(want.Family, &netlink.Route{Dst: want.Dst, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("routes to %s: %w", cc, err)
		}
		if slices.ContainsFunc(routes, func(rt netlink.Route) bool {
			return rt.LinkIndex == want.LinkIndex && rt.Src.Equal(want.Src) && rt.Gw == nil && rt.Priority == want.Priority
		}) {
			r.unchanged("route %s dev %s src %s", cc, c.GatewayPort, src)
			continue
		}
		if err := netlink.RouteReplace(want); err != nil {
			return fmt.Errorf("route %s dev %s src %s: %w", cc, c.GatewayPort, src, err)
		}
		r.changed("route %s dev %s src %s", cc, c.GatewayPort, src)
	}
	// Routes on srcip-gw0 to what is no longer a cluster CIDR (--cluster-cidrs changed) go; the
	// kernel's own routes of the gateway addresses stay.
	wantDst := map[netip.Prefix]bool{}
	for _, cc := range c.ClusterCIDRs {
		wantDst[cc.Masked()] = true
	}
	for _, p := range c.PodCIDRs {
		wantDst[p.Masked()] = true
	}
	var onGw []netlink.Route
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("routes on %s: %w", c.GatewayPort, err)
		}
		onGw = append(onGw, rs...)
	}
	for _, rt := range onGw {
		if rt.Dst == nil || rt.Protocol == unix.RTPROT_KERNEL || wantDst[ipNetPrefix(rt.Dst)] {
			continue
		}
		if err := netlink.RouteDel(&rt); err != nil {
			return fmt.Errorf("remove stale route %s dev %s: %w", rt.Dst, c.GatewayPort, err)
		}
		r.changed("removed stale route %s dev %s (not in the cluster CIDRs %v)", rt.Dst, c.GatewayPort, c.ClusterCIDRs)
	}
	return nil
}

// routeSource is the source address of the host's routes to the cluster CIDRs: the node IP
// (Config.NodeIP, else br-ex's first global IPv4 address, which holds the node IP), so that
// the host's own connections to pods on other nodes (a hostNetwork client; not a masquerade,
// which ignores the route's source: see setupGateway) come from the node's InternalIP, as with
// the reference CNIs, and not from this node's pod gateway address. The node's own pod CIDRs keep
// the kernel's route from the gateway address (kubelet probes of local pods).
func routeSource(c *Config) (netip.Addr, error) {
	local := func(a netip.Addr) (bool, error) {
		addrs, err := netlink.AddrList(nil, unix.AF_INET)
		if err != nil {
			return false, fmt.Errorf("addresses of the host: %w", err)
		}
		return slices.ContainsFunc(addrs, func(x netlink.Addr) bool { return ipNetPrefix(x.IPNet).Addr() == a }), nil
	}
	if c.NodeIP.IsValid() {
		ok, err := local(c.NodeIP)
		if err != nil {
			return netip.Addr{}, err
		}
		if !ok {
			return netip.Addr{}, fmt.Errorf("node IP %s is not an address of this host: give --node-ip the node's InternalIP (held on %s)", c.NodeIP, c.BridgeEx)
		}
		return c.NodeIP, nil
	}
	link, err := netlink.LinkByName(c.BridgeEx)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s: %w", c.BridgeEx, err)
	}
	addrs, err := netlink.AddrList(link, unix.AF_INET)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("addresses of %s: %w", c.BridgeEx, err)
	}
	for _, a := range addrs {
		if a.Scope == unix.RT_SCOPE_UNIVERSE && a.Flags&unix.IFA_F_SECONDARY == 0 {
			return ipNetPrefix(a.IPNet).Addr(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s has no global IPv4 address (the node IP) to use as the source of the routes to the pods: give --node-ip", c.BridgeEx)
}

// routeSourceV4Gateway is the source of the host's IPv4 routes to the cluster CIDRs on an IPv6
// underlay: the gateway address of this node's IPv4 pod CIDR; invalid without one (the kernel
// chooses).
func routeSourceV4Gateway(c *Config) netip.Addr {
	for _, p := range c.PodCIDRs {
		if p.Addr().Is4() {
			return GatewayPrefix(p).Addr()
		}
	}
	return netip.Addr{}
}

// routeSource6 is the source of the host's IPv6 connections to the cluster CIDRs: the gateway
// address of this node's IPv6 pod CIDR (GatewayPrefix), invalid without one (the kernel chooses).
// Not br-ex's IPv6 address: IPv6 has no twin of the IPv4 OriginNode path (which records the
// InternalIP and tunnels the replies back), so a remote pod's node routes a reply by its
// destination alone: to this node's pod CIDR it goes back over Geneve to srcip-gw0, symmetric
// with the request; to the node's IPv6 InternalIP it would leave through that node's own host.
func routeSource6(c *Config) (netip.Addr, error) {
	for _, p := range c.PodCIDRs {
		if p.Addr().Is6() {
			return GatewayPrefix(p).Addr(), nil
		}
	}
	return netip.Addr{}, nil
}

// ipv6RouteMetric is the metric the kernel gives an IPv6 route added without one
// (IP6_RT_PRIO_USER), set explicitly on the routes to the IPv6 cluster CIDRs.
const ipv6RouteMetric = 1024

// ensureIPv6On sets net.ipv6.conf.<dev>.disable_ipv6=0 when it is 1.
func ensureIPv6On(dev string) error {
	p := disableIPv6Path(dev)
	v, err := readSysctl(p)
	if err != nil || v == "0" {
		return err
	}
	return writeSysctl(p, "0")
}

func hasV4(ps []netip.Prefix) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr().Is4() })
}
func hasV6(ps []netip.Prefix) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Addr().Is6() })
}

// checkClusterRoutes refuses cluster CIDRs that the main routing table already sends through
// another device than gw (a previous CNI, a VPN, a blackhole): replacing that route would take
// the other network's traffic over silently.
func checkClusterRoutes(gw string, cidrs []netip.Prefix) error {
	for _, cc := range cidrs {
		fam := unix.AF_INET
		if cc.Addr().Is6() {
			fam = unix.AF_INET6
		}
		routes, err := netlink.RouteListFiltered(fam, &netlink.Route{Dst: prefixIPNet(cc.Masked()), Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("routes to %s: %w", cc, err)
		}
		for _, rt := range routes {
			dev := ""
			if rt.LinkIndex != 0 {
				if l, err := netlink.LinkByIndex(rt.LinkIndex); err == nil {
					dev = l.Attrs().Name
				} else {
					dev = fmt.Sprintf("ifindex %d", rt.LinkIndex)
				}
			}
			if dev == gw {
				continue
			}
			desc := "without a device (type " + strconv.Itoa(rt.Type) + ")"
			if dev != "" {
				desc = "dev " + dev
			}
			if rt.Gw != nil {
				desc = "via " + rt.Gw.String() + " " + desc
			}
			return fmt.Errorf("cluster CIDR %s is already routed %s: another network owns it (a previous CNI, a VPN?); remove that route (`ip route del %s`) or give --cluster-cidrs the cluster's own pod network", cc, desc, cc)
		}
	}
	return nil
}

// teardownGateway deletes br-int, with srcip-gw0 (its addresses and routes go with the device)
// and every other port on it.
func (r *run) teardownGateway(ctx context.Context) error {
	c := r.cfg
	deleted, err := r.db.DeleteBridge(ctx, c.BridgeInt)
	if err != nil {
		return err
	}
	if !deleted {
		r.unchanged("no %s", c.BridgeInt)
		return nil
	}
	r.changed("deleted %s with %s", c.BridgeInt, c.GatewayPort)
	if _, err := waitLinkGone(ctx, c.GatewayPort, 10*time.Second); err != nil {
		return err
	}
	return nil
}

func ipNetPrefix(n *net.IPNet) netip.Prefix {
	a, _ := netip.AddrFromSlice(n.IP)
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits)
}

func prefixIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func sortedKeys[V any](m map[netip.Prefix]V) []netip.Prefix {
	var out []netip.Prefix
	for p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}
