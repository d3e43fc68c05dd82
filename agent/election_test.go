package agent

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// TestLeaseElectionTakeoverAfterStepDown: a gateway that steps down releases its Lease, and the
// waiting candidate takes it on the informer's event, not at its next RetryPeriod try (here 3 s,
// up to 6.6 s with client-go's jitter; in the agent 1 s to 2.2 s, each an egress outage during
// a rolling update: docs/install.md "Upgrade"). Without the nudge the takeover below takes at
// least 2.5 s (the candidate tried once just before the release).
func TestLeaseElectionTakeoverAfterStepDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	ip := netip.MustParseAddr("192.0.2.50")
	elect := func(node string) *LeaseElection {
		e := NewLeaseElection(client, "ovs-srcip", node)
		e.LeaseDuration, e.RenewDeadline, e.RetryPeriod = 5*time.Second, 4*time.Second, 3*time.Second
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 2*time.Second, e.HasSynced, node+"'s Lease informer synced")
		return e
	}
	a := elect("node-a")
	a.Campaign([]netip.Addr{ip})
	waitUntil(t, 2*time.Second, func() bool { return a.Leading(ip) }, "node-a leads")

	b := elect("node-b")
	b.Campaign([]netip.Addr{ip})
	// b's elector tries at once, finds node-a's valid Lease, and waits RetryPeriod.
	waitUntil(t, 2*time.Second, func() bool { return b.Holder(ip) == "node-a" }, "node-b sees node-a's Lease")
	time.Sleep(300 * time.Millisecond)
	if b.Leading(ip) {
		t.Fatal("node-b leads while node-a holds the Lease")
	}

	syncs := 0
	t0 := time.Now()
	a.StepDown(context.Background(), func(context.Context) error { syncs++; return nil }, 2*time.Second)
	waitUntil(t, 2*time.Second, func() bool { return b.Leading(ip) }, "node-b leads after node-a's step-down")
	took := time.Since(t0)
	t.Logf("takeover after the step-down: %v (RetryPeriod %v)", took.Round(time.Millisecond), b.RetryPeriod)
	if took > time.Second {
		t.Errorf("node-b led %v after node-a stepped down, want under 1 s (RetryPeriod %v)", took, b.RetryPeriod)
	}
	if a.Leading(ip) {
		t.Error("node-a still leads after its step-down")
	}
	// StepDown synced once without its answers and once towards the new gateway (node-b).
	if syncs != 2 {
		t.Errorf("StepDown synced %d times, want 2 (answers removed, then towards node-b)", syncs)
	}
	if h := b.Holder(ip); h != "node-b" {
		t.Errorf("node-b's informer sees holder %q, want node-b", h)
	}
	// The nudge leaves a leader alone: node-b still leads a while later (a renewal, no flap).
	time.Sleep(500 * time.Millisecond)
	if !b.Leading(ip) {
		t.Error("node-b stopped leading after the takeover")
	}
}

func waitUntil(t *testing.T, d time.Duration, ok func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
