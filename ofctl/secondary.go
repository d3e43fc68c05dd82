package ofctl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// Secondary uplinks of br-ex (node-setup --egress-interface, docs/egress.md "Secondary NICs").

// ExternalIDEgressSubnets is the Interface.external_ids key that marks a port of br-ex as a
// secondary uplink; its value is the comma-separated IPv4 subnets of the NIC's segment (e.g.
// "203.0.113.0/24"). node-setup writes it, the agent reads it (EnsureIntegration: Ports.Secondary)
// and never takes such a port for the primary uplink.
const ExternalIDEgressSubnets = "ovs-srcip.io/egress-subnets"

// ExternalIDEgressSubnets6 is the Interface.external_ids key with the comma-separated IPv6
// subnets of a secondary uplink's segment (its global IPv6 addresses' networks, e.g.
// "2001:db8:0:113::/64"), absent when it has none. They are recorded, not routed: node-setup has
// no IPv6 source routing for the NIC yet, so the agent declines an IPv6 egress IP inside one of
// them (flows.State.SecondarySubnet6For) rather than serving it on the primary uplink. A key of
// its own, so an agent that knows only ExternalIDEgressSubnets still reads that one.
const ExternalIDEgressSubnets6 = "ovs-srcip.io/egress-subnets6"

// SecondaryUplinkTag is the access VLAN (Port.tag) node-setup gives a secondary uplink. It only
// changes what the NORMAL action does (ovs-vswitchd.conf.db(5), "VLAN Configuration"): br-ex's
// NORMAL serves the untagged primary uplink, LOCAL and the patch port, so it never floods or
// forwards into the secondary segment; the agent's flows (which output to the port explicitly,
// untagged) are the only way in and out.
const SecondaryUplinkTag = 4094

// ParseEgressSubnets parses an ExternalIDEgressSubnets value.
func ParseEgressSubnets(v string) ([]netip.Prefix, error) {
	return parseEgressSubnets(ExternalIDEgressSubnets, v, flows.IPv4)
}

// ParseEgressSubnets6 parses an ExternalIDEgressSubnets6 value.
func ParseEgressSubnets6(v string) ([]netip.Prefix, error) {
	return parseEgressSubnets(ExternalIDEgressSubnets6, v, flows.IPv6)
}

func parseEgressSubnets(key, v string, fam flows.Family) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil || p.Addr().Is4In6() || flows.FamilyOf(p.Addr()) != fam {
			return nil, fmt.Errorf("%s=%q: %q is not an %s network", key, v, f, fam)
		}
		out = append(out, p.Masked())
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s=%q: no subnet", key, v)
	}
	return out, nil
}

// joinSubnets is the external_ids value of subnets ("" for none).
func joinSubnets(subnets []netip.Prefix) string {
	var vs []string
	for _, s := range subnets {
		vs = append(vs, s.Masked().String())
	}
	return strings.Join(vs, ",")
}

// secondaryUplinks returns the secondary uplinks of bridge brEx, sorted by ofport, and the names
// of those still without an ofport. A port whose subnets do not parse, or that ovs-vswitchd
// could not add (ofport -1), is left out and logged (once per change); the others are still
// returned, so a broken secondary NIC never stops the agent.
func (d *DB) secondaryUplinks(ctx context.Context, brEx string) ([]flows.SecondaryUplink, []string, error) {
	br := &bridgeRow{Name: brEx}
	if err := d.c.Get(ctx, br); err != nil {
		return nil, nil, nil
	}
	var out []flows.SecondaryUplink
	var pending []string
	var errs []error
	for _, pu := range br.Ports {
		p := &portRow{UUID: pu}
		if err := d.c.Get(ctx, p); err != nil || len(p.Interfaces) != 1 {
			continue
		}
		i := &ifaceRow{UUID: p.Interfaces[0]}
		if err := d.c.Get(ctx, i); err != nil {
			continue
		}
		v, ok := i.ExternalIDs[ExternalIDEgressSubnets]
		if !ok {
			continue
		}
		subnets, err := ParseEgressSubnets(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("secondary uplink %s: %w (ignored)", i.Name, err))
			continue
		}
		// An unreadable IPv6 value keeps the NIC's IPv4 subnets (their egress IPs must still leave
		// through it) and declines every IPv6 egress IP on this node (flows.State.SecondarySubnet6For).
		var subnets6 []netip.Prefix
		unreadable6 := ""
		if v6, ok := i.ExternalIDs[ExternalIDEgressSubnets6]; ok {
			if subnets6, err = ParseEgressSubnets6(v6); err != nil {
				errs = append(errs, fmt.Errorf("secondary uplink %s: %w (its IPv4 subnets kept; every IPv6 egress IP declined on this node)", i.Name, err))
				subnets6, unreadable6 = nil, err.Error()
			}
		}
		if i.OFPort != nil && *i.OFPort < 0 {
			msg := "no ofport"
			if i.Error != nil {
				msg = *i.Error
			}
			errs = append(errs, fmt.Errorf("secondary uplink %s: ovs-vswitchd could not add it: %s (ignored)", i.Name, msg))
			continue
		}
		if i.OFPort == nil || *i.OFPort == 0 {
			pending = append(pending, i.Name)
			continue
		}
		out = append(out, flows.SecondaryUplink{Name: i.Name, OFPort: *i.OFPort, Subnets: subnets, Subnets6: subnets6, Subnets6Unreadable: unreadable6})
	}
	slices.SortFunc(out, func(a, b flows.SecondaryUplink) int { return a.OFPort - b.OFPort })
	// Logged when it changes, not at every sync.
	msg := ""
	if len(errs) > 0 {
		msg = errors.Join(errs...).Error()
	}
	if prev, _ := d.secondaryErr.Swap(msg).(string); prev != msg && msg != "" {
		klog.FromContext(ctx).Error(errors.Join(errs...), "Secondary uplink of the external bridge ignored", "bridge", brEx)
	}
	return out, pending, nil
}

// EnsureSecondaryUplink makes system interface nic a port of bridge with access VLAN
// SecondaryUplinkTag and Interface.external_ids ExternalIDEgressSubnets = the IPv4 subnets and
// ExternalIDEgressSubnets6 = the IPv6 ones (the key absent without any), in one transaction; it
// returns what it changed (none when all was right). subnets must hold an IPv4 network. The
// bridge must exist; a port of another bridge is an error.
func (d *DB) EnsureSecondaryUplink(ctx context.Context, bridge, nic string, subnets []netip.Prefix) ([]string, error) {
	var v4, v6 []netip.Prefix
	for _, s := range subnets {
		if s.Addr().Is4() {
			v4 = append(v4, s)
		} else if s.Addr().Is6() && !s.Addr().Is4In6() {
			v6 = append(v6, s)
		}
	}
	if len(v4) == 0 {
		return nil, fmt.Errorf("secondary uplink %s: no IPv4 subnet", nic)
	}
	val, val6 := joinSubnets(v4), joinSubnets(v6)
	br := &bridgeRow{Name: bridge}
	if err := d.c.Get(ctx, br); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", bridge, ErrBridgeNotFound)
		}
		return nil, fmt.Errorf("read bridge %s: %w", bridge, err)
	}
	t := &txn{}
	var changes []string
	tag := SecondaryUplinkTag
	iface := &ifaceRow{Name: nic}
	switch err := d.c.Get(ctx, iface); {
	case errors.Is(err, client.ErrNotFound):
		row := &ifaceRow{Name: nic, ExternalIDs: map[string]string{ExternalIDEgressSubnets: val}}
		if val6 != "" {
			row.ExternalIDs[ExternalIDEgressSubnets6] = val6
		}
		row.UUID = t.name()
		port := &portRow{UUID: t.name(), Name: nic, Interfaces: []string{row.UUID}, Tag: &tag}
		if err := t.add(d.c.Create(row, port)); err != nil {
			return nil, fmt.Errorf("create port %s: %w", nic, err)
		}
		if err := t.add(d.c.Where(br).Mutate(br, model.Mutation{
			Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{port.UUID},
		})); err != nil {
			return nil, fmt.Errorf("add port %s to %s: %w", nic, bridge, err)
		}
		msg := fmt.Sprintf("added %s to %s (tag %d, %s=%s", nic, bridge, tag, ExternalIDEgressSubnets, val)
		if val6 != "" {
			msg += fmt.Sprintf(", %s=%s", ExternalIDEgressSubnets6, val6)
		}
		changes = append(changes, msg+")")
	case err != nil:
		return nil, fmt.Errorf("read interface %s: %w", nic, err)
	default:
		if got, err := d.portBridge(ctx, nic); err != nil {
			return nil, err
		} else if got != bridge {
			return nil, fmt.Errorf("port %s is on bridge %s, want %s", nic, got, bridge)
		}
		old6, had6 := iface.ExternalIDs[ExternalIDEgressSubnets6]
		if iface.ExternalIDs[ExternalIDEgressSubnets] != val || old6 != val6 || (had6 && val6 == "") {
			ids := maps.Clone(iface.ExternalIDs)
			if ids == nil {
				ids = map[string]string{}
			}
			if ids[ExternalIDEgressSubnets] != val {
				changes = append(changes, fmt.Sprintf("set %s=%s on %s", ExternalIDEgressSubnets, val, nic))
			}
			ids[ExternalIDEgressSubnets] = val
			switch {
			case val6 != "" && old6 != val6:
				ids[ExternalIDEgressSubnets6] = val6
				changes = append(changes, fmt.Sprintf("set %s=%s on %s", ExternalIDEgressSubnets6, val6, nic))
			case val6 == "" && had6:
				delete(ids, ExternalIDEgressSubnets6)
				changes = append(changes, fmt.Sprintf("removed %s from %s", ExternalIDEgressSubnets6, nic))
			}
			iface.ExternalIDs = ids
			if err := t.add(d.c.Where(iface).Update(iface, &iface.ExternalIDs)); err != nil {
				return nil, fmt.Errorf("update interface %s: %w", nic, err)
			}
		}
		p := &portRow{Name: nic}
		if err := d.c.Get(ctx, p); err != nil {
			return nil, fmt.Errorf("read port %s: %w", nic, err)
		}
		if p.Tag == nil || *p.Tag != tag {
			p.Tag = &tag
			if err := t.add(d.c.Where(p).Update(p, &p.Tag)); err != nil {
				return nil, fmt.Errorf("update port %s: %w", nic, err)
			}
			changes = append(changes, fmt.Sprintf("set tag %d on %s", tag, nic))
		}
	}
	if err := d.transact(ctx, t); err != nil {
		return nil, fmt.Errorf("secondary uplink %s on %s: %w", nic, bridge, err)
	}
	return changes, nil
}

// PortBridge returns the bridge that holds the port named name ("" when no port has that name)
// and whether its interface is marked as a secondary uplink (ExternalIDEgressSubnets). node-setup
// uses it to refuse an --egress-interface that is already another port (the primary uplink, the
// gateway port, a pod's veth) before it changes anything.
func (d *DB) PortBridge(ctx context.Context, name string) (bridge string, secondary bool, err error) {
	bridge, err = d.portBridge(ctx, name)
	if errors.Is(err, ErrPortNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	i := &ifaceRow{Name: name}
	if err := d.c.Get(ctx, i); err != nil && !errors.Is(err, client.ErrNotFound) {
		return "", false, fmt.Errorf("read interface %s: %w", name, err)
	}
	_, secondary = i.ExternalIDs[ExternalIDEgressSubnets]
	return bridge, secondary, nil
}
