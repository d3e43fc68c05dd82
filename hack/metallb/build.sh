#!/usr/bin/env bash
# Builds MetalLB's speaker and controller for the real-kubelet lab (test/cluster/metallb) from the
# Go module proxy, at the pin of the nested module here (go.mod says why v0.15.2), and writes them
# into images with the lab's image writer (hack/cluster's mkimage), into a cache directory keyed by
# the sha256 of the pins, this script, mkimage's source and the machine architecture:
#
#   ${SRCIP_CACHE:-$HOME/.cache/ovs-srcip}/metallb/<hash>/
#     speaker controller                   go.universe.tf/metallb v0.15.2 (CGO off)
#     metallb-speaker.tar                  docker-archive, localhost/ovs-srcip/metallb-speaker:v0.15.2
#     metallb-controller.tar               docker-archive, localhost/ovs-srcip/metallb-controller:v0.15.2
#     metallb-native.yaml                  the module's config/manifests/metallb-native.yaml (CRDs,
#                                          RBAC, controller Deployment, speaker DaemonSet, webhooks),
#                                          copied from the module cache; test/cluster/metallb edits
#                                          it in memory (images, webhooks off). Never committed.
#
# It is a script and cache of its own so that hack/cluster's cache key (kubelet, containerd) does
# not change with it. The last line on stdout is that directory. A cache hit returns at once; a
# miss compiles into a temporary directory next to it and renames it into place; one build per key
# at a time (flock). Timings go to stderr. hack/cluster/build.sh runs first (a cache hit after
# `make cluster`) for mkimage.
set -euo pipefail

METALLB_VERSION=v0.15.2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${SRCIP_CACHE:-${HOME:-/root}/.cache/ovs-srcip}/metallb
hash=$( (cd "$here" && cat build.sh go.mod go.sum tools.go ../cluster/node/mkimage/main.go; uname -m) |
	sha256sum | cut -c1-16)
out=$root/$hash
files=(speaker controller metallb-speaker.tar metallb-controller.tar metallb-native.yaml)

complete() {
	local f
	for f in "${files[@]}"; do [[ -s $1/$f ]] || return 1; done
}

if complete "$out"; then
	touch "$out" # entries unused for 14 days are pruned after a build
	echo "metallb: cache hit $out" >&2
	echo "$out"
	exit 0
fi

mkdir -p "$root"
exec 9>"$root/.lock-$hash"
flock 9
if complete "$out"; then
	echo "metallb: cache hit $out (built by a concurrent caller)" >&2
	echo "$out"
	exit 0
fi

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

t0=$(now)
clusterbin=$("$here/../cluster/build.sh" | tail -1)

tmp=$(mktemp -d "$root/.tmp-$hash-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

export CGO_ENABLED=0 GOWORK=off GOFLAGS="-buildvcs=false -mod=readonly"

echo "metallb: cache miss, building into $out" >&2
cd "$here"
go mod download
echo "metallb: modules downloaded in $(since "$t0")s" >&2

t=$(now)
go build -trimpath -ldflags "-s -w" -o "$tmp/" go.universe.tf/metallb/speaker go.universe.tf/metallb/controller
echo "metallb: speaker, controller built in $(since "$t")s" >&2

mod=$(go list -m -f '{{.Dir}}' go.universe.tf/metallb)
install -m 644 "$mod/config/manifests/metallb-native.yaml" "$tmp/metallb-native.yaml"
for c in speaker controller; do
	"$clusterbin/mkimage" -ref "localhost/ovs-srcip/metallb-$c:$METALLB_VERSION" -out "$tmp/metallb-$c.tar" \
		-label "org.opencontainers.image.version=$METALLB_VERSION" "$tmp/$c"
done
"$tmp/speaker" --help >/dev/null 2>&1 || { echo "metallb: speaker --help failed" >&2; exit 1; }

chmod 755 "$tmp"
mv -T "$tmp" "$out"
trap - EXIT
find "$root" -mindepth 1 -maxdepth 1 \( -name '[0-9a-f]*' -mtime +14 -o -name '.lock-*' -mtime +14 \
	-o -name '.tmp-*' -mmin +180 \) -exec rm -rf {} + || true
echo "metallb: built in $(since "$t0")s" >&2
echo "$out"
