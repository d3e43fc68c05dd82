package main

import (
	"context"
	"fmt"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// dataplane adapts ofctl.DB to agent.Dataplane.
type dataplane struct {
	db      *ofctl.DB
	cfg     ofctl.IntegrationConfig
	bridges map[flows.Bridge]string
	// changes merges OVSDB changes and ovs-vswitchd restarts (see mergeChanges).
	changes <-chan struct{}
}

// mergeChanges returns a coalescing channel that fires on every OVSDB change and on every
// ovs-vswitchd restart (which OVSDB does not show).
func mergeChanges(ctx context.Context, db, restarts <-chan struct{}) <-chan struct{} {
	out := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-db:
			case _, ok := <-restarts:
				if !ok {
					return
				}
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
}

var (
	_ agent.Dataplane         = (*dataplane)(nil)
	_ agent.ConnectionChecker = (*dataplane)(nil)
)

// Connected reports whether the OVSDB connection is up (for /healthz).
func (d *dataplane) Connected() bool { return d.db.Connected() }

// EnsureIntegration creates the integration plumbing and names the pipeline's tables in OVSDB
// (so that dump-flows --names shows them).
func (d *dataplane) EnsureIntegration(ctx context.Context) (flows.Ports, error) {
	ports, err := d.db.EnsureIntegration(ctx, d.cfg)
	if err != nil {
		return ports, err
	}
	for b, name := range d.bridges {
		names := map[int]string{}
		for t, n := range flows.TableNames(b) {
			names[int(t)] = n
		}
		if err := d.db.NameTables(ctx, name, names); err != nil {
			return ports, fmt.Errorf("name tables of %s: %w", name, err)
		}
	}
	return ports, nil
}

func (d *dataplane) PodPorts(ctx context.Context) ([]agent.PodPort, error) {
	pps, err := d.db.PodPorts(ctx, d.cfg.BrInt)
	if err != nil {
		return nil, err
	}
	out := make([]agent.PodPort, 0, len(pps))
	for _, p := range pps {
		out = append(out, agent.PodPort{Namespace: p.Namespace, Name: p.Name, Interface: p.Interface, MAC: p.MAC, OFPort: p.OFPort, IPs: p.IPs, UID: p.UID, Chained: p.Chained})
	}
	return out, nil
}

// Changes fires on every OVSDB change, including the repopulation after a reconnect, and on every
// ovs-vswitchd restart.
func (d *dataplane) Changes() <-chan struct{} {
	if d.changes != nil {
		return d.changes
	}
	return d.db.Changes()
}
