package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// serviceCounters are the per Service port counters of the agent's /metrics (its flows' OVS
// counters, read at the scrape): srcip_agent_service_packets_total,
// srcip_agent_service_new_connections_total and srcip_agent_service_dropped_packets_total by
// reason.
type serviceCounters struct {
	Packets, NewConnections float64
	Dropped                 map[string]float64 // reason -> packets
}

// counterKey is the metric labels namespace, service, port (the port's name) and protocol.
type counterKey struct{ namespace, service, port, protocol string }

// Metrics reads the agent's /metrics (Prometheus text format).
func (c *agentClient) Metrics(ctx context.Context) (string, error) {
	b, err := c.get(ctx, "/metrics", nil)
	return string(b), err
}

// parseServiceCounters reads the per Service port counters of a /metrics text. Errors: the text
// does not parse as the Prometheus text format.
func parseServiceCounters(r io.Reader) (map[counterKey]*serviceCounters, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("agent /metrics: %w", err)
	}
	out := map[counterKey]*serviceCounters{}
	for _, name := range []string{"srcip_agent_service_packets_total", "srcip_agent_service_new_connections_total",
		"srcip_agent_service_dropped_packets_total"} {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			k := counterKey{l["namespace"], l["service"], l["port"], l["protocol"]}
			c := out[k]
			if c == nil {
				c = &serviceCounters{Dropped: map[string]float64{}}
				out[k] = c
			}
			v := m.GetCounter().GetValue()
			switch name {
			case "srcip_agent_service_packets_total":
				c.Packets = v
			case "srcip_agent_service_new_connections_total":
				c.NewConnections = v
			default:
				c.Dropped[l["reason"]] += v
			}
		}
	}
	return out, nil
}

// String renders the counters for status: "16 packets, 9 new connections, dropped packets:
// none", or the reasons with packets ("dropped packets: no-endpoints 2, outside-source-ranges 1").
func (c *serviceCounters) String() string {
	dropped := "none"
	var ds []string
	for _, r := range slices.Sorted(maps.Keys(c.Dropped)) {
		if c.Dropped[r] != 0 {
			ds = append(ds, fmt.Sprintf("%s %.0f", r, c.Dropped[r]))
		}
	}
	if len(ds) > 0 {
		dropped = strings.Join(ds, ", ")
	}
	return fmt.Sprintf("%.0f packets, %.0f new connections, dropped packets: %s", c.Packets, c.NewConnections, dropped)
}
