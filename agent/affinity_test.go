package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// A sessionAffinity port's group hashes the client IP with the affinity period as its basis
// (floor(unix seconds / timeoutSeconds)): when the next period starts, a sync with no object
// change gives the group the new basis (so a client whose learned choice idled out is hashed
// afresh, as kube-proxy chooses afresh after timeoutSeconds); a port without affinity has none,
// and turning affinity off stops the periods.
func TestAffinityPeriodRotatesTheHashBasis(t *testing.T) {
	f := newFixture(t)
	now := time.Unix(1_796_150_000, 0)
	f.r.model.now = func() time.Time { return now }
	f.seedNodes(f.r)
	timeout := int32(10)
	affinity := func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
	}
	svc := makeService("ns1", "sticky", 30100, affinity)
	f.r.OnService(nil, svc)
	f.r.OnService(nil, makeService("ns1", "plain", 30101))
	require.NoError(t, f.sync())
	period := func(name string) uint64 { return f.r.model.st.Services[svcKey(name)].AffinityPeriod }
	assert.Equal(t, uint64(179_615_000), period("sticky"))
	assert.Equal(t, uint64(0), period("plain"))
	assert.Equal(t, time.Unix(1_796_150_010, 0), f.r.model.nextAffinityPeriod())
	cookie := f.r.Applied(flows.BrEx)[svcKey("sticky")].Cookie

	// Within the period nothing changes.
	now = now.Add(9 * time.Second)
	require.NoError(t, f.sync())
	assert.Equal(t, uint64(179_615_000), period("sticky"))
	assert.Equal(t, cookie, f.r.Applied(flows.BrEx)[svcKey("sticky")].Cookie)

	// The next period: a new basis, the flow set rewritten, the next boundary 10 s on.
	now = now.Add(time.Second)
	require.NoError(t, f.sync())
	assert.Equal(t, uint64(179_615_001), period("sticky"))
	assert.NotEqual(t, cookie, f.r.Applied(flows.BrEx)[svcKey("sticky")].Cookie)
	assert.Equal(t, time.Unix(1_796_150_020, 0), f.r.model.nextAffinityPeriod())

	// Affinity off: no basis, no period to wait for.
	off := svc.DeepCopy()
	off.Spec.SessionAffinity, off.Spec.SessionAffinityConfig = corev1.ServiceAffinityNone, nil
	f.r.OnService(svc, off)
	require.NoError(t, f.sync())
	assert.Equal(t, uint64(0), period("sticky"))
	assert.True(t, f.r.model.nextAffinityPeriod().IsZero())
}

// The period timer drives the rotation on its own, with the real clock and the Runner: with a 1 s
// timeout the basis advances every second without any object change.
func TestAffinityPeriodTimerRotates(t *testing.T) {
	f := newFixture(t)
	f.seedNodes(f.r)
	timeout := int32(1)
	f.r.OnService(nil, makeService("ns1", "sticky", 30100, func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
	}))
	runner := NewRunner(f.r.Sync, RunnerConfig{MinInterval: 10 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	f.r.SetTrigger(runner.Run)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); runner.Loop(ctx) }()
	defer func() { cancel(); <-done }()
	runner.Run()
	period := func() uint64 {
		f.r.syncMu.Lock()
		defer f.r.syncMu.Unlock()
		return f.r.model.st.Services[svcKey("sticky")].AffinityPeriod
	}
	require.Eventually(t, func() bool { return period() != 0 }, 2*time.Second, 10*time.Millisecond)
	first := period()
	require.Eventually(t, func() bool { return period() >= first+3 }, 5*time.Second, 20*time.Millisecond,
		"the basis advanced from %d to %d in 5 s", first, period())
}
