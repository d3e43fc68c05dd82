package ofctl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
)

// BridgeSpec is a bridge as the node set-up step (srcip-agent node-setup) wants it: br-ex built
// from the node's NIC, br-int with the host's gateway port.
type BridgeSpec struct {
	// Name is the bridge (and its own internal port's) name.
	Name string
	// DatapathType is Bridge.datapath_type: "" or "system" (kernel module), "netdev" (userspace).
	DatapathType string
	// HWAddr, when set, is other_config:hwaddr: the MAC of the bridge's own internal port.
	HWAddr string
	// Ports are system interfaces (Interface.type "") that must be ports of the bridge, e.g. the
	// uplink NIC.
	Ports []string
	// InternalPorts are internal ports besides the bridge's own, with their MTU
	// (Interface.mtu_request; 0: none requested).
	InternalPorts map[string]int
}

// Bridge returns the ports (names, sorted) and the datapath type of bridge name, or
// ErrBridgeNotFound (wrapped).
func (d *DB) Bridge(ctx context.Context, name string) (ports []string, datapathType string, err error) {
	br := &bridgeRow{Name: name}
	if err := d.c.Get(ctx, br); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return nil, "", fmt.Errorf("%s: %w", name, ErrBridgeNotFound)
		}
		return nil, "", fmt.Errorf("read bridge %s: %w", name, err)
	}
	for _, pu := range br.Ports {
		p := &portRow{UUID: pu}
		if err := d.c.Get(ctx, p); err == nil {
			ports = append(ports, p.Name)
		}
	}
	slices.Sort(ports)
	return ports, br.DatapathType, nil
}

// EnsureBridge makes bridge s exist as described, in one OVSDB transaction: created when missing
// (with its own internal port, fail_mode=secure and protocols OpenFlow10/13/15, as br-int is
// created by EnsureIntegration), or corrected (datapath type, fail mode, missing protocols,
// hwaddr, missing ports, an internal port's type and MTU). It returns what it changed, one line
// each; none when the bridge was already right. A port that exists on another bridge is an error.
func (d *DB) EnsureBridge(ctx context.Context, s BridgeSpec) ([]string, error) {
	t := &txn{}
	var changes []string
	br := &bridgeRow{Name: s.Name}
	isNew := false
	switch err := d.c.Get(ctx, br); {
	case errors.Is(err, client.ErrNotFound):
		isNew = true
		secure := "secure"
		br = &bridgeRow{UUID: t.name(), Name: s.Name, DatapathType: s.DatapathType, FailMode: &secure,
			Protocols: slices.Clone(brIntProtocols)}
		if s.HWAddr != "" {
			br.OtherConfig = map[string]string{"hwaddr": s.HWAddr}
		}
		if err := d.createPort(t, br, true, s.Name, "internal", nil); err != nil {
			return nil, err
		}
		changes = append(changes, fmt.Sprintf("created bridge %s (datapath_type %q, fail_mode secure, hwaddr %q)", s.Name, s.DatapathType, s.HWAddr))
	case err != nil:
		return nil, fmt.Errorf("read bridge %s: %w", s.Name, err)
	default:
		fixes := []string{}
		if err := d.fixBridge(t, br, s.DatapathType); err != nil {
			return nil, err
		}
		if len(t.ops) > 0 {
			fixes = append(fixes, "datapath_type/fail_mode/protocols")
		}
		if s.HWAddr != "" && br.OtherConfig["hwaddr"] != s.HWAddr {
			oc := maps.Clone(br.OtherConfig)
			if oc == nil {
				oc = map[string]string{}
			}
			oc["hwaddr"] = s.HWAddr
			br.OtherConfig = oc
			if err := t.add(d.c.Where(br).Update(br, &br.OtherConfig)); err != nil {
				return nil, fmt.Errorf("update bridge %s: %w", s.Name, err)
			}
			fixes = append(fixes, "other_config:hwaddr="+s.HWAddr)
		}
		if len(fixes) > 0 {
			changes = append(changes, fmt.Sprintf("corrected bridge %s: %s", s.Name, strings.Join(fixes, ", ")))
		}
	}
	for _, name := range s.Ports {
		n := len(t.ops)
		if err := d.ensurePort(ctx, t, br, isNew, name, "", nil); err != nil {
			return nil, err
		}
		if len(t.ops) > n {
			changes = append(changes, fmt.Sprintf("added port %s to %s", name, s.Name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.InternalPorts)) {
		mtu := s.InternalPorts[name]
		i := &ifaceRow{Name: name}
		switch err := d.c.Get(ctx, i); {
		case errors.Is(err, client.ErrNotFound):
			row := &ifaceRow{Name: name, Type: "internal"}
			if mtu > 0 {
				row.MTURequest = &mtu
			}
			if err := d.createPortRow(t, br, isNew, row); err != nil {
				return nil, err
			}
			changes = append(changes, fmt.Sprintf("added internal port %s (mtu_request %d) to %s", name, mtu, s.Name))
			continue
		case err != nil:
			return nil, fmt.Errorf("read interface %s: %w", name, err)
		}
		n := len(t.ops)
		if err := d.ensurePort(ctx, t, br, isNew, name, "internal", nil); err != nil {
			return nil, err
		}
		if len(t.ops) > n {
			changes = append(changes, fmt.Sprintf("corrected the type of %s to internal", name))
		}
		if mtu > 0 && (i.MTURequest == nil || *i.MTURequest != mtu) {
			i.MTURequest = &mtu
			if err := t.add(d.c.Where(i).Update(i, &i.MTURequest)); err != nil {
				return nil, fmt.Errorf("update interface %s: %w", name, err)
			}
			changes = append(changes, fmt.Sprintf("set mtu_request %d on %s", mtu, name))
		}
	}
	if isNew {
		if err := t.add(d.c.Create(br)); err != nil {
			return nil, fmt.Errorf("create bridge %s: %w", s.Name, err)
		}
		root, err := d.root(ctx)
		if err != nil {
			return nil, err
		}
		if err := t.add(d.c.Where(root).Mutate(root, model.Mutation{
			Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{br.UUID},
		})); err != nil {
			return nil, fmt.Errorf("add bridge %s: %w", s.Name, err)
		}
	}
	if err := d.transact(ctx, t); err != nil {
		return nil, fmt.Errorf("ensure bridge %s: %w", s.Name, err)
	}
	return changes, nil
}

func (d *DB) root(ctx context.Context) (*ovsRow, error) {
	var roots []ovsRow
	if err := d.c.List(ctx, &roots); err != nil {
		return nil, fmt.Errorf("read Open_vSwitch root row: %w", err)
	}
	if len(roots) != 1 {
		return nil, fmt.Errorf("read Open_vSwitch root row: %d rows, want 1", len(roots))
	}
	return &roots[0], nil
}

// DeleteBridge removes bridge name with all its ports (ovs-vsctl del-br); false when it did not
// exist. ovs-vswitchd then releases the bridge's system ports (the NIC) and deletes its internal
// devices.
func (d *DB) DeleteBridge(ctx context.Context, name string) (bool, error) {
	br := &bridgeRow{Name: name}
	if err := d.c.Get(ctx, br); errors.Is(err, client.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("read bridge %s: %w", name, err)
	}
	root, err := d.root(ctx)
	if err != nil {
		return false, err
	}
	t := &txn{}
	// Bridge, Port and Interface are not root tables: removing the reference from the root row
	// garbage-collects the bridge and then its ports and interfaces.
	if err := t.add(d.c.Where(root).Mutate(root, model.Mutation{
		Field: &root.Bridges, Mutator: ovsdb.MutateOperationDelete, Value: []string{br.UUID},
	})); err != nil {
		return false, fmt.Errorf("delete bridge %s: %w", name, err)
	}
	if err := d.transact(ctx, t); err != nil {
		return false, fmt.Errorf("delete bridge %s: %w", name, err)
	}
	return true, nil
}

// WaitInterface waits (at most timeout, or until ctx ends) until ovs-vswitchd has given
// interface name an ofport and, when wantMAC, a mac_in_use, and returns them.
func (d *DB) WaitInterface(ctx context.Context, name string, wantMAC bool, timeout time.Duration) (int, net.HardwareAddr, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		i := &ifaceRow{Name: name}
		err := d.c.Get(ctx, i)
		last := "not in OVSDB yet"
		if err == nil {
			var mac net.HardwareAddr
			if i.MACInUse != nil {
				mac, _ = net.ParseMAC(*i.MACInUse)
			}
			if i.OFPort != nil && *i.OFPort > 0 && (!wantMAC || mac != nil) {
				return *i.OFPort, mac, nil
			}
			last = "no ofport yet"
			if i.Error != nil {
				last = "error: " + *i.Error
			}
		} else if !errors.Is(err, client.ErrNotFound) {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return 0, nil, fmt.Errorf("interface %s: %s after %s (is ovs-vswitchd running? see its log)", name, last, timeout)
		case <-tick.C:
		}
	}
}

// WaitBridgeGone waits until the cache no longer holds bridge name (after DeleteBridge).
func (d *DB) WaitBridgeGone(ctx context.Context, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if err := d.c.Get(ctx, &bridgeRow{Name: name}); errors.Is(err, client.ErrNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bridge %s still in OVSDB after %s", name, timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
