// Package version holds the release of ovs-srcip the binaries were built from: srcip-agent
// --version, srcip-cni's about line and log, srcipctl version and the agent's status report
// (srcipctl status). The release builds stamp it with the linker (make image, make build):
//
//	go build -ldflags "-X github.com/ovs-srcip/ovs-srcip/version.Version=v0.1.0 \
//	    -X github.com/ovs-srcip/ovs-srcip/version.Commit=$(git rev-parse --short HEAD)" ./cmd/...
//
// The repository's VERSION file names the release (deploy/ and the Helm chart are pinned to it).
package version

import (
	"fmt"
	"runtime"
)

// Version is the release, e.g. v0.1.0; "devel" when the linker did not stamp it (go build, go
// test).
var Version = "devel"

// Commit is the git commit (short hash) of the build; empty when not stamped.
var Commit = ""

// String is Version, the commit when stamped and the Go release, e.g.
// "v0.1.0 (commit d045c63, go1.26.8)".
func String() string {
	if Commit == "" {
		return fmt.Sprintf("%s (%s)", Version, runtime.Version())
	}
	return fmt.Sprintf("%s (commit %s, %s)", Version, Commit, runtime.Version())
}
