#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager (Kubernetes v1.37.2) and etcd (v3.7.0) from the
# Go module proxy, using the pins of this nested module, into a cache directory keyed by the
# sha256 of go.mod, go.sum, this script and the machine architecture:
#
#   ${SRCIP_CACHE:-$HOME/.cache/ovs-srcip}/controlplane/<hash>/{kube-apiserver,kube-controller-manager,etcd}
#
# The last line on stdout is that directory. A cache hit returns at once; a miss compiles into a
# temporary directory next to it and renames it into place, so an interrupted build never leaves
# a partial cache entry. Timings go to stderr. Cold: several minutes on 2 cores, ~3.7 GB of Go
# build cache, ~2.6 GB of RAM while linking.
set -euo pipefail

K8S_VERSION=v1.37.2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${SRCIP_CACHE:-${HOME:-/root}/.cache/ovs-srcip}/controlplane
hash=$( (cat "$here/go.mod" "$here/go.sum" "$here/build.sh"; uname -m) | sha256sum | cut -c1-16)
out=$root/$hash
bins=(kube-apiserver kube-controller-manager etcd)

complete() {
	local b
	for b in "${bins[@]}"; do [[ -x $1/$b ]] || return 1; done
}

if complete "$out"; then
	touch "$out" # entries unused for 14 days are pruned after a build
	echo "controlplane: cache hit $out" >&2
	echo "$out"
	exit 0
fi

mkdir -p "$root"
# One build per key at a time; a second caller waits and then finds the cache filled.
exec 9>"$root/.lock-$hash"
flock 9
if complete "$out"; then
	echo "controlplane: cache hit $out (built by a concurrent caller)" >&2
	echo "$out"
	exit 0
fi

tmp=$(mktemp -d "$root/.tmp-$hash-XXXXXX")
trap 'rm -rf "$tmp"' EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

major=${K8S_VERSION#v}; major=${major%%.*}
minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
# The module proxy does not give the release commit: gitCommit stays empty, not "$Format:%H$".
ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"

cd "$here"
export CGO_ENABLED=0 GOWORK=off GOFLAGS="-buildvcs=false -mod=readonly"

t0=$(now)
echo "controlplane: cache miss, building into $out" >&2
go mod download
echo "controlplane: modules downloaded in $(since "$t0")s" >&2

t=$(now)
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "controlplane: kube-apiserver built in $(since "$t")s" >&2

t=$(now)
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
echo "controlplane: kube-controller-manager built in $(since "$t")s" >&2

t=$(now)
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
echo "controlplane: etcd built in $(since "$t")s" >&2

"$tmp/kube-apiserver" --version >&2
"$tmp/etcd" --version >&2 # all of it: "| head -1" could SIGPIPE etcd and fail the build (pipefail)

chmod 755 "$tmp"
# rename(2) of the whole directory: the entry appears complete or not at all.
mv -T "$tmp" "$out"
trap - EXIT
# Prune entries (and their lock files) unused for 14 days and temporary dirs of builds killed
# over 3 hours ago.
find "$root" -mindepth 1 -maxdepth 1 \( -name '[0-9a-f]*' -mtime +14 -o -name '.lock-*' -mtime +14 \
	-o -name '.tmp-*' -mmin +180 \) -exec rm -rf {} + || true
echo "controlplane: built in $(since "$t0")s" >&2
echo "$out"
