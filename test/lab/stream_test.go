package lab

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStream drives a shell script as the stream client: it prints a first answer (the
// connect's), then for each line read from stdin the next line of its script, then exits.
func TestStream(t *testing.T) {
	cmd := exec.Command("sh", "-c", `echo '{"pod":"echo-a","node":"node1","client":"10.0.0.5:40000","from":"10.96.0.10:80","local":"10.0.0.5:40000"}'
		read _ && echo '{"pod":"echo-a","client":"10.0.0.5:40000"}'
		read _ && echo '{"pod":"echo-a","client":"10.0.0.6:40001"}'
		read _ && echo 'not json'
		read _ && echo 'ERROR read from 10.96.0.10:80: i/o timeout'
		read _ && exit 0`)
	s, err := StartStream(cmd, 1)
	require.NoError(t, err)
	t.Cleanup(func() { s.CloseStdin(); _ = cmd.Wait() })

	r, err := s.Next()
	require.NoError(t, err)
	assert.Equal(t, Reply{Pod: "echo-a", Node: "node1", Client: "10.0.0.5:40000", From: "10.96.0.10:80", Local: "10.0.0.5:40000"}, r)
	_, err = s.Exchange()
	require.NoError(t, err)
	r, err = s.Exchange()
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.6:40001", r.Client)
	log := s.Log()
	assert.Equal(t, 3, log.Answers)
	assert.Equal(t, []string{"10.0.0.5", "10.0.0.6"}, log.Sources())
	assert.Equal(t, []string{"10.0.0.5:40000", "10.0.0.6:40001"}, log.Clients())

	_, err = s.Exchange()
	assert.ErrorContains(t, err, `echo stream: bad line "not json"`)
	_, err = s.Exchange()
	assert.EqualError(t, err, "ERROR read from 10.96.0.10:80: i/o timeout")
	_, err = s.Exchange()
	assert.EqualError(t, err, "echo stream exited", "the end of its output")
	assert.Equal(t, 3, s.Log().Answers, "errors are no answers")
	assert.Equal(t, []string{"10.0.0.5", "10.0.0.6"}, log.Sources(), "a Log is a copy")
}

func TestStartStreamFails(t *testing.T) {
	_, err := StartStream(exec.Command("/nonexistent/echo", "stream"), 1)
	assert.ErrorContains(t, err, "/nonexistent/echo")
}

func TestStreamLog(t *testing.T) {
	var l StreamLog
	assert.Nil(t, l.Sources())
	t0 := time.Unix(1000, 0)
	l.Add(Reply{Client: "192.0.2.10:40000"}, t0)
	assert.Zero(t, l.MaxGap, "one answer: no gap yet")
	l.Add(Reply{Client: "192.0.2.10:40000"}, t0.Add(200*time.Millisecond))
	l.Add(Reply{Client: "[2001:db8::5]:40001"}, t0.Add(3*time.Second))
	l.Add(Reply{Client: "192.0.2.9:40002"}, t0.Add(3200*time.Millisecond))
	assert.Equal(t, 4, l.Answers)
	assert.Equal(t, t0.Add(3200*time.Millisecond), l.Last)
	assert.Equal(t, 2800*time.Millisecond, l.MaxGap, "the longest silence, not the last")
	assert.Equal(t, []string{"192.0.2.10", "192.0.2.9", "2001:db8::5"}, l.Sources())
	assert.Equal(t, []string{"192.0.2.10:40000", "192.0.2.9:40002", "[2001:db8::5]:40001"}, l.Clients())
}
