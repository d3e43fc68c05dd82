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
	_ agent.PodFlowAcker      = (*dataplane)(nil)
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

// PodPorts lists the pod ports of br-int.
func (d *dataplane) PodPorts(ctx context.Context) ([]agent.PodPort, error) {
	return d.db.PodPorts(ctx, d.cfg.BrInt)
}

// PodPortChanges fires after OVSDB changes that may be pod ports' (ofctl.DB.PodPortChanges).
func (d *dataplane) PodPortChanges() <-chan struct{} { return d.db.PodPortChanges() }

// AckPodFlows writes external_ids:srcip-agent-flows on the pods' Interfaces, which srcip-cni's
// ADD waits for (ofctl.DB.AckPodFlows).
func (d *dataplane) AckPodFlows(ctx context.Context, acks map[string]flows.Cookie) error {
	return d.db.AckPodFlows(ctx, acks)
}

// Changes fires on every OVSDB change other than of pod ports, including the repopulation after a
// reconnect, and on every ovs-vswitchd restart.
func (d *dataplane) Changes() <-chan struct{} {
	if d.changes != nil {
		return d.changes
	}
	return d.db.Changes()
}
