package agent

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// RunnerConfig configures a Runner. Every duration is measured on Clock.
type RunnerConfig struct {
	// MinInterval is the shortest time from the start of one call to the start of the next:
	// requests that arrive sooner wait, and coalesce into one call (0: no bound).
	MinInterval time.Duration
	// MaxInterval is the longest time from the start of one call (or from the start of Loop) to
	// the start of the next: when nothing asks for a call sooner, one is made then (0: calls are
	// made only on request and for retries).
	MaxInterval time.Duration
	// RetryMin and RetryMax bound the delay of the call that retries a failed one: RetryMin after
	// the first failure, doubling (plus up to 10% jitter) per further failure, at most RetryMax
	// (plus jitter); a success starts again from RetryMin. MinInterval still applies.
	RetryMin, RetryMax time.Duration
	// Clock (nil: the real clock, clock.RealClock). Tests pass k8s.io/utils/clock/testing's
	// FakeClock.
	Clock clock.Clock
}

// Runner calls one function from one goroutine, at most once per MinInterval however often Run
// is requested (requests in between coalesce into one call), at least once per MaxInterval when
// set, and again after a failure with exponential backoff. It is a bounded-frequency runner as
// kube-proxy's BoundedFrequencyRunner is one, reduced to what the agent uses.
type Runner struct {
	fn      func(context.Context) error
	cfg     RunnerConfig
	clock   clock.Clock
	backoff wait.Backoff
	kick    chan struct{}
}

// NewRunner returns a Runner of fn (see RunnerConfig).
func NewRunner(fn func(context.Context) error, cfg RunnerConfig) *Runner {
	c := cfg.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	return &Runner{
		fn:      fn,
		cfg:     cfg,
		clock:   c,
		backoff: wait.Backoff{Duration: cfg.RetryMin, Factor: 2, Jitter: 0.1, Steps: 64, Cap: cfg.RetryMax},
		kick:    make(chan struct{}, 1),
	}
}

// Run requests a call; it never blocks. A request made while a call runs is served by another
// call after it.
func (r *Runner) Run() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Loop serves requests until ctx is done (it returns then, also while it waits out MinInterval;
// a call in progress is not interrupted but gets ctx). It must be called once.
func (r *Runner) Loop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	var last time.Time
	bo := r.backoff
	var retry, period clock.Timer
	if r.cfg.MaxInterval > 0 {
		period = r.clock.NewTimer(r.cfg.MaxInterval)
	}
	defer func() {
		stopTimer(retry)
		stopTimer(period)
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-timerC(retry):
		case <-timerC(period):
		}
		// The call below serves a pending retry too.
		stopTimer(retry)
		retry = nil
		if d := r.cfg.MinInterval - r.clock.Since(last); d > 0 {
			t := r.clock.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C():
			}
		}
		// Requests that arrived while waiting are served by this call.
		select {
		case <-r.kick:
		default:
		}
		last = r.clock.Now()
		err := r.fn(ctx)
		if r.cfg.MaxInterval > 0 {
			stopTimer(period)
			period = r.clock.NewTimer(max(0, r.cfg.MaxInterval-r.clock.Since(last)))
		}
		if err != nil {
			d := bo.Step()
			logger.Error(err, "Sync failed, retrying", "after", d)
			retry = r.clock.NewTimer(d)
			continue
		}
		bo = r.backoff
	}
}

// timerC returns t's channel, nil (never ready) for no timer.
func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

func stopTimer(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}
