package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ipam"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// connectWait bounds the connection to ovsdb-server and each OVSDB step that is not a wait for
// srcip-agent.
const connectWait = 10 * time.Second

// userspaceDatapath is Bridge.datapath_type of Open vSwitch's userspace datapath.
const userspaceDatapath = "netdev"

// minIPv6MTU is IPv6's minimum link MTU (RFC 8200 section 5), in bytes: the least "mtu" of a pod
// with an IPv6 address.
const minIPv6MTU = 1280

// connect connects to the OVSDB of conf, with an error that says what to check. The client
// monitors every port, or with opts less (ADD: ofctl.OnlyPorts of its own port, so that in a burst
// of pod starts no ADD receives and caches the others' ports).
func connect(ctx context.Context, conf *NetConf, opts ...ofctl.ConnectOption) (*ofctl.DB, error) {
	cctx, cancel := context.WithTimeout(ctx, connectWait)
	defer cancel()
	db, err := ofctl.Connect(cctx, conf.OVSDB, opts...)
	if err != nil {
		return nil, fmt.Errorf("srcip-cni: cannot reach Open vSwitch's database at %s (is ovsdb-server running on this node, and is \"ovsdb\" in the CNI configuration right?): %w", conf.OVSDB, err)
	}
	return db, nil
}

// cmdAdd creates the pod's veth, gets its addresses from the IPAM plugin (one per family of the
// configuration's range sets: IPv4, IPv6 or both), sets a default route per family via that
// family's gateway, attaches the host end to the bridge with the pod's identity and every
// address in external_ids, and returns once srcip-agent has programmed the pod (CNI spec ADD). Anything it made is undone when it fails.
func cmdAdd(args *skel.CmdArgs) (err error) {
	conf, err := parseConf(args.StdinData, true)
	if err != nil {
		return err
	}
	if conf.Mode == ModeChained {
		return chainedAdd(args, conf)
	}
	kargs, err := parseArgs(args.Args)
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
	hostNS, err := ns.GetCurrentNS()
	if err != nil {
		return fmt.Errorf("srcip-cni: open this network namespace: %w", err)
	}
	defer hostNS.Close()

	// ADD reads its bridge and its own port only.
	hostName := hostVethName(args.ContainerID, args.IfName)
	db, err := connect(ctx, conf, ofctl.OnlyPorts(hostName))
	if err != nil {
		return err
	}
	defer db.Close()
	dpType, err := db.BridgeDatapathType(ctx, conf.Bridge)
	if err != nil {
		return fmt.Errorf("srcip-cni: bridge %q (\"bridge\" of the CNI configuration; srcip-agent creates it: is srcip-agent running on this node?): %w", conf.Bridge, err)
	}

	// 1. Addresses.
	r, err := ipam.ExecAdd(conf.IPAM.Type, args.StdinData)
	if err != nil {
		return fmt.Errorf("srcip-cni: IPAM plugin %q: %w", conf.IPAM.Type, err)
	}
	defer func() {
		if err != nil {
			if derr := ipam.ExecDel(conf.IPAM.Type, args.StdinData); derr != nil {
				err = errors.Join(err, fmt.Errorf("undo: release the address with %q: %w", conf.IPAM.Type, derr))
			}
		}
	}()
	result, err := current.NewResultFromResult(r)
	if err != nil {
		return fmt.Errorf("srcip-cni: IPAM plugin %q result: %w", conf.IPAM.Type, err)
	}
	if err := checkFamilies(result); err != nil {
		return fmt.Errorf("srcip-cni: IPAM plugin %q: %w", conf.IPAM.Type, err)
	}
	if hasIPv6(result) && conf.MTU < minIPv6MTU {
		return fmt.Errorf("srcip-cni: \"mtu\" %d is below IPv6's minimum link MTU %d and the pod has an IPv6 address (%s): raise the underlay MTU or \"mtu\"", conf.MTU, minIPv6MTU, ipAddresses(result))
	}
	addDefaultRoutes(result)

	// 2. The veth and the pod's interface.
	// Leftovers of an earlier ADD of this attachment that did not finish (a killed runtime).
	if _, lerr := netlink.LinkByName(hostName); lerr == nil {
		_ = ip.DelLinkByName(hostName)
	}
	if derr := db.DetachPorts(ctx, conf.Bridge, hostName); derr != nil {
		return fmt.Errorf("srcip-cni: remove the leftover port %s from %s: %w", hostName, conf.Bridge, derr)
	}
	var hostIf, contIf net.Interface
	err = netns.Do(func(hostNS ns.NetNS) error {
		var err error
		hostIf, contIf, err = ip.SetupVethWithName(args.IfName, hostName, conf.MTU, "", hostNS)
		return err
	})
	if err != nil {
		return fmt.Errorf("srcip-cni: create veth %s in %s: %w", args.IfName, args.Netns, err)
	}
	defer func() {
		if err != nil {
			// Deleting one end deletes the pair.
			if derr := ip.DelLinkByName(hostName); derr != nil && !errors.Is(derr, ip.ErrLinkNotFound) {
				err = errors.Join(err, fmt.Errorf("undo: delete veth %s: %w", hostName, derr))
			}
		}
	}()
	result.Interfaces = []*current.Interface{
		{Name: hostIf.Name, Mac: hostIf.HardwareAddr.String()},
		{Name: contIf.Name, Mac: contIf.HardwareAddr.String(), Sandbox: args.Netns},
	}
	for _, c := range result.IPs {
		c.Interface = current.Int(1)
	}
	err = netns.Do(func(ns.NetNS) error {
		if hasIPv6(result) {
			// Before the addresses and before the link goes up: the IPv6 address is usable at
			// once (no DAD), and no router advertisement adds routes beside srcip-cni's.
			if err := podIPv6Sysctls(args.IfName); err != nil {
				return err
			}
		}
		if err := ipam.ConfigureIface(args.IfName, result); err != nil {
			return err
		}
		if dpType == userspaceDatapath {
			// OVS's userspace datapath does not complete checksums the kernel left to the device:
			// without this every TCP segment from the pod is dropped (docs/lab-facts.md pitfall 1).
			return txChecksumOff(args.IfName)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("srcip-cni: configure %s in %s: %w", args.IfName, args.Netns, err)
	}
	if dpType == userspaceDatapath {
		if err := txChecksumOff(hostName); err != nil {
			return fmt.Errorf("srcip-cni: %w", err)
		}
		if err := hostEndQuiet(hostName); err != nil {
			return fmt.Errorf("srcip-cni: %w", err)
		}
	}

	// 3. The port on the bridge.
	ids := podExternalIDs(args, kargs, contIf.HardwareAddr.String(), ipAddresses(result))
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

	// 4. Wait for srcip-agent.
	if werr := waitPodFlows(ctx, db, conf, hostName); werr != nil {
		return fmt.Errorf("srcip-cni: srcip-agent did not program pod %s (port %s, ofport %d on %s) within %s: is srcip-agent running on this node? see its log (does it see the Pod, and is %s inside this node's pod CIDR?): %w",
			pod, hostName, ofport, conf.Bridge, conf.FlowWait, ipAddresses(result), werr)
	}
	return types.PrintResult(result, conf.CNIVersion)
}

// checkFamilies refuses an IPAM result without an address, or with two addresses of one family
// (one range set per family, as node-setup writes the conflist: the agent keys a pod's flows by
// one address per family).
func checkFamilies(res *current.Result) error {
	var v4, v6 int
	for _, c := range res.IPs {
		if c.Address.IP.To4() != nil {
			v4++
		} else {
			v6++
		}
	}
	switch {
	case v4+v6 == 0:
		return errors.New("no address in the result (\"ranges\" of the IPAM configuration: one range set per family of the node's pod CIDRs)")
	case v4 > 1 || v6 > 1:
		return fmt.Errorf("%d IPv4 and %d IPv6 addresses: want at most one per family (one range set per family, not two ranges of one family in two range sets)", v4, v6)
	}
	return nil
}

// addDefaultRoutes adds, per family, a default route via that family's first address's gateway
// when the IPAM result has none of that family (host-local's "routes" may be left out of the
// configuration, or list 0.0.0.0/0 only).
func addDefaultRoutes(res *current.Result) {
	for _, v4 := range []bool{true, false} {
		is := func(ip net.IP) bool { return (ip.To4() != nil) == v4 }
		if slices.ContainsFunc(res.Routes, func(r *types.Route) bool { return is(r.Dst.IP) && ip.IsIPNetZero(&r.Dst) }) {
			continue
		}
		for _, c := range res.IPs {
			if !is(c.Address.IP) || c.Gateway == nil {
				continue
			}
			dst := net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
			if !v4 {
				dst = net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
			}
			res.Routes = append(res.Routes, &types.Route{Dst: dst, GW: c.Gateway})
			break
		}
	}
}

func hasIPv6(res *current.Result) bool {
	return slices.ContainsFunc(res.IPs, func(c *current.IPConfig) bool { return c.Address.IP.To4() == nil })
}

// podIPv6Sysctls sets net.ipv6.conf.<ifName>.accept_dad=0 (the pod's IPv6 address is never
// tentative: usable when ADD returns; host-local hands out each address once per node, and
// br-int's neighbour discovery answers for the gateway only) and accept_ra=0 (the pod's IPv6
// routes are srcip-cni's; nothing on br-int sends router advertisements, and none is to be
// taken). Called in the pod's network namespace before the link goes up.
func podIPv6Sysctls(ifName string) error {
	for _, kv := range [][2]string{{"accept_dad", "0"}, {"accept_ra", "0"}} {
		p := "/proc/sys/net/ipv6/conf/" + ifName + "/" + kv[0]
		if err := os.WriteFile(p, []byte(kv[1]), 0o644); err != nil {
			return fmt.Errorf("%s=%s: %w (is IPv6 enabled in the kernel?)", p, kv[1], err)
		}
	}
	return nil
}

// ipAddresses renders the result's addresses as external_ids:ip_addresses ("10.244.1.5/24,...").
func ipAddresses(res *current.Result) string {
	var out []string
	for _, c := range res.IPs {
		out = append(out, c.Address.String())
	}
	return strings.Join(out, ",")
}

// cmdDel removes the pod's veth, port and address. It succeeds when any of them is already gone:
// a missing network namespace, a missing port, a repeated call (CNI spec DEL). The veth goes
// first: a port left without its device has no ofport, so the agent never programs it, and the
// address can be released even when ovsdb-server cannot be reached (that error is still returned,
// and the runtime's retry removes the port).
func cmdDel(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData, true)
	if err != nil {
		return err
	}
	if conf.Mode == ModeChained {
		return chainedDel(args, conf)
	}
	ctx := context.Background()
	var errs []error
	if args.Netns != "" {
		err := ns.WithNetNSPath(args.Netns, func(ns.NetNS) error {
			if err := ip.DelLinkByName(args.IfName); err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
				return err
			}
			return nil
		})
		var notExist ns.NSPathNotExistErr
		var notNS ns.NSPathNotNSErr
		if err != nil && !errors.As(err, &notExist) && !errors.As(err, &notNS) {
			errs = append(errs, fmt.Errorf("srcip-cni: delete %s in %s: %w", args.IfName, args.Netns, err))
		}
	}
	// The host end is gone with the pod end or the namespace; this catches a pair whose pod end
	// was moved or renamed.
	if err := ip.DelLinkByName(hostVethName(args.ContainerID, args.IfName)); err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
		errs = append(errs, fmt.Errorf("srcip-cni: delete host veth: %w", err))
	}
	if db, err := connect(ctx, conf); err != nil {
		errs = append(errs, err)
	} else {
		if _, err := db.DetachContainer(ctx, conf.Bridge, args.ContainerID, args.IfName); err != nil {
			errs = append(errs, fmt.Errorf("srcip-cni: remove the port of container %s from %s: %w", args.ContainerID, conf.Bridge, err))
		}
		db.Close()
	}
	if err := ipam.ExecDel(conf.IPAM.Type, args.StdinData); err != nil {
		errs = append(errs, fmt.Errorf("srcip-cni: release the address with IPAM plugin %q: %w", conf.IPAM.Type, err))
	}
	return errors.Join(errs...)
}

// cmdCheck verifies an attachment against its prevResult (CNI spec CHECK): the IPAM plugin's
// own check; the pod's interface with its MTU, addresses and routes; the host end; the port on
// the bridge with an ofport and the external_ids ADD wrote.
func cmdCheck(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData, true)
	if err != nil {
		return err
	}
	if conf.Mode == ModeChained {
		return chainedCheck(args, conf)
	}
	kargs, err := parseArgs(args.Args)
	if err != nil {
		return err
	}
	if conf.PrevResult == nil {
		return errors.New("srcip-cni: CHECK without prevResult")
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return fmt.Errorf("srcip-cni: prevResult: %w", err)
	}
	if err := ipam.ExecCheck(conf.IPAM.Type, args.StdinData); err != nil {
		return fmt.Errorf("srcip-cni: IPAM plugin %q: %w", conf.IPAM.Type, err)
	}
	var contMAC string
	err = ns.WithNetNSPath(args.Netns, func(ns.NetNS) error {
		link, err := netlink.LinkByName(args.IfName)
		if err != nil {
			return fmt.Errorf("interface %s: %w", args.IfName, err)
		}
		if link.Type() != "veth" {
			return fmt.Errorf("interface %s is a %s, want a veth", args.IfName, link.Type())
		}
		if got := link.Attrs().MTU; got != conf.MTU {
			return fmt.Errorf("interface %s has MTU %d, want %d", args.IfName, got, conf.MTU)
		}
		contMAC = link.Attrs().HardwareAddr.String()
		if err := ip.ValidateExpectedInterfaceIPs(args.IfName, prev.IPs); err != nil {
			return err
		}
		return ip.ValidateExpectedRoute(prev.Routes)
	})
	if err != nil {
		return fmt.Errorf("srcip-cni: check %s in %s: %w", args.IfName, args.Netns, err)
	}
	hostName := hostVethName(args.ContainerID, args.IfName)
	if _, err := netlink.LinkByName(hostName); err != nil {
		return fmt.Errorf("srcip-cni: host end %s of the pod's veth: %w", hostName, err)
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
	if i < 0 {
		return fmt.Errorf("srcip-cni: no port of container %s (%s) on %s", args.ContainerID, args.IfName, conf.Bridge)
	}
	p := ports[i]
	if p.Name != hostName {
		return fmt.Errorf("srcip-cni: port of container %s on %s is %s, want %s", args.ContainerID, conf.Bridge, p.Name, hostName)
	}
	if p.OFPort <= 0 {
		return fmt.Errorf("srcip-cni: port %s on %s has no ofport (%d): %s", p.Name, conf.Bridge, p.OFPort, p.Error)
	}
	want := map[string]string{
		ofctl.ExtIDPodNamespace: string(kargs.K8S_POD_NAMESPACE),
		ofctl.ExtIDPodName:      string(kargs.K8S_POD_NAME),
		ofctl.ExtIDAttachedMAC:  contMAC,
		ofctl.ExtIDIPAddresses:  ipAddresses(prev),
	}
	if uid := string(kargs.K8S_POD_UID); uid != "" {
		want[ofctl.ExtIDPodUID] = uid
	}
	for k, v := range want {
		if got := p.ExternalIDs[k]; got != v {
			return fmt.Errorf("srcip-cni: port %s: external_ids:%s is %q, want %q", p.Name, k, got, v)
		}
	}
	return nil
}

// cmdStatus reports whether ADD can work (CNI 1.1 STATUS): ovsdb-server answers, the bridge
// exists (srcip-agent creates it), and the IPAM plugin's own STATUS. Error code 50 ("plugin not
// available") otherwise.
func cmdStatus(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData, true)
	if err != nil {
		return err
	}
	ctx := context.Background()
	db, err := connect(ctx, conf)
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	defer db.Close()
	if _, err := db.BridgeDatapathType(ctx, conf.Bridge); err != nil {
		return types.NewError(types.ErrPluginNotAvailable,
			fmt.Sprintf("srcip-cni: bridge %q not ready (srcip-agent creates it: is srcip-agent running on this node?): %v", conf.Bridge, err), "")
	}
	if conf.Mode == ModeChained {
		return nil // no IPAM: the main CNI's
	}
	if err := ipam.ExecStatus(conf.IPAM.Type, args.StdinData); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("srcip-cni: IPAM plugin %q: %v", conf.IPAM.Type, err), "")
	}
	return nil
}

// cmdGC removes every attachment of srcip-cni on the bridge that is not among the runtime's
// valid attachments (cni.dev/valid-attachments; CNI 1.1 GC): the port and its host veth. Then it
// hands GC to the IPAM plugin, which releases the addresses of the others.
func cmdGC(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData, true)
	if err != nil {
		return err
	}
	ctx := context.Background()
	valid := map[string]bool{}
	for _, a := range conf.ValidAttachments {
		valid[a.ContainerID+"/"+a.IfName] = true
	}
	db, err := connect(ctx, conf)
	if err != nil {
		return err
	}
	defer db.Close()
	ports, err := db.ContainerPorts(ctx, conf.Bridge)
	if err != nil && !errors.Is(err, ofctl.ErrBridgeNotFound) {
		return fmt.Errorf("srcip-cni: list ports of %s: %w", conf.Bridge, err)
	}
	var stale []string
	var errs []error
	for _, p := range ports {
		ifName := p.IfName
		if ifName == "" {
			ifName = "eth0"
		}
		if valid[p.ContainerID+"/"+ifName] {
			continue
		}
		stale = append(stale, p.Name)
		if err := ip.DelLinkByName(p.Name); err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
			errs = append(errs, fmt.Errorf("srcip-cni: GC: delete veth %s: %w", p.Name, err))
		}
	}
	if err := db.DetachPorts(ctx, conf.Bridge, stale...); err != nil {
		errs = append(errs, fmt.Errorf("srcip-cni: GC: remove ports %v: %w", stale, err))
	}
	if len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "srcip-cni: GC removed ports %v\n", stale)
	}
	if conf.Mode == ModeChained {
		return errors.Join(errs...) // no IPAM: the main CNI's
	}
	if err := invoke.DelegateGC(ctx, conf.IPAM.Type, args.StdinData, nil); err != nil {
		errs = append(errs, fmt.Errorf("srcip-cni: GC of IPAM plugin %q: %w", conf.IPAM.Type, err))
	}
	return errors.Join(errs...)
}

// hostEndQuiet keeps the node's own IP stack out of the pod's traffic on the userspace datapath,
// where the kernel also receives every frame of the veth's host end (OVS reads it through a packet
// socket): ARP off, so the node never answers the pod's ARP for the gateway address it holds on
// srcip-gw0 itself, IPv4 forwarding off on the device (docs/lab-facts.md pitfall 12), and IPv6
// off on the device (net.ipv6.conf.<name>.disable_ipv6=1: no link-local address, no neighbour
// discovery answers, no forwarding of the pod's IPv6 frames by the node; OVS still reads them).
func hostEndQuiet(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("host end %s: %w", name, err)
	}
	if err := netlink.LinkSetARPOff(link); err != nil {
		return fmt.Errorf("host end %s: arp off: %w", name, err)
	}
	p := "/proc/sys/net/ipv4/conf/" + name + "/forwarding"
	if err := os.WriteFile(p, []byte("0"), 0o644); err != nil {
		return fmt.Errorf("host end %s: %s: %w", name, p, err)
	}
	p6 := "/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6"
	if err := os.WriteFile(p6, []byte("1"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("host end %s: %s: %w", name, p6, err) // ErrNotExist: no IPv6 in the kernel
	}
	return nil
}

// podExternalIDs is the pod's identity written to its port's Interface.external_ids
// (ovs-vswitchd.conf.db(5)): namespace, name and UID from CNI_ARGS, the container's MAC and
// addresses (comma-separated CIDRs), and the attachment (container id, interface name).
func podExternalIDs(args *skel.CmdArgs, kargs *K8sArgs, mac, ips string) map[string]string {
	ids := map[string]string{
		ofctl.ExtIDPodNamespace: string(kargs.K8S_POD_NAMESPACE),
		ofctl.ExtIDPodName:      string(kargs.K8S_POD_NAME),
		ofctl.ExtIDAttachedMAC:  mac,
		ofctl.ExtIDIPAddresses:  ips,
		ofctl.ExtIDContainer:    args.ContainerID,
		ofctl.ExtIDIfName:       args.IfName,
	}
	if uid := string(kargs.K8S_POD_UID); uid != "" {
		ids[ofctl.ExtIDPodUID] = uid
	}
	return ids
}

// waitPodFlows waits, at most conf.FlowWait, until srcip-agent has acknowledged that the pod's
// flow set for the port name is in the bridge: external_ids:srcip-agent-flows (the flow set's
// cookie) on its Interface, which the agent writes after the sync that applied it. It watches
// db's cache (an OVSDB monitor): no ovs-ofctl, no polling of the switch.
func waitPodFlows(ctx context.Context, db *ofctl.DB, conf *NetConf, name string) error {
	wctx, cancel := context.WithTimeout(ctx, conf.FlowWait)
	defer cancel()
	_, err := db.WaitExternalID(wctx, name, ofctl.ExtIDAgentFlows)
	return err
}
