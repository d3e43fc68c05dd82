#!/usr/bin/env bash
# Builds the Helm CLI (helm.sh/helm/v3 at the pin of this nested module, from the Go module proxy)
# into a cache directory keyed by the sha256 of the pins, this script and the architecture, for the
# chart's tests (deploy/helm_test.go, test/cluster/install):
#   ${SRCIP_CACHE:-$HOME/.cache/ovs-srcip}/helm/<hash>/helm
# The last line on stdout is that path. A cache hit returns at once; a miss takes ~2 minutes on 2
# cores and is renamed into place when complete; one build per key at a time (flock).
set -euo pipefail

HELM_VERSION=v3.22.0
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=${SRCIP_CACHE:-${HOME:-/root}/.cache/ovs-srcip}/helm
hash=$( (cd "$here" && cat build.sh go.mod go.sum tools.go; uname -m) | sha256sum | cut -c1-16)
out=$root/$hash
if [[ -x $out/helm ]]; then
	echo "$out/helm"
	exit 0
fi
mkdir -p "$root"
exec 9>"$root/.lock-$hash"
flock 9
if [[ ! -x $out/helm ]]; then
	tmp=$(mktemp -d "$root/.tmp-$hash-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	echo "helm: cache miss, building $HELM_VERSION into $out" >&2
	(cd "$here" && CGO_ENABLED=0 GOWORK=off GOFLAGS="-buildvcs=false -mod=readonly" go build -trimpath \
		-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" -o "$tmp/helm" helm.sh/helm/v3/cmd/helm)
	mv "$tmp" "$out"
	trap - EXIT
fi
echo "$out/helm"
