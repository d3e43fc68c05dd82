package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ctrl-C while kube-proxy starts: the wait ends at once (it polled for its whole timeout, 2 min
// in the data-path phase, and then blamed kube-proxy).
func TestWaitKubeProxySyncInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	start := time.Now()
	_, _, err := waitKubeProxySync(ctx, "127.0.0.1:1", time.Minute) // nothing listens there
	require.ErrorContains(t, err, "interrupted")
	assert.Less(t, time.Since(start), 10*time.Second)
}

// Bad data-path flags are refused before anything is built.
func TestCheckDatapathFlags(t *testing.T) {
	defer func(kp, m string, r int) { *kubeProxyBin, *dpMeasure, *dpRounds = kp, m, r }(*kubeProxyBin, *dpMeasure, *dpRounds)
	*kubeProxyBin = "/bin/kube-proxy"
	require.NoError(t, checkDatapathFlags())
	*dpMeasure = "cps,bogus"
	assert.ErrorContains(t, checkDatapathFlags(), `unknown measurement "bogus"`)
	*dpMeasure, *dpRounds = "cps", 0
	assert.ErrorContains(t, checkDatapathFlags(), "at least 1")
	*dpRounds, *kubeProxyBin = 2, ""
	assert.ErrorContains(t, checkDatapathFlags(), "needs kube-proxy")
}
