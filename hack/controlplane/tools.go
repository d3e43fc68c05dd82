//go:build tools

// Package controlplane pins the Kubernetes and etcd commands that build.sh
// compiles for the tests; nothing imports it.
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
