#!/usr/bin/env bash
# Writes the release image of ovs-srcip without docker: srcip-agent (with its node-setup step) and
# srcipctl in /usr/local/bin, srcip-cni, host-local, loopback and portmap in
# /usr/local/lib/ovs-srcip/cni (node-setup's --cni-source-dir), and this machine's ovs-ofctl,
# ovs-appctl, ovs-vsctl and nft with their shared libraries (Debian's openvswitch-common and
# nftables: hack/deps.sh), laid out as deploy/daemonset.yaml expects. The image writer is the
# real-kubelet lab's (hack/cluster/node/mkimage, go-containerregistry from the Go module proxy).
#
#   hack/image.sh [-v VERSION] [-r REPOSITORY] [-o DIR] [-f oci|docker] [-l]
#
# VERSION (default: the VERSION file) is stamped in the binaries (package version) and is the
# image's tag and its org.opencontainers.image.version label; REPOSITORY defaults to
# ghcr.io/ovs-srcip/srcip-agent (what deploy/ and the Helm chart name). Writes
# DIR/srcip-agent-VERSION.tar (default DIR: bin/image), an OCI image layout tarball (-f docker: a
# docker-archive tarball), and prints its path as the last line. -l is for the rolling-upgrade
# test only (test/cluster/install TestRollingUpgrade), never for a release: the agent gets one
# more br-ex-invisible flow in br-int (flows.upgradeTestLayout, flows/upgradetest.go), a flow
# layout the build without -l does not have. On each containerd node:
#   ctr -n k8s.io images import srcip-agent-VERSION.tar
# or push it to a registry with any OCI tool (skopeo copy oci-archive:..., crane push, ...).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=$(cat "$root/VERSION")
repo=ghcr.io/ovs-srcip/srcip-agent
outdir=$root/bin/image
format=oci
testlayout=
while getopts "v:r:o:f:l" opt; do
	case $opt in
	v) version=$OPTARG ;;
	r) repo=$OPTARG ;;
	o) outdir=$OPTARG ;;
	f) format=$OPTARG ;;
	l) testlayout=1 ;;
	*) echo "usage: $0 [-v VERSION] [-r REPOSITORY] [-o DIR] [-f oci|docker] [-l]" >&2; exit 2 ;;
	esac
done
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || true)
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
work=$(mktemp -d "$outdir/.build-XXXXXX")
trap 'rm -rf "$work"' EXIT

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false}"
pkg=github.com/ovs-srcip/ovs-srcip/version
ldflags="-s -w -X $pkg.Version=$version -X $pkg.Commit=$commit"
if [ -n "$testlayout" ]; then
	ldflags="$ldflags -X github.com/ovs-srcip/ovs-srcip/flows.upgradeTestLayout=1"
fi
cd "$root"
# Static binaries (no cgo), one go build per directory (its packages' main names the files).
go build -trimpath -ldflags "$ldflags" -o "$work/bin/" ./cmd/srcip-agent ./cmd/srcipctl
go build -trimpath -ldflags "$ldflags" -o "$work/cni/" ./cmd/srcip-cni
# The CNI plugins node-setup installs beside srcip-cni, at the version of the repository's module.
go build -trimpath -ldflags "-s -w" -o "$work/cni/" \
	github.com/containernetworking/plugins/plugins/ipam/host-local \
	github.com/containernetworking/plugins/plugins/main/loopback \
	github.com/containernetworking/plugins/plugins/meta/portmap
(cd "$root/hack/cluster/node" && GOWORK=off GOFLAGS="$GOFLAGS -mod=readonly" go build -o "$work/mkimage" ./mkimage)

out=$outdir/srcip-agent-$version.tar
files=("$work/bin/srcip-agent=/usr/local/bin/srcip-agent" "$work/bin/srcipctl=/usr/local/bin/srcipctl")
for c in srcip-cni host-local loopback portmap; do
	files+=("$work/cni/$c=/usr/local/lib/ovs-srcip/cni/$c")
done
"$work/mkimage" -ref "$repo:$version" -out "$out.tmp" -format "$format" -entrypoint /usr/local/bin/srcip-agent \
	-label org.opencontainers.image.title=srcip-agent \
	-label org.opencontainers.image.version="$version" \
	-label org.opencontainers.image.revision="$commit" \
	-label org.opencontainers.image.source=https://github.com/ovs-srcip/ovs-srcip \
	-programs ovs-ofctl,ovs-appctl,ovs-vsctl,nft "${files[@]}"
mv "$out.tmp" "$out"
echo "image: $repo:$version ($format, $(du -h "$out" | cut -f1))" >&2
echo "$out"
