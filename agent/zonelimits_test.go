package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl/ofctltest"
)

// zoneLimiter is a Conntrack with zone limits kept in memory.
type zoneLimiter struct {
	*ofctltest.Fake
	max    int
	limits map[uint16]int
	sets   int
}

func (z *zoneLimiter) ConntrackMax(context.Context) (int, error) { return z.max, nil }

func (z *zoneLimiter) SetConntrackZoneLimits(_ context.Context, l map[uint16]int) error {
	z.sets++
	for k, v := range l {
		z.limits[k] = v
	}
	return nil
}

func (z *zoneLimiter) DeleteConntrackZoneLimits(_ context.Context, zones ...uint16) error {
	for _, k := range zones {
		delete(z.limits, k)
	}
	return nil
}

func (z *zoneLimiter) ConntrackZoneLimits(_ context.Context, zones ...uint16) (map[uint16]flows.ZoneLimit, error) {
	out := map[uint16]flows.ZoneLimit{}
	for _, k := range zones {
		out[k] = flows.ZoneLimit{Limit: z.limits[k]}
	}
	return out, nil
}

// Full syncs set every zone to ZoneLimitPercent of the datapath maximum, write only when the
// datapath holds other limits (e.g. after an ovs-vswitchd restart), and lift them at 0 %.
func TestZoneLimits(t *testing.T) {
	f := newFixture(t)
	lim := &zoneLimiter{Fake: f.ex, max: 1000, limits: map[uint16]int{}}
	f.r = f.newReconcilerWith(func(c *ReconcilerConfig) { c.Conntrack = lim; c.ZoneLimitPercent = 40 })
	f.seedNodes(f.r)
	require.NoError(t, f.sync())
	assert.Equal(t, map[uint16]int{flows.ZoneService: 400, flows.ZonePod: 400, flows.ZoneService6: 400}, lim.limits)
	assert.Equal(t, 1, lim.sets)
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Equal(t, 1, lim.sets, "unchanged limits are not written again")
	clear(lim.limits) // ovs-vswitchd restarted
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Equal(t, 2, lim.sets)
	assert.Equal(t, 400, lim.limits[flows.ZoneService])
	f.r.syncer.cfg.ZoneLimitPercent = 0
	f.r.RequestFullSync()
	require.NoError(t, f.sync())
	assert.Empty(t, lim.limits, "0 % lifts the limits")
}
