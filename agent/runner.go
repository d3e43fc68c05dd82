package agent

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Runner calls one function from one goroutine, at most once per MinInterval, however often
// Run is requested (requests in between coalesce into one call), and again after a failure with
// exponential backoff. It is kube-proxy's BoundedFrequencyRunner reduced to what the agent uses.
type Runner struct {
	fn      func(context.Context) error
	min     time.Duration
	backoff wait.Backoff
	kick    chan struct{}
}

// NewRunner returns a Runner of fn. minInterval bounds the call rate; failures are retried after
// retryMin, doubling up to retryMax.
func NewRunner(fn func(context.Context) error, minInterval, retryMin, retryMax time.Duration) *Runner {
	return &Runner{
		fn:      fn,
		min:     minInterval,
		backoff: wait.Backoff{Duration: retryMin, Factor: 2, Jitter: 0.1, Steps: 64, Cap: retryMax},
		kick:    make(chan struct{}, 1),
	}
}

// Run requests a call; it never blocks.
func (r *Runner) Run() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Loop serves requests until ctx is done. It must be called once.
func (r *Runner) Loop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	var last time.Time
	bo := r.backoff
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-retry:
		}
		retry = nil
		if wait := r.min - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		// Requests that arrived while waiting are served by this call.
		select {
		case <-r.kick:
		default:
		}
		last = time.Now()
		if err := r.fn(ctx); err != nil {
			d := bo.Step()
			logger.Error(err, "Sync failed, retrying", "after", d)
			retry = time.After(d)
			continue
		}
		bo = r.backoff
	}
}
