package ofctl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	"k8s.io/klog/v2"
)

// Interface.external_ids keys that srcip-cni writes on a pod's port (ovs-vswitchd.conf.db(5),
// Interface table, "external_ids"). The agent reads the pod identity keys in PodPorts.
const (
	// ExtIDPodNamespace and ExtIDPodName are the pod's namespace and name (K8S_POD_NAMESPACE,
	// K8S_POD_NAME of CNI_ARGS).
	ExtIDPodNamespace = "pod-namespace"
	ExtIDPodName      = "pod-name"
	// ExtIDPodUID is the pod's metadata.uid (K8S_POD_UID of CNI_ARGS).
	ExtIDPodUID = "pod-uid"
	// ExtIDAttachedMAC is the MAC address of the pod's own interface (the container end).
	ExtIDAttachedMAC = "attached-mac"
	// ExtIDIPAddresses is the pod's addresses in CIDR form, comma-separated ("10.244.1.5/24").
	ExtIDIPAddresses = "ip_addresses"
	// ExtIDContainer is the CNI container id (CNI_CONTAINERID) of the attachment; every port
	// srcip-cni creates carries it, and DetachContainer and ContainerPorts find ports by it.
	ExtIDContainer = "srcip-cni-container"
	// ExtIDIfName is the CNI interface name inside the container (CNI_IFNAME, e.g. "eth0"): with
	// ExtIDContainer it names the attachment of CNI 1.1 GC.
	ExtIDIfName = "srcip-cni-ifname"
	// ExtIDMode is srcip-cni's mode for the attachment: absent for a pod on br-int (its only
	// network), ModeChained for the egress interface chained mode adds beside another main CNI
	// (ip_addresses then holds the main CNI's addresses from prevResult; docs/egress.md).
	ExtIDMode = "srcip-cni-mode"
	// ModeChained is ExtIDMode's value for a chained egress interface.
	ModeChained = "chained"
)

// ContainerPort is a port on a bridge that srcip-cni attached (Interface.external_ids carries
// ExtIDContainer).
type ContainerPort struct {
	// Name is the Port and Interface name (the host end of the pod's veth).
	Name string
	// ContainerID and IfName are ExtIDContainer and ExtIDIfName (IfName is empty when unset).
	ContainerID, IfName string
	// OFPort is Interface.ofport: > 0 once ovs-vswitchd added the port, -1 when it could not,
	// 0 while not known yet.
	OFPort int
	// Error is Interface.error, ovs-vswitchd's reason for a port it could not add ("" if none).
	Error string
	// ExternalIDs is the whole Interface.external_ids map.
	ExternalIDs map[string]string
}

// BridgeDatapathType returns Bridge.datapath_type of bridge ("system" or "" for the kernel
// datapath, "netdev" for the userspace datapath, "dummy" in tests). Error: ErrBridgeNotFound
// (wrapped) or the read error.
func (d *DB) BridgeDatapathType(ctx context.Context, bridge string) (string, error) {
	br := &bridgeRow{Name: bridge}
	if err := d.c.Get(ctx, br); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return "", fmt.Errorf("%s: %w", bridge, ErrBridgeNotFound)
		}
		return "", fmt.Errorf("read bridge %s: %w", bridge, err)
	}
	return br.DatapathType, nil
}

// AttachPort adds the network device name (a system interface such as the host end of a veth,
// Interface.type "") to bridge as a Port with one Interface of the same name whose external_ids
// are externalIDs, in one OVSDB transaction, then waits (at most wait, or until ctx ends) for
// ovs-vswitchd to assign its ofport, and returns it (> 0). A port of that name already on
// bridge gets externalIDs merged into its external_ids instead (a repeated call is harmless), less
// the agent's acknowledgement ExtIDAgentFlows unless externalIDs carries it.
// Errors: ErrBridgeNotFound (wrapped); the name is a port of another bridge; the transaction
// error; ovs-vswitchd could not add the device (ofport -1, with Interface.error); the timeout.
// On error the port is left in place: use DetachPort to remove it.
func (d *DB) AttachPort(ctx context.Context, bridge, name string, externalIDs map[string]string, wait time.Duration) (int, error) {
	br := &bridgeRow{Name: bridge}
	if err := d.c.Get(ctx, br); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return 0, fmt.Errorf("%s: %w", bridge, ErrBridgeNotFound)
		}
		return 0, fmt.Errorf("read bridge %s: %w", bridge, err)
	}
	t := &txn{}
	iface := &ifaceRow{Name: name}
	switch err := d.c.Get(ctx, iface); {
	case errors.Is(err, client.ErrNotFound):
		iface := &ifaceRow{UUID: t.name(), Name: name, ExternalIDs: maps.Clone(externalIDs)}
		port := &portRow{UUID: t.name(), Name: name, Interfaces: []string{iface.UUID}}
		if err := t.add(d.c.Create(iface, port)); err != nil {
			return 0, fmt.Errorf("create port %s: %w", name, err)
		}
		if err := t.add(d.c.Where(br).Mutate(br, model.Mutation{
			Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{port.UUID},
		})); err != nil {
			return 0, fmt.Errorf("add port %s to %s: %w", name, bridge, err)
		}
	case err != nil:
		return 0, fmt.Errorf("read interface %s: %w", name, err)
	default:
		if got, err := d.portBridge(ctx, name); err != nil {
			return 0, err
		} else if got != bridge {
			return 0, fmt.Errorf("port %s is on bridge %s, want %s", name, got, bridge)
		}
		ids := maps.Clone(iface.ExternalIDs)
		if ids == nil {
			ids = map[string]string{}
		}
		maps.Copy(ids, externalIDs)
		if _, ok := externalIDs[ExtIDAgentFlows]; !ok {
			delete(ids, ExtIDAgentFlows) // a new attachment waits for a new acknowledgement
		}
		if !maps.Equal(ids, iface.ExternalIDs) {
			iface.ExternalIDs = ids
			if err := t.add(d.c.Where(iface).Update(iface, &iface.ExternalIDs)); err != nil {
				return 0, fmt.Errorf("update interface %s: %w", name, err)
			}
		}
	}
	if err := d.transact(ctx, t); err != nil {
		return 0, fmt.Errorf("add port %s to %s: %w", name, bridge, err)
	}
	return d.waitOFPort(ctx, name, wait)
}

// waitOFPort waits, on the cache, until interface name has an ofport > 0 (returned), -1 (error
// with Interface.error) or wait ends. It looks again at every cache change (Wakeup) and at
// least every 100 ms.
func (d *DB) waitOFPort(ctx context.Context, name string, wait time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		wake := d.wakeup()
		i := &ifaceRow{Name: name}
		err := d.c.Get(ctx, i)
		switch {
		case err != nil && !errors.Is(err, client.ErrNotFound):
			return 0, fmt.Errorf("read interface %s: %w", name, err)
		case err == nil && i.OFPort != nil && *i.OFPort > 0:
			return *i.OFPort, nil
		case err == nil && i.OFPort != nil && *i.OFPort < 0:
			reason := "no reason given"
			if i.Error != nil {
				reason = *i.Error
			}
			return 0, fmt.Errorf("ovs-vswitchd could not add port %s (ofport -1): %s", name, reason)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("port %s got no ofport within %s (is ovs-vswitchd running?): %w", name, wait, ctx.Err())
		case <-wake:
		case <-tick.C:
		}
	}
}

// ContainerPorts lists the ports of bridge whose Interface.external_ids carry ExtIDContainer,
// sorted by name. Error: ErrBridgeNotFound (wrapped) or a read error.
func (d *DB) ContainerPorts(ctx context.Context, bridge string) ([]ContainerPort, error) {
	var out []ContainerPort
	err := d.eachInterface(ctx, bridge, func(p *portRow, i *ifaceRow) bool {
		id := i.ExternalIDs[ExtIDContainer]
		if id == "" {
			return false
		}
		cp := ContainerPort{Name: p.Name, ContainerID: id, IfName: i.ExternalIDs[ExtIDIfName],
			ExternalIDs: maps.Clone(i.ExternalIDs)}
		if i.OFPort != nil {
			cp.OFPort = *i.OFPort
		}
		if i.Error != nil {
			cp.Error = *i.Error
		}
		out = append(out, cp)
		return true
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b ContainerPort) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DetachContainer removes from bridge every port that srcip-cni attached for containerID and
// ifName (ExtIDContainer and ExtIDIfName; a port without ExtIDIfName matches any ifName; an
// empty ifName matches every port of the container), in one transaction, and returns the removed
// port names. No such port, or no such bridge, is no error (nil, nil): DEL is idempotent.
func (d *DB) DetachContainer(ctx context.Context, bridge, containerID, ifName string) ([]string, error) {
	ports, err := d.ContainerPorts(ctx, bridge)
	if errors.Is(err, ErrBridgeNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range ports {
		if p.ContainerID == containerID && (ifName == "" || p.IfName == "" || p.IfName == ifName) {
			names = append(names, p.Name)
		}
	}
	if err := d.DetachPorts(ctx, bridge, names...); err != nil {
		return nil, err
	}
	return names, nil
}

// DetachPorts removes the named ports from bridge in one transaction (the Port and Interface
// rows go with the bridge's reference, as with ovs-vsctl del-port). Names that are not ports of
// bridge, and a missing bridge, are ignored.
func (d *DB) DetachPorts(ctx context.Context, bridge string, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	br := &bridgeRow{Name: bridge}
	if err := d.c.Get(ctx, br); errors.Is(err, client.ErrNotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("read bridge %s: %w", bridge, err)
	}
	var uuids []string
	for _, name := range names {
		p := &portRow{Name: name}
		if err := d.c.Get(ctx, p); errors.Is(err, client.ErrNotFound) {
			continue
		} else if err != nil {
			return fmt.Errorf("read port %s: %w", name, err)
		}
		if slices.Contains(br.Ports, p.UUID) {
			uuids = append(uuids, p.UUID)
		}
	}
	if len(uuids) == 0 {
		return nil
	}
	t := &txn{}
	if err := t.add(d.c.Where(br).Mutate(br, model.Mutation{
		Field: &br.Ports, Mutator: ovsdb.MutateOperationDelete, Value: uuids,
	})); err != nil {
		return fmt.Errorf("remove ports %v from %s: %w", names, bridge, err)
	}
	if err := d.transact(ctx, t); err != nil {
		return fmt.Errorf("remove ports %v from %s: %w", names, bridge, err)
	}
	klog.FromContext(ctx).V(2).Info("Removed ports", "bridge", bridge, "ports", names)
	return nil
}
