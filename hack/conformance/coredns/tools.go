//go:build tools

// Package coredns pins CoreDNS at the version kubeadm v1.37 deploys (k8s.io/kubernetes
// cmd/kubeadm/app/constants CoreDNSVersion), in a module of its own so that its dependencies do not
// move the Kubernetes pins of hack/conformance. Nothing imports it; hack/conformance/build.sh
// compiles github.com/coredns/coredns from it.
package coredns

import _ "github.com/coredns/coredns"
