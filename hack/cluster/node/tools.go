//go:build tools

// Package node pins the container runtime and CNI plugins that hack/cluster/build.sh compiles for
// the real-kubelet lab (test/cluster): containerd v2 with its runc shim and ctr, and the
// reference CNI plugins host-local, loopback and bridge. Nothing imports it; the image writer
// (mkimage) is the only code of this module.
package node

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
