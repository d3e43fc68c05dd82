package kubee2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/ovs-srcip/ovs-srcip/test/lab"
)

// setAgentsMode restarts every agent with --preserve-source-ip=mode ("": the lab's default,
// annotated).
func setAgentsMode(t *testing.T, mode string) {
	t.Helper()
	for _, n := range theLab.Nodes {
		var extra []string
		if mode != "" {
			extra = []string{"--preserve-source-ip=" + mode}
		}
		require.NoError(t, theLab.SetAgentExtraArgs(n.Name, extra...))
		require.NoError(t, theLab.RestartAgent(n.Name))
	}
}

// onEveryNode waits until cond holds on the br-ex flows of every node.
func onEveryNode(t *testing.T, what string, cond func(brEx string) bool) {
	t.Helper()
	require.NoError(t, lab.WaitFor(func() error {
		for _, n := range theLab.Nodes {
			out, err := theLab.DumpFlows(n.Name, "br-ex")
			if err != nil {
				return err
			}
			if !cond(out) {
				return fmt.Errorf("%s: not yet: %s", n.Name, what)
			}
		}
		return nil
	}, followTimeout), what)
}

// served reports whether a br-ex dump has flows of NodePort port other than a drain's
// (priority 90: it stays while a connection to the entry point is in conntrack).
func served(port int) func(brEx string) bool {
	tok := fmt.Sprintf("tp_dst=%d", port)
	return func(s string) bool {
		for _, l := range strings.Split(s, "\n") {
			if strings.Contains(l, tok) && !strings.Contains(l, "priority=90,") {
				return true
			}
		}
		return false
	}
}

func not(f func(string) bool) func(string) bool { return func(s string) bool { return !f(s) } }

// agentEvents lists the Events the agents recorded on Service name.
func agentEvents(ctx context.Context, t *testing.T, name string) []string {
	t.Helper()
	list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Service", "involvedObject.name": name}.String()})
	require.NoError(t, err)
	var out []string
	for _, e := range list.Items {
		if e.Source.Component == "srcip-agent" {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

// --preserve-source-ip=all against a live API server: an unannotated NodePort Service
// (externalTrafficPolicy Cluster) gets flows on every node and keeps the client IP with real
// packets to a backend on another node; one annotated "false" gets no flows (and, with no
// kube-proxy in the lab, no answer); switching the first to externalTrafficPolicy Local removes
// its flows from every node, and so does the label service.kubernetes.io/service-proxy-name.
// Neither Service gets an Event. Back in annotated mode (the default)
// the agents serve no unannotated Service.
func TestPreserveAllServesUnannotated(t *testing.T) {
	ctx := context.Background()
	setAgentsMode(t, "all")
	restored := false
	t.Cleanup(func() {
		if !restored {
			setAgentsMode(t, "")
		}
	})

	plain := newService("all-plain", 30240, "echo-a")
	plain.Annotations = nil
	optOut := newService("all-optout", 30241, "echo-a")
	optOut.Annotations = map[string]string{annotation: "false"}
	for _, s := range []*corev1.Service{plain, optOut} {
		_, err := cs.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{})
		require.NoError(t, err)
		name := s.Name
		t.Cleanup(func() { _ = cs.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}) })
	}

	onEveryNode(t, "unannotated NodePort Service programmed", served(30240))
	for i := 0; i < 3; i++ {
		r := waitOK(t, "tcp", "192.0.2.11:30240")
		assert.Equal(t, clientIP, r.ClientIP(), "the backend sees the client's address")
		assert.Equal(t, "echo-a", r.Pod)
		t.Logf("unannotated 192.0.2.11:30240: answered by %s, which saw the client %s", r.Pod, r.ClientIP())
	}
	settle()
	onEveryNode(t, "opted-out Service not programmed", not(served(30241)))
	_, err := theLab.RequestWith("", "tcp", "192.0.2.11:30241", lab.RequestOpts{Timeout: "2s"})
	assert.Error(t, err, "the opted-out Service has no flows (and the lab has no kube-proxy)")
	t.Logf("opted out 192.0.2.11:30241: no flows on any node, request: %v", err)

	svc, err := cs.CoreV1().Services(ns).Get(ctx, "all-plain", metav1.GetOptions{})
	require.NoError(t, err)
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	_, err = cs.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
	require.NoError(t, err)
	start := time.Now()
	onEveryNode(t, "externalTrafficPolicy Local: flows removed", not(served(30240)))
	t.Logf("externalTrafficPolicy Local: flows gone from every node in %v", time.Since(start).Round(time.Millisecond))
	settle()
	assert.Empty(t, agentEvents(ctx, t, "all-plain"), "a Service that is no longer eligible gets no Event")
	assert.Empty(t, agentEvents(ctx, t, "all-optout"), "an opt-out gets no Event")

	// Back to Cluster, then back to annotated mode: served again, then left alone.
	svc, err = cs.CoreV1().Services(ns).Get(ctx, "all-plain", metav1.GetOptions{})
	require.NoError(t, err)
	svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	_, err = cs.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
	require.NoError(t, err)
	onEveryNode(t, "externalTrafficPolicy Cluster again: programmed", served(30240))
	assert.Equal(t, clientIP, waitOK(t, "tcp", "192.0.2.11:30240").ClientIP())

	// Handed to another proxy (the label survives the informers' trimming): off the path; the
	// label removed: back.
	for _, label := range []map[string]string{{"service.kubernetes.io/service-proxy-name": "other-proxy"}, nil} {
		svc, err = cs.CoreV1().Services(ns).Get(ctx, "all-plain", metav1.GetOptions{})
		require.NoError(t, err)
		svc.Labels = label
		_, err = cs.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{})
		require.NoError(t, err)
		if label != nil {
			onEveryNode(t, "another proxy's: flows removed", not(served(30240)))
		} else {
			onEveryNode(t, "kube-proxy's again: programmed", served(30240))
		}
	}
	setAgentsMode(t, "")
	restored = true
	onEveryNode(t, "annotated mode: the unannotated Service is not served", not(served(30240)))
}
