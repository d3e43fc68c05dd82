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
}

var _ agent.Dataplane = (*dataplane)(nil)

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
		out = append(out, agent.PodPort{Namespace: p.Namespace, Name: p.Name, Interface: p.Interface, MAC: p.MAC, OFPort: p.OFPort, IPs: p.IPs})
	}
	return out, nil
}

// Changes fires on every OVSDB change, including the repopulation after a reconnect.
func (d *dataplane) Changes() <-chan struct{} { return d.db.Changes() }
