package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"
)

// runnerHarness runs a Runner on a fake clock. Every call of its function is reported on calls
// (with the fake time it started at); fail says whether the nth call (from 1) fails.
type runnerHarness struct {
	t     *testing.T
	clk   *testingclock.FakeClock
	r     *Runner
	calls chan time.Time
	n     int
	start time.Time
	stop  context.CancelFunc
	done  chan struct{}
}

func newRunnerHarness(t *testing.T, cfg RunnerConfig, fail func(n int) bool) *runnerHarness {
	h := &runnerHarness{t: t, start: time.Unix(1_000_000, 0), calls: make(chan time.Time, 100), done: make(chan struct{})}
	h.clk = testingclock.NewFakeClock(h.start)
	cfg.Clock = h.clk
	h.r = NewRunner(func(context.Context) error {
		h.n++ // only the Loop goroutine calls
		n := h.n
		h.calls <- h.clk.Now()
		if fail != nil && fail(n) {
			return errors.New("injected failure")
		}
		return nil
	}, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go func() {
		defer close(h.done)
		h.r.Loop(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
	})
	return h
}

// call waits for the next call and returns how long after the start (fake time) it started.
func (h *runnerHarness) call() time.Duration {
	h.t.Helper()
	select {
	case at := <-h.calls:
		return at.Sub(h.start)
	case <-time.After(5 * time.Second):
		h.t.Fatal("no call within 5 s")
		return 0
	}
}

// noCall checks that no call starts within 50 ms of real time.
func (h *runnerHarness) noCall() {
	h.t.Helper()
	select {
	case at := <-h.calls:
		h.t.Fatalf("unexpected call at %s", at.Sub(h.start))
	case <-time.After(50 * time.Millisecond):
	}
}

// timers waits until the Loop holds n timers on the fake clock (so that a Step reaches them).
func (h *runnerHarness) timers(n int) {
	h.t.Helper()
	require.Eventually(h.t, func() bool { return h.clk.Waiters() == n }, 5*time.Second, time.Millisecond,
		"want %d timers", n)
}

// A request more than MinInterval after the last call is served at once; one sooner waits until
// MinInterval after it.
func TestRunnerMinInterval(t *testing.T) {
	h := newRunnerHarness(t, RunnerConfig{MinInterval: time.Second}, nil)
	h.r.Run()
	assert.Equal(t, time.Duration(0), h.call())
	h.r.Run()
	h.timers(1)
	h.clk.Step(999 * time.Millisecond)
	h.noCall()
	h.clk.Step(time.Millisecond)
	assert.Equal(t, time.Second, h.call())

	h.timers(0)
	h.clk.Step(5 * time.Second)
	h.r.Run()
	assert.Equal(t, 6*time.Second, h.call(), "a request long after the last call is served at once")
}

// A burst of requests while the Runner waits out MinInterval makes one call; a request made
// during a call makes one more after it.
func TestRunnerCoalescesBursts(t *testing.T) {
	h := newRunnerHarness(t, RunnerConfig{MinInterval: time.Second}, nil)
	h.r.Run()
	h.call()
	for range 10 {
		h.r.Run()
	}
	h.timers(1)
	for range 10 {
		h.r.Run()
	}
	h.clk.Step(time.Second)
	assert.Equal(t, time.Second, h.call())
	h.noCall()
	h.timers(0)

	// A request arriving while the function runs.
	h2 := newRunnerHarness(t, RunnerConfig{MinInterval: time.Second}, nil)
	orig := h2.r.fn
	first := true
	h2.r.fn = func(ctx context.Context) error {
		if first {
			first = false
			h2.r.Run()
		}
		return orig(ctx)
	}
	h2.r.Run()
	assert.Equal(t, time.Duration(0), h2.call())
	h2.timers(1)
	h2.clk.Step(time.Second)
	assert.Equal(t, time.Second, h2.call())
	h2.noCall()
}

// With MaxInterval, a call is made MaxInterval after the start of the previous one (or of Loop)
// when nothing asked for one sooner; a requested call restarts the period.
func TestRunnerMaxInterval(t *testing.T) {
	h := newRunnerHarness(t, RunnerConfig{MinInterval: time.Second, MaxInterval: 10 * time.Second}, nil)
	h.timers(1)
	h.clk.Step(9 * time.Second)
	h.noCall()
	h.clk.Step(time.Second)
	assert.Equal(t, 10*time.Second, h.call())
	h.timers(1)
	h.clk.Step(10 * time.Second)
	assert.Equal(t, 20*time.Second, h.call())

	h.timers(1)
	h.clk.Step(4 * time.Second)
	h.r.Run()
	assert.Equal(t, 24*time.Second, h.call())
	h.timers(1)
	h.clk.Step(6 * time.Second) // 10 s after the periodic call, 6 s after the requested one
	h.noCall()
	h.clk.Step(4 * time.Second)
	assert.Equal(t, 34*time.Second, h.call())
}

// A failed call is retried after RetryMin, then after twice as long, up to RetryMax (each plus up
// to 10% jitter), without a request; a success resets the delay and stops retrying.
func TestRunnerRetriesAfterFailure(t *testing.T) {
	h := newRunnerHarness(t, RunnerConfig{MinInterval: 100 * time.Millisecond, RetryMin: time.Second, RetryMax: 4 * time.Second},
		func(n int) bool { return n <= 4 || n == 6 })
	h.r.Run()
	h.call()
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		h.timers(1)
		h.clk.Step(want - time.Millisecond)
		h.noCall()
		h.clk.Step(want/10 + time.Millisecond) // the jitter's most
		h.call()
	}
	// The fifth call succeeded: no retry.
	h.timers(0)
	h.clk.Step(time.Minute)
	h.noCall()

	// The sixth fails: the delay starts again from RetryMin.
	h.r.Run()
	h.call()
	h.timers(1)
	h.clk.Step(999 * time.Millisecond)
	h.noCall()
	h.clk.Step(101 * time.Millisecond)
	h.call()
	h.timers(0)
}

// Loop returns when its context is done: idle, while waiting out MinInterval, with a retry
// pending; Run never blocks, before Loop, after it, however often.
func TestRunnerStop(t *testing.T) {
	for name, setup := range map[string]func(h *runnerHarness){
		"idle": func(h *runnerHarness) {},
		"waiting out MinInterval": func(h *runnerHarness) {
			h.r.Run()
			h.call()
			h.r.Run()
			h.timers(1)
		},
		"retry pending": func(h *runnerHarness) {
			h.r.Run()
			h.call()
			h.r.Run()
			h.clk.Step(time.Second)
			h.call() // fails
			h.timers(1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newRunnerHarness(t, RunnerConfig{MinInterval: time.Second, RetryMin: time.Minute}, func(n int) bool { return n == 2 })
			setup(h)
			h.stop()
			select {
			case <-h.done:
			case <-time.After(5 * time.Second):
				t.Fatal("Loop did not return after its context was cancelled")
			}
			h.timers(0) // its timers are stopped
			for range 5 {
				h.r.Run()
			}
			h.clk.Step(time.Hour)
			h.noCall()
		})
	}
}
