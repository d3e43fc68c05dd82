package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// Chained mode (docs/egress.md#chained-mode): srcip-cni is a later plugin of a conflist whose
// first plugin is the main CNI (e.g. the reference bridge + host-local). The CNI spec hands it
// the main CNI's result as prevResult; ADD leaves the pod's interface, addresses and default
// route alone and adds one more veth, the egress interface (EgressIfName), whose host end goes
// on br-int with the pod's identity, the main CNI's addresses (ip_addresses, one per family) and
// srcip-cni-mode=chained in external_ids. In the pod, each of EgressDestinations is routed
// through it, per family: "DST via flows.ChainedGatewayIP dev EGRESS onlink src MAIN_IP" (IPv4)
// and "DST via flows.ChainedGatewayIP6 dev EGRESS src MAIN_IP6" (IPv6), with a permanent
// neighbour entry for each next hop (no ARP, no Neighbor Solicitation on that interface).
// srcip-agent then programs the port like a pod of its own, by the main addresses: selected
// connections go to the egress gateway of their family, the rest is handed to the host
// (srcip-gw0).
//
// Families: the addresses are chosen by family, never by index (chainedAddresses). A family
// is used when the pod has an address of it and EgressDestinations list a CIDR of it; a
// destination of a family the pod has no address of is not routed (ADD says so on stderr).
// Without IPv6 in use the egress interface carries no IPv6 (disable_ipv6=1: no link-local
// address, no router solicitation); with it, the interface gets no address of its own either
// (addr_gen_mode=1, no link-local address, so no MLD or duplicate address detection), and
// accept_ra=0. A pod with no used family gets no egress interface: ADD passes prevResult on
// unchanged and says so on stderr, CHECK accepts it, DEL has nothing of its own to remove.

// chainedAddrs are the main CNI's addresses chained mode uses as the egress routes' sources:
// at most one per family (nil: the pod has none of that family, or no destination of it is
// listed).
type chainedAddrs struct {
	v4, v6 *current.IPConfig
}

// ipAddresses renders the used addresses as external_ids:ip_addresses, IPv4 first.
func (a chainedAddrs) ipAddresses() string {
	var out []string
	for _, c := range []*current.IPConfig{a.v4, a.v6} {
		if c != nil {
			out = append(out, c.Address.String())
		}
	}
	return strings.Join(out, ",")
}

// chainedAddresses returns prevResult and the addresses the egress routes use as sources: per
// family the first address of that family on an interface in the sandbox (or on no named
// interface), when conf lists a destination of that family; skipped names the destinations of
// a family the pod has no address of. Error: no prevResult, or no usable address in it
// (errNoChainedAddress, with the prevResult).
func chainedAddresses(conf *NetConf) (prev *current.Result, addrs chainedAddrs, skipped []netip.Prefix, err error) {
	if conf.PrevResult == nil {
		return nil, addrs, nil, errors.New("srcip-cni: chained mode without prevResult: put srcip-cni after the main CNI plugin in the conflist")
	}
	prev, err = current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, addrs, nil, fmt.Errorf("srcip-cni: prevResult: %w", err)
	}
	var have4, have6 *current.IPConfig
	for _, c := range prev.IPs {
		if c.Interface != nil && *c.Interface >= 0 && *c.Interface < len(prev.Interfaces) && prev.Interfaces[*c.Interface].Sandbox == "" {
			continue // an address of a host-side interface
		}
		switch {
		case c.Address.IP.To4() != nil:
			if have4 == nil {
				have4 = c
			}
		case c.Address.IP.To16() != nil:
			if have6 == nil {
				have6 = c
			}
		}
	}
	for _, d := range conf.EgressPrefixes {
		switch {
		case d.Addr().Is4() && have4 != nil:
			addrs.v4 = have4
		case d.Addr().Is6() && have6 != nil:
			addrs.v6 = have6
		default:
			skipped = append(skipped, d)
		}
	}
	if addrs.v4 == nil && addrs.v6 == nil {
		return prev, addrs, skipped, errNoChainedAddress
	}
	return prev, addrs, skipped, nil
}

// errNoChainedAddress is chainedAddresses' error for a prevResult without an address of the pod
// of a family egressDestinations list (then the prevResult is returned with it).
var errNoChainedAddress = errors.New("srcip-cni: prevResult has no address of the pod of a family egressDestinations list")

// routeSrc returns the source and next hop of destination d's route: the used address of d's
// family and ChainedGatewayIP or ChainedGatewayIP6; ok is false when that family is not used.
func (a chainedAddrs) routeSrc(d netip.Prefix) (src, gw net.IP, ok bool) {
	if d.Addr().Is4() {
		if a.v4 == nil {
			return nil, nil, false
		}
		return a.v4.Address.IP.To4(), net.IP(flows.ChainedGatewayIP.AsSlice()), true
	}
	if a.v6 == nil {
		return nil, nil, false
	}
	return a.v6.Address.IP.To16(), net.IP(flows.ChainedGatewayIP6.AsSlice()), true
}

// chainedAdd is ADD in chained mode: the egress interface, its routes and neighbour entry, the
// port on the bridge; it waits for srcip-agent's flows like ADD and returns prevResult with the
// two ends of the egress veth added to its interfaces (CNI spec: a chained plugin passes the
// result on). Anything it made is undone when it fails.
func chainedAdd(args *skel.CmdArgs, conf *NetConf) (err error) {
	kargs, err := parseArgs(args.Args)
	if err != nil {
		return err
	}
	prev, addrs, skipped, err := chainedAddresses(conf)
	if len(skipped) > 0 {
		fmt.Fprintf(os.Stderr, "srcip-cni: pod %s/%s has no address of the family of egressDestinations %v from the main CNI: not routed through %s\n",
			kargs.K8S_POD_NAMESPACE, kargs.K8S_POD_NAME, skipped, conf.EgressIfName)
	}
	if errors.Is(err, errNoChainedAddress) {
		fmt.Fprintf(os.Stderr, "srcip-cni: pod %s/%s has no address from the main CNI of a family egressDestinations list: no egress interface; prevResult passed on\n",
			kargs.K8S_POD_NAMESPACE, kargs.K8S_POD_NAME)
		return types.PrintResult(prev, conf.CNIVersion)
	}
	if err != nil {
		return err
	}
	ctx := context.Background()
	pod := string(kargs.K8S_POD_NAMESPACE) + "/" + string(kargs.K8S_POD_NAME)
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return fmt.Errorf("srcip-cni: open pod network namespace %q: %w", args.Netns, err)
	}
	defer netns.Close()
	hostName := hostVethName(args.ContainerID, conf.EgressIfName)
	db, err := connect(ctx, conf, ofctl.OnlyPorts(hostName))
	if err != nil {
		return err
	}
	defer db.Close()
	dpType, err := db.BridgeDatapathType(ctx, conf.Bridge)
	if err != nil {
		return fmt.Errorf("srcip-cni: bridge %q (\"bridge\" of the CNI configuration; srcip-agent creates it: is srcip-agent running on this node?): %w", conf.Bridge, err)
	}

	if _, lerr := netlink.LinkByName(hostName); lerr == nil {
		_ = ip.DelLinkByName(hostName)
	}
	if derr := db.DetachPorts(ctx, conf.Bridge, hostName); derr != nil {
		return fmt.Errorf("srcip-cni: remove the leftover port %s from %s: %w", hostName, conf.Bridge, derr)
	}
	var hostIf, contIf net.Interface
	err = netns.Do(func(hostNS ns.NetNS) error {
		var err error
		hostIf, contIf, err = ip.SetupVethWithName(conf.EgressIfName, hostName, conf.MTU, "", hostNS)
		return err
	})
	if err != nil {
		return fmt.Errorf("srcip-cni: create veth %s in %s: %w", conf.EgressIfName, args.Netns, err)
	}
	defer func() {
		if err != nil {
			if derr := ip.DelLinkByName(hostName); derr != nil && !errors.Is(derr, ip.ErrLinkNotFound) {
				err = errors.Join(err, fmt.Errorf("undo: delete veth %s: %w", hostName, derr))
			}
		}
	}()
	err = netns.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(conf.EgressIfName)
		if err != nil {
			return err
		}
		// Before the link goes up: no IPv6 at all without an IPv6 address in use; with one,
		// no address of its own (no link-local address: no DAD, no MLD), no RA, no RS.
		if err := chainedIPv6Sysctls(conf.EgressIfName, addrs.v6 != nil); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("set %s up: %w", conf.EgressIfName, err)
		}
		idx := link.Attrs().Index
		if addrs.v4 != nil {
			gw := net.IP(flows.ChainedGatewayIP.AsSlice())
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4,
				State: netlink.NUD_PERMANENT, IP: gw, HardwareAddr: flows.ChainedGatewayMAC}); err != nil {
				return fmt.Errorf("neighbour %s: %w", gw, err)
			}
		}
		if addrs.v6 != nil {
			gw := net.IP(flows.ChainedGatewayIP6.AsSlice())
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V6,
				State: netlink.NUD_PERMANENT, IP: gw, HardwareAddr: flows.ChainedGatewayMAC}); err != nil {
				return fmt.Errorf("neighbour %s: %w", gw, err)
			}
		}
		for _, d := range conf.EgressPrefixes {
			src, gw, ok := addrs.routeSrc(d)
			if !ok {
				continue // its family is not in use (said above)
			}
			r := &netlink.Route{LinkIndex: idx, Dst: &net.IPNet{IP: d.Addr().AsSlice(), Mask: net.CIDRMask(d.Bits(), d.Addr().BitLen())},
				Gw: gw, Src: src}
			if d.Addr().Is4() {
				r.Flags = int(netlink.FLAG_ONLINK) // 169.254.1.1 is on no subnet of the interface
			}
			if err := netlink.RouteReplace(r); err != nil {
				return fmt.Errorf("route %s via %s dev %s src %s: %w", d, gw, conf.EgressIfName, src, err)
			}
		}
		if dpType == userspaceDatapath {
			return txChecksumOff(conf.EgressIfName)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("srcip-cni: configure %s in %s: %w", conf.EgressIfName, args.Netns, err)
	}
	if dpType == userspaceDatapath {
		if err := txChecksumOff(hostName); err != nil {
			return fmt.Errorf("srcip-cni: %w", err)
		}
		if err := hostEndQuiet(hostName); err != nil {
			return fmt.Errorf("srcip-cni: %w", err)
		}
	}
	ids := podExternalIDs(args, kargs, contIf.HardwareAddr.String(), addrs.ipAddresses())
	ids[ofctl.ExtIDMode] = ofctl.ModeChained
	ofport, err := db.AttachPort(ctx, conf.Bridge, hostName, ids, connectWait)
	defer func() {
		if err != nil {
			if derr := db.DetachPorts(ctx, conf.Bridge, hostName); derr != nil {
				err = errors.Join(err, fmt.Errorf("undo: remove port %s from %s: %w", hostName, conf.Bridge, derr))
			}
		}
	}()
	if err != nil {
		return fmt.Errorf("srcip-cni: attach %s to %s: %w", hostName, conf.Bridge, err)
	}
	if werr := waitPodFlows(ctx, db, conf, hostName); werr != nil {
		return fmt.Errorf("srcip-cni: srcip-agent did not program chained pod %s (port %s, ofport %d on %s) within %s: is srcip-agent running on this node? see its log: %w",
			pod, hostName, ofport, conf.Bridge, conf.FlowWait, werr)
	}
	prev.Interfaces = append(prev.Interfaces,
		&current.Interface{Name: hostIf.Name, Mac: hostIf.HardwareAddr.String()},
		&current.Interface{Name: contIf.Name, Mac: contIf.HardwareAddr.String(), Sandbox: args.Netns})
	return types.PrintResult(prev, conf.CNIVersion)
}

// chainedDel is DEL in chained mode: the egress interface, its host end and its port go; the
// main CNI's address is the main CNI's to release. Idempotent like DEL.
func chainedDel(args *skel.CmdArgs, conf *NetConf) error {
	var errs []error
	if args.Netns != "" {
		err := ns.WithNetNSPath(args.Netns, func(ns.NetNS) error {
			if err := ip.DelLinkByName(conf.EgressIfName); err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
				return err
			}
			return nil
		})
		var notExist ns.NSPathNotExistErr
		var notNS ns.NSPathNotNSErr
		if err != nil && !errors.As(err, &notExist) && !errors.As(err, &notNS) {
			errs = append(errs, fmt.Errorf("srcip-cni: delete %s in %s: %w", conf.EgressIfName, args.Netns, err))
		}
	}
	if err := ip.DelLinkByName(hostVethName(args.ContainerID, conf.EgressIfName)); err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
		errs = append(errs, fmt.Errorf("srcip-cni: delete host veth: %w", err))
	}
	ctx := context.Background()
	if db, err := connect(ctx, conf); err != nil {
		errs = append(errs, err)
	} else {
		if _, err := db.DetachContainer(ctx, conf.Bridge, args.ContainerID, args.IfName); err != nil {
			errs = append(errs, fmt.Errorf("srcip-cni: remove the port of container %s from %s: %w", args.ContainerID, conf.Bridge, err))
		}
		db.Close()
	}
	return errors.Join(errs...)
}

// chainedCheck is CHECK in chained mode: the egress interface is a veth with the MTU, a route
// for every destination, and its port on the bridge carries an ofport, the chained mode and the
// prevResult's address.
func chainedCheck(args *skel.CmdArgs, conf *NetConf) error {
	_, addrs, _, err := chainedAddresses(conf)
	if errors.Is(err, errNoChainedAddress) {
		return nil // ADD made nothing (no address of a listed family)
	}
	if err != nil {
		return err
	}
	err = ns.WithNetNSPath(args.Netns, func(ns.NetNS) error {
		link, err := netlink.LinkByName(conf.EgressIfName)
		if err != nil {
			return fmt.Errorf("interface %s: %w", conf.EgressIfName, err)
		}
		if link.Type() != "veth" || link.Attrs().MTU != conf.MTU {
			return fmt.Errorf("interface %s is a %s with MTU %d, want a veth with MTU %d", conf.EgressIfName, link.Type(), link.Attrs().MTU, conf.MTU)
		}
		routes, err := netlink.RouteList(link, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		for _, d := range conf.EgressPrefixes {
			if _, _, ok := addrs.routeSrc(d); !ok {
				continue
			}
			if !slices.ContainsFunc(routes, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == d.String() }) {
				return fmt.Errorf("no route to %s on %s", d, conf.EgressIfName)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("srcip-cni: check %s in %s: %w", conf.EgressIfName, args.Netns, err)
	}
	db, err := connect(context.Background(), conf)
	if err != nil {
		return err
	}
	defer db.Close()
	ports, err := db.ContainerPorts(context.Background(), conf.Bridge)
	if err != nil {
		return fmt.Errorf("srcip-cni: list ports of %s: %w", conf.Bridge, err)
	}
	i := slices.IndexFunc(ports, func(p ofctl.ContainerPort) bool {
		return p.ContainerID == args.ContainerID && p.IfName == args.IfName
	})
	if i < 0 || ports[i].OFPort <= 0 {
		return fmt.Errorf("srcip-cni: no programmed port of container %s on %s", args.ContainerID, conf.Bridge)
	}
	ids := ports[i].ExternalIDs
	if want := addrs.ipAddresses(); ids[ofctl.ExtIDMode] != ofctl.ModeChained || ids[ofctl.ExtIDIPAddresses] != want {
		return fmt.Errorf("srcip-cni: port %s: external_ids %s=%q %s=%q, want %q and %q", ports[i].Name,
			ofctl.ExtIDMode, ids[ofctl.ExtIDMode], ofctl.ExtIDIPAddresses, ids[ofctl.ExtIDIPAddresses], ofctl.ModeChained, want)
	}
	return nil
}

// chainedIPv6Sysctls sets the egress interface's IPv6 sysctls in the pod before it goes up:
// disable_ipv6=1 without IPv6 in use; with it IPv6 on, addr_gen_mode=1 (no link-local address:
// the interface has no address of its own, so no duplicate address detection and no MLD),
// accept_ra=0 and router_solicitations=0. A kernel without IPv6 (no such file) is fine without
// IPv6 in use, an error with it.
func chainedIPv6Sysctls(ifName string, v6 bool) error {
	dir := "/proc/sys/net/ipv6/conf/" + ifName + "/"
	set := [][2]string{{"disable_ipv6", "1"}}
	if v6 {
		set = [][2]string{{"addr_gen_mode", "1"}, {"accept_ra", "0"}, {"router_solicitations", "0"}, {"accept_dad", "0"}, {"disable_ipv6", "0"}}
	}
	for _, kv := range set {
		if err := os.WriteFile(dir+kv[0], []byte(kv[1]), 0o644); err != nil {
			if !v6 && errors.Is(err, os.ErrNotExist) {
				return nil // no IPv6 in the kernel
			}
			return fmt.Errorf("%s%s=%s: %w", dir, kv[0], kv[1], err)
		}
	}
	return nil
}
