package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"

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
// on br-int with the pod's identity, the main CNI's IPv4 address (ip_addresses) and
// srcip-cni-mode=chained in external_ids. In the pod, each of EgressDestinations is routed
// through it: "DST via flows.ChainedGatewayIP dev EGRESS onlink src MAIN_IP", with a permanent
// neighbour entry for the next hop (no ARP on that interface). srcip-agent then programs the
// port like a pod of its own, by the main address: selected connections go to the egress
// gateway, the rest is handed to the host (srcip-gw0).
//
// Families: the chained egress is IPv4 only. The egress interface carries no IPv6 (disable_ipv6=1
// on it: no link-local address, no router solicitation, nothing of the main CNI's IPv6 traffic
// can take it), and EgressDestinations are IPv4 CIDRs. A dual-stack main CNI keeps its IPv6
// address, routes and traffic untouched. A pod without an IPv4 address in prevResult (an
// IPv6-only main CNI) gets no egress interface: ADD passes prevResult on unchanged and says so on
// stderr, CHECK accepts it, DEL has nothing of its own to remove.

// chainedAddress returns the IPv4 address of prevResult the egress routes use as source: the
// first IPv4 address on an interface in the sandbox (or on no named interface). Error: no
// prevResult, or no IPv4 address in it.
func chainedAddress(conf *NetConf) (*current.Result, *current.IPConfig, error) {
	if conf.PrevResult == nil {
		return nil, nil, errors.New("srcip-cni: chained mode without prevResult: put srcip-cni after the main CNI plugin in the conflist")
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, nil, fmt.Errorf("srcip-cni: prevResult: %w", err)
	}
	for _, c := range prev.IPs {
		if c.Address.IP.To4() == nil {
			continue
		}
		if c.Interface != nil && *c.Interface >= 0 && *c.Interface < len(prev.Interfaces) && prev.Interfaces[*c.Interface].Sandbox == "" {
			continue // an address of a host-side interface
		}
		return prev, c, nil
	}
	return prev, nil, errNoChainedIPv4
}

// errNoChainedIPv4 is chainedAddress's error for a prevResult without an IPv4 address of the pod
// (then the prevResult is returned with it).
var errNoChainedIPv4 = errors.New("srcip-cni: prevResult has no IPv4 address of the pod (the chained egress is IPv4 only)")

// chainedAdd is ADD in chained mode: the egress interface, its routes and neighbour entry, the
// port on the bridge; it waits for srcip-agent's flows like ADD and returns prevResult with the
// two ends of the egress veth added to its interfaces (CNI spec: a chained plugin passes the
// result on). Anything it made is undone when it fails.
func chainedAdd(args *skel.CmdArgs, conf *NetConf) (err error) {
	kargs, err := parseArgs(args.Args)
	if err != nil {
		return err
	}
	prev, addr, err := chainedAddress(conf)
	if errors.Is(err, errNoChainedIPv4) {
		fmt.Fprintf(os.Stderr, "srcip-cni: pod %s/%s has no IPv4 address from the main CNI: no egress interface (the chained egress is IPv4 only); prevResult passed on\n",
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
		// IPv4 only (see above), before the link goes up: no link-local address, no RS.
		p6 := "/proc/sys/net/ipv6/conf/" + conf.EgressIfName + "/disable_ipv6"
		if err := os.WriteFile(p6, []byte("1"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s=1: %w", p6, err) // ErrNotExist: no IPv6 in the kernel
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("set %s up: %w", conf.EgressIfName, err)
		}
		gw := net.IP(flows.ChainedGatewayIP.AsSlice())
		if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4,
			State: netlink.NUD_PERMANENT, IP: gw, HardwareAddr: flows.ChainedGatewayMAC}); err != nil {
			return fmt.Errorf("neighbour %s: %w", gw, err)
		}
		for _, d := range conf.EgressPrefixes {
			r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: d.Addr().AsSlice(), Mask: net.CIDRMask(d.Bits(), 32)},
				Gw: gw, Src: addr.Address.IP.To4(), Flags: int(netlink.FLAG_ONLINK)}
			if err := netlink.RouteReplace(r); err != nil {
				return fmt.Errorf("route %s via %s dev %s src %s: %w", d, gw, conf.EgressIfName, addr.Address.IP, err)
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
	ids := podExternalIDs(args, kargs, contIf.HardwareAddr.String(), addr.Address.String())
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
	_, addr, err := chainedAddress(conf)
	if errors.Is(err, errNoChainedIPv4) {
		return nil // ADD made nothing (IPv6-only main CNI)
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
		routes, err := netlink.RouteList(link, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, d := range conf.EgressPrefixes {
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
	if ids[ofctl.ExtIDMode] != ofctl.ModeChained || ids[ofctl.ExtIDIPAddresses] != addr.Address.String() {
		return fmt.Errorf("srcip-cni: port %s: external_ids %s=%q %s=%q, want %q and %q", ports[i].Name,
			ofctl.ExtIDMode, ids[ofctl.ExtIDMode], ofctl.ExtIDIPAddresses, ids[ofctl.ExtIDIPAddresses], ofctl.ModeChained, addr.Address.String())
	}
	return nil
}
