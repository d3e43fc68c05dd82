package lab

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// A Stream is a running "echo stream" client: one TCP connection on which each Exchange sends a
// request and reads the answer, every answer recorded in its StreamLog. Its methods are safe for
// concurrent use, but one goroutine at a time should read answers (Next, Exchange).
type Stream struct {
	stdin io.WriteCloser
	lines <-chan string

	mu  sync.Mutex
	log StreamLog
}

// StartStream starts cmd, an "echo stream" client (for instance "ip netns exec NS echo stream
// --addr ..."), with pipes to its stdin and from its stdout; its stdout is read in a goroutine of
// its own, up to buf lines ahead of Next. The first answer, to the connect, is for Next. The
// caller ends the program (CloseStdin, or a kill) and waits for cmd.
func StartStream(cmd *exec.Cmd, buf int) (*Stream, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &Stream{stdin: stdin, lines: streamLines(stdout, buf)}, nil
}

// Next waits for the next answer and records it. Errors: the program exited ("echo stream
// exited"); it printed "ERROR <reason>", as it does before it exits on a failed exchange (the
// error is that line); it printed a line that is not a Reply.
func (s *Stream) Next() (Reply, error) {
	r, err := nextStreamReply(s.lines)
	if err != nil {
		return Reply{}, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log.Add(r, now)
	return r, nil
}

// Exchange sends one request on the connection and waits for its answer (Next).
func (s *Stream) Exchange() (Reply, error) {
	if _, err := io.WriteString(s.stdin, "\n"); err != nil {
		return Reply{}, fmt.Errorf("echo stream: %w", err)
	}
	return s.Next()
}

// ExchangeLine is Exchange with request line req instead of the default one ("echo stream":
// "delay 8s" has the server answer 8 s later).
func (s *Stream) ExchangeLine(req string) (Reply, error) {
	if _, err := io.WriteString(s.stdin, strings.TrimSpace(req)+"\n"); err != nil {
		return Reply{}, fmt.Errorf("echo stream: %w", err)
	}
	return s.Next()
}

// CloseStdin closes the program's stdin: echo stream then closes the connection and exits.
func (s *Stream) CloseStdin() error { return s.stdin.Close() }

// Log is a copy of what the stream recorded so far.
func (s *Stream) Log() StreamLog {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.log
	l.sources, l.clients = maps.Clone(l.sources), maps.Clone(l.clients)
	return l
}

// streamLines sends the lines of r on the returned channel (room for buf), closed at the end of r.
func streamLines(r io.Reader, buf int) <-chan string {
	lines := make(chan string, buf)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines
}

// nextStreamReply waits for the next line of lines and parses it (Stream.Next).
func nextStreamReply(lines <-chan string) (Reply, error) {
	l, ok := <-lines
	if !ok {
		return Reply{}, errors.New("echo stream exited")
	}
	if strings.HasPrefix(l, "ERROR") {
		return Reply{}, errors.New(l)
	}
	var r Reply
	if err := json.Unmarshal([]byte(l), &r); err != nil {
		return Reply{}, fmt.Errorf("echo stream: bad line %q: %w", l, err)
	}
	return r, nil
}

// StreamLog is what a test keeps of the answers on one echo stream: how many, when the last came,
// the longest silence between two and the addresses the server saw. The zero value is ready; it
// is not safe for concurrent use.
type StreamLog struct {
	Answers int
	Last    time.Time     // the last answer's arrival (zero: none yet)
	MaxGap  time.Duration // the longest time between two answers
	sources map[string]bool
	clients map[string]bool
}

// Add records r, which arrived at at.
func (l *StreamLog) Add(r Reply, at time.Time) {
	if l.sources == nil {
		l.sources, l.clients = map[string]bool{}, map[string]bool{}
	}
	l.sources[r.ClientIP()] = true
	l.clients[r.Client] = true
	if !l.Last.IsZero() && at.Sub(l.Last) > l.MaxGap {
		l.MaxGap = at.Sub(l.Last)
	}
	l.Answers++
	l.Last = at
}

// Sources are the client IPs the server saw (Reply.ClientIP), sorted.
func (l *StreamLog) Sources() []string { return slices.Sorted(maps.Keys(l.sources)) }

// Clients are the client addresses (IP:port) the server saw (Reply.Client), sorted.
func (l *StreamLog) Clients() []string { return slices.Sorted(maps.Keys(l.clients)) }
