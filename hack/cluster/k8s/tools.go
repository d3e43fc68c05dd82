//go:build tools

// Package k8s pins the Kubernetes node components and the scheduler that hack/cluster/build.sh
// compiles for the real-kubelet lab (test/cluster), and kubectl for its install tests (rollout
// undo and status as an operator runs them); nothing imports it. The pins are
// hack/controlplane's (same k8s.io/kubernetes and replace list), so the Go build cache warmed by
// the control-plane build serves most packages.
package k8s

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
