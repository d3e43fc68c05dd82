//go:build tools

// Package metallb pins MetalLB's speaker and controller (go.mod says why v0.15.2), which
// hack/metallb/build.sh compiles and writes into images for the real-kubelet lab; nothing imports
// it.
package metallb

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)
