package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// usage is a process's memory and CPU from /proc.
type usage struct {
	RSSMB, PeakRSSMB float64
	CPUSeconds       float64
}

func procUsage(pid int) (usage, error) {
	var u usage
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			u.RSSMB = kb / 1024
		case "VmHWM:":
			u.PeakRSSMB = kb / 1024
		}
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// Fields after the command name (in parentheses): utime and stime are the 14th and 15th.
	s := string(st)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	stt, _ := strconv.ParseFloat(f[12], 64)
	u.CPUSeconds = (ut + stt) / 100 // USER_HZ
	return u, nil
}

// httpOK polls url until it answers 200 or the timeout passes, every interval.
func httpOK(url string, interval, timeout time.Duration) (time.Time, error) {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s not ready after %v (last: %v)", url, timeout, err)
		}
		time.Sleep(interval)
	}
}

// event is one line of a monitor, with the time it was read.
type event struct {
	at   time.Time
	line string
}

// monitor runs argv (ovs-ofctl monitor, nft monitor) and sends every line of its standard output
// (fromStderr: standard error, where ovs-ofctl monitor prints the switch's asynchronous messages)
// that keep accepts to the returned channel, timestamped as read. stop ends it.
func monitor(argv []string, env []string, fromStderr bool, keep func(string) bool) (<-chan event, func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var out io.Reader
	var err error
	if fromStderr {
		out, err = cmd.StderrPipe()
	} else {
		out, err = cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
	}
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, nil, err
	}
	ch := make(chan event, 1<<16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := bufio.NewScanner(out)
		s.Buffer(make([]byte, 0, 1<<20), 64<<20)
		for s.Scan() {
			if l := s.Text(); keep(l) {
				ch <- event{at: time.Now(), line: l}
			}
		}
		close(ch)
	}()
	stop := func() {
		cancel()
		_ = cmd.Wait()
		wg.Wait()
	}
	return ch, stop, nil
}

// drain empties ch of what is already there.
func drain(ch <-chan event) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// latencies sorts ds and returns p50, p99 and max in milliseconds.
type latencyStats struct {
	N                  int
	P50ms, P99ms, Maxs float64
}

func stats(ds []time.Duration) latencyStats {
	if len(ds) == 0 {
		return latencyStats{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return latencyStats{N: len(ds), P50ms: ms(ds[len(ds)/2]), P99ms: ms(ds[len(ds)*99/100]), Maxs: ds[len(ds)-1].Seconds()}
}

func run(env []string, argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, stderr.String())
	}
	return string(out), nil
}

// fetch writes the body of url to file.
func fetch(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// waitQuiet waits (at most 60 s) until the machine has been at least 90% idle for two seconds,
// so that a cold start is not measured while the control plane still digests the objects just
// written (the endpoint controllers, the watch cache) or anything else runs. It logs how long it
// waited.
func waitQuiet() {
	start := time.Now()
	idle := func() (idle, total uint64) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		line, _, _ := strings.Cut(string(b), "\n")
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseUint(f, 10, 64)
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		return idle, total
	}
	quiet := 0
	for time.Since(start) < time.Minute {
		i0, t0 := idle()
		time.Sleep(time.Second)
		i1, t1 := idle()
		if t1 == t0 {
			return
		}
		if frac := float64(i1-i0) / float64(t1-t0); frac < 0.9 {
			quiet = 0
		} else if quiet++; quiet == 2 {
			logf("machine quiet (%.0f%% idle two seconds running) after %.1f s", frac*100, time.Since(start).Seconds())
			return
		}
	}
	logf("WARNING: the machine did not become quiet in a minute; measuring anyway")
}
