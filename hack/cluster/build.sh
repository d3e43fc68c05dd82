#!/usr/bin/env bash
# Builds what the real-kubelet lab (test/cluster) runs besides the control plane, from the Go module
# proxy, using the pins of two nested modules, into a cache directory keyed by the sha256 of those
# pins, the image writer's source, this script and the machine architecture:
#
#   ${SRCIP_CACHE:-$HOME/.cache/ovs-srcip}/cluster/<hash>/
#     kubelet kube-proxy kube-scheduler    k8s/: k8s.io/kubernetes v1.37.2, hack/controlplane's pins
#     kubectl                              k8s/: the same (rollout undo/status, as an operator runs them)
#     containerd containerd-shim-runc-v2 ctr    node/: containerd v2.4.2 (CGO off, no btrfs/devmapper/zfs)
#     mkimage                              node/mkimage: docker-archive/OCI image writer (go-containerregistry;
#                                          also the release's: hack/image.sh)
#     cni/{host-local,loopback,bridge}     node/: containernetworking/plugins v1.10.0
#
# runc comes from Debian (hack/deps.sh). The last line on stdout is that directory. A cache hit
# returns at once; a miss compiles into a temporary directory next to it and renames it into place
# (an interrupted build never leaves a partial entry); one build per key at a time (flock). Timings
# go to stderr. Cold, with the Go build cache warm from hack/controlplane: ~3-4 minutes on 2 cores
# (containerd ~75-150 s, kubelet ~45 s), ~2 GB of RAM while linking kubelet.
set -euo pipefail

K8S_VERSION=v1.37.2
CONTAINERD_VERSION=v2.4.2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${SRCIP_CACHE:-${HOME:-/root}/.cache/ovs-srcip}/cluster
hash=$( (cd "$here" && cat build.sh k8s/go.mod k8s/go.sum k8s/tools.go node/go.mod node/go.sum node/tools.go \
	node/mkimage/main.go; uname -m) | sha256sum | cut -c1-16)
out=$root/$hash
bins=(kubelet kube-proxy kube-scheduler kubectl containerd containerd-shim-runc-v2 ctr mkimage
	cni/host-local cni/loopback cni/bridge)

complete() {
	local b
	for b in "${bins[@]}"; do [[ -x $1/$b ]] || return 1; done
}

if complete "$out"; then
	touch "$out" # entries unused for 14 days are pruned after a build
	echo "cluster: cache hit $out" >&2
	echo "$out"
	exit 0
fi

mkdir -p "$root"
exec 9>"$root/.lock-$hash"
flock 9
if complete "$out"; then
	echo "cluster: cache hit $out (built by a concurrent caller)" >&2
	echo "$out"
	exit 0
fi

tmp=$(mktemp -d "$root/.tmp-$hash-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/cni"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

major=${K8S_VERSION#v}; major=${major%%.*}
minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"

export CGO_ENABLED=0 GOWORK=off GOFLAGS="-buildvcs=false -mod=readonly"

t0=$(now)
echo "cluster: cache miss, building into $out" >&2
(cd "$here/k8s" && go mod download) && (cd "$here/node" && go mod download)
echo "cluster: modules downloaded in $(since "$t0")s" >&2

cd "$here/k8s"
for c in kubelet kube-proxy kube-scheduler kubectl; do
	t=$(now)
	go build -trimpath -ldflags "$ldflags" -o "$tmp/$c" "k8s.io/kubernetes/cmd/$c"
	echo "cluster: $c built in $(since "$t")s" >&2
done

cd "$here/node"
t=$(now)
go build -trimpath -tags no_btrfs,no_devmapper,no_zfs \
	-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" -o "$tmp/" \
	github.com/containerd/containerd/v2/cmd/containerd \
	github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
	github.com/containerd/containerd/v2/cmd/ctr
echo "cluster: containerd, containerd-shim-runc-v2, ctr built in $(since "$t")s" >&2

t=$(now)
go build -trimpath -ldflags "-s -w" -o "$tmp/cni/" \
	github.com/containernetworking/plugins/plugins/ipam/host-local \
	github.com/containernetworking/plugins/plugins/main/loopback \
	github.com/containernetworking/plugins/plugins/main/bridge
go build -trimpath -ldflags "-s -w" -o "$tmp/mkimage" ./mkimage
echo "cluster: CNI plugins and mkimage built in $(since "$t")s" >&2

"$tmp/kubelet" --version >&2
"$tmp/containerd" --version >&2

chmod 755 "$tmp"
mv -T "$tmp" "$out"
trap - EXIT
find "$root" -mindepth 1 -maxdepth 1 \( -name '[0-9a-f]*' -mtime +14 -o -name '.lock-*' -mtime +14 \
	-o -name '.tmp-*' -mmin +180 \) -exec rm -rf {} + || true
echo "cluster: built in $(since "$t0")s" >&2
echo "$out"
