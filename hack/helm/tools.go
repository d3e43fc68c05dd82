//go:build tools

// Package helm pins the Helm CLI (helm.sh/helm/v3) that hack/helm/build.sh compiles from the Go
// module proxy for the tests of the chart deploy/helm/ovs-srcip (deploy/helm_test.go: helm
// template against kustomize build; test/cluster/install: helm install, rollout undo, uninstall on
// the real-kubelet lab). Nothing imports it.
package helm

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
