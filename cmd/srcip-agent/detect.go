package main

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// sctpSupport detects at start whether br-ex's datapath can conntrack and NAT SCTP with ports
// (agent.SCTPSupport: its datapath_type from OVSDB, ovs-vswitchd's version from ovs-appctl) and
// returns the reason the agent gives when it declines an SCTP Service port. A failed read is
// logged; the reason then says what is unknown.
func sctpSupport(ctx context.Context, db *ofctl.DB, br *ofctl.OpenFlow, bridge string) string {
	logger := klog.FromContext(ctx)
	dpType, err := db.BridgeDatapathType(ctx, bridge)
	if err != nil {
		logger.Error(err, "Reading br-ex's datapath type failed; SCTP Service ports are declined", "bridge", bridge)
		return fmt.Sprintf("the datapath of %s could not be read (%v)", bridge, err)
	}
	version, err := br.Version(ctx)
	if err != nil {
		logger.Error(err, "Reading ovs-vswitchd's version failed")
	}
	capable, why := agent.SCTPSupport(dpType, version)
	logger.Info("SCTP support of the datapath", "datapathType", dpType, "version", version, "canConntrackSCTPPorts", capable, "sctpServicePorts", why)
	return why
}

// routeNextHops returns the IPv4 and IPv6 next hops (gateways, multipath included; IPv6
// link-local ones too) of every route of the host's main and other tables
// (agent.ReconcilerConfig.RouteNextHops: admission refuses them in their own family).
func routeNextHops(context.Context) ([]netip.Addr, error) {
	var routes []netlink.Route
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		routes = append(routes, rs...)
	}
	var out []netip.Addr
	add := func(ip []byte) {
		if a, ok := netip.AddrFromSlice(ip); ok && a.Unmap().IsValid() && !a.Unmap().IsUnspecified() {
			out = append(out, a.Unmap())
		}
	}
	for _, r := range routes {
		add(r.Gw)
		for _, nh := range r.MultiPath {
			add(nh.Gw)
		}
	}
	return out, nil
}
