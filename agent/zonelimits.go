package agent

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// zoneLimits is the conntrack step of a full sync (syncer.run): it bounds every zone of the
// pipeline (flows.Zones) to ZoneLimitPercent of the datapath's conntrack maximum, setting the
// limits only when the datapath holds others (ovs-vswitchd forgets them when it restarts), and
// reports each zone's limit and entries as metrics. Failures are logged and counted, never fatal:
// the flows do not depend on the limits.
func (s *syncer) zoneLimits(ctx context.Context, p *pass) error {
	lim, ok := s.cfg.Conntrack.(ConntrackLimiter)
	if !p.full || !ok {
		return nil
	}
	logger := klog.FromContext(ctx)
	if err := s.applyZoneLimits(ctx, lim); err != nil {
		s.metrics.ConntrackOps.WithLabelValues("limits", "error").Inc()
		logger.Error(err, "Could not set the conntrack zone limits; zones are bounded by the datapath's total only")
	}
	return nil
}

func (s *syncer) applyZoneLimits(ctx context.Context, lim ConntrackLimiter) error {
	zones := make([]uint16, 0, len(flows.Zones()))
	for _, z := range flows.Zones() {
		zones = append(zones, z.Zone)
	}
	cur, err := lim.ConntrackZoneLimits(ctx, zones...)
	if err != nil {
		return fmt.Errorf("read zone limits: %w", err)
	}
	want := map[uint16]int{}
	if s.cfg.ZoneLimitPercent > 0 {
		maxConns, err := lim.ConntrackMax(ctx)
		if err != nil {
			return fmt.Errorf("read the datapath's conntrack maximum: %w", err)
		}
		for _, z := range zones {
			want[z] = max(1, maxConns*s.cfg.ZoneLimitPercent/100)
		}
	}
	var set map[uint16]int
	var del []uint16
	for _, z := range zones {
		switch {
		case want[z] > 0 && cur[z].Limit != want[z]:
			if set == nil {
				set = map[uint16]int{}
			}
			set[z] = want[z]
		case want[z] == 0 && cur[z].Limit != 0:
			del = append(del, z)
		}
	}
	if len(set) > 0 {
		if err := lim.SetConntrackZoneLimits(ctx, set); err != nil {
			return err
		}
		s.metrics.ConntrackOps.WithLabelValues("limits", "ok").Inc()
		klog.FromContext(ctx).Info("Set conntrack zone limits", "limits", set, "percentOfDatapathMax", s.cfg.ZoneLimitPercent)
	}
	if len(del) > 0 {
		if err := lim.DeleteConntrackZoneLimits(ctx, del...); err != nil {
			return err
		}
		s.metrics.ConntrackOps.WithLabelValues("limits", "ok").Inc()
	}
	s.zones = map[uint16]flows.ZoneLimit{}
	for _, z := range flows.Zones() {
		s.zones[z.Zone] = flows.ZoneLimit{Limit: cur[z.Zone].Limit, Count: cur[z.Zone].Count}
		l := cur[z.Zone].Limit
		if w, ok := set[z.Zone]; ok {
			l = w
		} else if want[z.Zone] == 0 {
			l = 0
		}
		s.zones[z.Zone] = flows.ZoneLimit{Limit: l, Count: cur[z.Zone].Count}
		s.metrics.ConntrackZoneLimit.WithLabelValues(z.Name).Set(float64(l))
		s.metrics.ConntrackZoneEntries.WithLabelValues(z.Name).Set(float64(cur[z.Zone].Count))
	}
	return nil
}
