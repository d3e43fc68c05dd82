//go:build tools

// Package conformance pins what hack/conformance/build.sh compiles for the Kubernetes e2e suite:
// the test binary, the ginkgo CLI at the version k8s.io/kubernetes requires, kubectl (the e2e
// framework runs `kubectl exec` for RunHostCmd) and agnhost. Nothing
// imports it. The pins are hack/cluster/k8s's (same k8s.io/kubernetes and replace list), so the Go
// build cache warmed by the control-plane and cluster builds serves most packages.
package conformance

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/regression-issue-74839"
)
