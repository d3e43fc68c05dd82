package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// Bounds of the "established connection survives X" tests. These are behaviour bounds, not
// performance figures: a connection the dataplane breaks gets a RST (an error at once) or no answer
// at all (silence); a connection that survives answers every request.
const (
	// streamEvery is the pause between two requests on a held connection.
	streamEvery = 200 * time.Millisecond
	// maxSilence bounds each exchange on a held connection and so the longest time without an
	// answer a surviving connection may show: it covers one lost segment and its TCP retransmission
	// (RTO 200 ms, then 400 ms) on this loaded 2-core runner; a connection sent to the host stack
	// or to a dropped path exceeds it.
	maxSilence = 2 * time.Second
)

// heldStream is one TCP connection from the client netns, kept open by `echo stream`: every
// exchange sends a request on the same connection and reads the echo server's answer.
type heldStream struct {
	t     *testing.T
	addr  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string

	mu      sync.Mutex
	stop    chan struct{}
	done    chan struct{}
	first   lab.Reply
	answers int
	last    time.Time
	maxGap  time.Duration
	err     error
	errAt   time.Time
}

// holdConn connects from the client to addr, checks the first answer and returns the connection.
func holdConn(t *testing.T, addr string) *heldStream {
	t.Helper()
	ns, err := theLab.Netns("client")
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", ns, theLab.EchoBin(), "stream", "--addr", addr, "--timeout", maxSilence.String())
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &heldStream{t: t, addr: addr, cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	r, err := s.exchangeLine()
	require.NoError(t, err, "connection to %s not established", addr)
	s.first, s.last = r, time.Now()
	return s
}

// exchangeLine reads the answer to the request just sent (or to the connect).
func (s *heldStream) exchangeLine() (lab.Reply, error) {
	select {
	case l, ok := <-s.lines:
		if !ok {
			return lab.Reply{}, fmt.Errorf("echo stream to %s exited", s.addr)
		}
		if strings.HasPrefix(l, "ERROR") {
			return lab.Reply{}, fmt.Errorf("%s", l)
		}
		var r lab.Reply
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			return lab.Reply{}, fmt.Errorf("bad line %q: %w", l, err)
		}
		return r, nil
	case <-time.After(maxSilence + time.Second):
		return lab.Reply{}, fmt.Errorf("no answer from %s within %v", s.addr, maxSilence+time.Second)
	}
}

// exchange sends one request on the held connection and returns the answer.
func (s *heldStream) exchange() (lab.Reply, error) {
	if _, err := s.stdin.Write([]byte("\n")); err != nil {
		return lab.Reply{}, fmt.Errorf("echo stream to %s: %w", s.addr, err)
	}
	return s.exchangeLine()
}

// keepTalking exchanges on the connection every streamEvery until the returned stop is called;
// stop makes one more exchange (so the connection is proven AFTER whatever happened meanwhile)
// and returns the first error, the number of answers, and the longest time between two answers.
func (s *heldStream) keepTalking() (stop func() (answers int, maxGap time.Duration, err error)) {
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	s.last = time.Now()
	record := func() bool {
		r, err := s.exchange()
		now := time.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		if err == nil && r.ClientIP() != clientIP {
			err = fmt.Errorf("backend saw %s, not the client %s", r.Client, clientIP)
		}
		if err == nil && r.Pod != s.first.Pod {
			err = fmt.Errorf("the connection moved from %s to %s", s.first.Pod, r.Pod)
		}
		if err != nil {
			s.err, s.errAt = err, now
			return false
		}
		if gap := now.Sub(s.last); gap > s.maxGap {
			s.maxGap = gap
		}
		s.answers++
		s.last = now
		return true
	}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				record()
				return
			case <-time.After(streamEvery):
				if !record() {
					return
				}
			}
		}
	}()
	return func() (int, time.Duration, error) {
		close(s.stop)
		<-s.done
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err != nil {
			return s.answers, s.maxGap, fmt.Errorf("after %d answers, at %s: %w", s.answers, s.errAt.Format("15:04:05.000"), s.err)
		}
		return s.answers, s.maxGap, nil
	}
}

// requireSurvived checks what keepTalking's stop returned: no error, answers all along, and
// never silent for longer than one exchange may take.
func requireSurvived(t *testing.T, what string, stop func() (int, time.Duration, error)) {
	t.Helper()
	answers, maxGap, err := stop()
	require.NoError(t, err, "the held connection broke: %s", what)
	require.Greater(t, answers, 1, "no exchange on the held connection: %s", what)
	require.LessOrEqual(t, maxGap, maxSilence+streamEvery, "the held connection was silent for %v: %s", maxGap, what)
	t.Logf("held connection: %d answers, longest gap %v (%s)", answers, maxGap.Round(time.Millisecond), what)
}
