#!/usr/bin/env bash
# Builds what running the Kubernetes e2e suite ([sig-network] first) against the real-kubelet lab
# (test/cluster) needs, at the control plane's Kubernetes v1.37.2, from the Go module proxy and this
# machine's Debian packages, without docker and without a registry, into a cache directory keyed by
# the sha256 of this script, the nested modules' go.mod/go.sum, their sources, test/pause, the
# versions of the Debian packages copied into the images and the machine architecture:
#
#   ${SRCIP_CACHE:-$HOME/.cache/ovs-srcip}/conformance/<hash>/
#     e2e.test     go test -c k8s.io/kubernetes/test/e2e at v1.37.2 (version ldflags: reports v1.37.2)
#     ginkgo       github.com/onsi/ginkgo/v2/ginkgo v2.32.0, the version k8s.io/kubernetes requires
#     kubectl      k8s.io/kubernetes/cmd/kubectl v1.37.2 (the e2e framework's RunHostCmd is kubectl exec)
#     coredns      github.com/coredns/coredns v1.14.6, kubeadm v1.37's CoreDNSVersion (nested module
#                  coredns/, so that its dependencies leave the Kubernetes pins alone)
#     images/images.txt  "REFERENCE FILE" a line; the references are what test/utils/image and
#                  kubeadm give (printed by imagelist/, not copied by hand)
#     images/*.tar docker-archive tarballs (`ctr -n k8s.io images import`), one image each, written
#                  by mkimage/ (go-containerregistry) from files of this machine:
#       agnhost_2.66.1.tar agnhost_2.55.tar  static agnhost (+ /agnhost-2 link, /uploads, porter's
#                  localhost.crt/key, user 1000 in group 50000), /coredns, the shell below, curl,
#                  OpenBSD nc, dig/nslookup/host, ip/ss, getent, iperf, socat, conntrack, iptables,
#                  nft, CA certificates; entrypoint /agnhost, cmd pause
#       busybox_1.37.0-2.tar                 the shell below; cmd sh
#       nginx_1.27.0-2.tar nginx_1.28.0-2.tar  the shell + Debian's nginx serving a page on port 80;
#                  cmd nginx -g 'daemon off;'
#       glibc-dns-testing_2.1.1.tar          the shell + dig/nslookup/host, getent, /coredns; cmd bash
#       distroless-iptables_v0.9.9.tar       the shell + iptables (nft, legacy), ip6tables, nft,
#                  conntrack, ip
#       regression-issue-74839_1.5.tar       its static binary; entrypoint /regression-issue-74839
#       pause_3.10.2.tar                     the repo's static test/pause; entrypoint /pause
#       coredns_v1.14.6.tar                  /coredns + CA certificates; entrypoint /coredns
#     The shell: bash (also /bin/sh), GNU coreutils, findutils, grep, sed, awk, GNU wget, and Debian
#     busybox-static's other applets; /etc/passwd, group, nsswitch.conf; PATH set.
#
# Every image holding programs is smoke-tested before the entry is kept: its layer is unpacked and
# its programs are run by chroot, with /proc mounted, in a network namespace of its own where
# agnhost netexec and nginx serve on loopback to curl, wget and nc (a missing shared library fails
# the build). The last line on stdout is the directory; timings go to stderr. A cache hit returns
# at once; a miss builds into a temporary directory next to it, renamed into place (never a partial
# entry); one build per key at a time (flock). Measured on 2 cores shared with other builds:
# cold (Go build cache empty for these packages, load average ~20 from the control-plane and
# cluster builds alongside): small programs 72 s, coredns 648 s, e2e.test ~24 min (a go test -c
# with vet on); warm Go build cache, fresh entry: 88-130 s (e2e.test 18-27 s, the images and their
# smoke tests 39-62 s, coredns 10-14 s, agnhost/ginkgo/mkimage/pause 11-33 s); a cache hit 0.03 s.
# The entry is ~500 MB (images 310 MB). e2e.test is linked last, alone; the build peaks at ~2.9 GB
# RSS (that link).
set -euo pipefail

K8S_VERSION=v1.37.2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
root=${SRCIP_CACHE:-${HOME:-/root}/.cache/ovs-srcip}/conformance

# Debian packages whose files go into the images (hack/deps.sh installs them).
debs=(busybox-static bash coreutils findutils grep sed mawk hostname util-linux wget curl netcat-openbsd bind9-dnsutils bind9-host iproute2 libc-bin iperf socat
	conntrack iptables nftables nginx ca-certificates)
pkgversions=$(dpkg-query -W -f '${Package} ${Version}\n' "${debs[@]}" 2>/dev/null || true)
hash=$( (cd "$here" && cat build.sh go.mod go.sum tools.go imagelist/main.go coredns/go.mod coredns/go.sum \
	coredns/tools.go mkimage/go.mod mkimage/go.sum mkimage/main.go "$repo"/test/pause/*.go
	echo "$pkgversions"; uname -m) | sha256sum | cut -c1-16)
out=$root/$hash

complete() {
	local f
	for f in e2e.test ginkgo kubectl coredns; do [[ -x $1/$f ]] || return 1; done
	[[ -s $1/images/images.txt ]] || return 1
	while read -r _ f; do [[ -s $1/images/$f ]] || return 1; done <"$1/images/images.txt"
}

if complete "$out"; then
	touch "$out" # entries unused for 14 days are pruned after a build
	echo "conformance: cache hit $out" >&2
	echo "$out"
	exit 0
fi

mkdir -p "$root"
exec 9>"$root/.lock-$hash"
flock 9
if complete "$out"; then
	echo "conformance: cache hit $out (built by a concurrent caller)" >&2
	echo "$out"
	exit 0
fi

tmp=$(mktemp -d "$root/.tmp-$hash-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
work=$tmp/.work # helpers and staging, removed before the rename
mkdir -p "$tmp/images" "$work/bin" "$work/etc"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

missing=()
for d in "${debs[@]}"; do
	grep -q "^$d " <<<"$pkgversions" || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "conformance: missing Debian packages ${missing[*]}; run hack/deps.sh (as root)" >&2
	exit 1
fi

major=${K8S_VERSION#v}; major=${major%%.*}
minor=${K8S_VERSION#v*.}; minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"

export CGO_ENABLED=0 GOWORK=off GOFLAGS="-buildvcs=false -mod=readonly"

t0=$(now)
echo "conformance: cache miss, building into $out" >&2
(cd "$here" && go mod download) && (cd "$here/coredns" && go mod download) && (cd "$here/mkimage" && go mod download)
echo "conformance: modules downloaded in $(since "$t0")s" >&2

# The small programs first: a failure there shows before the long e2e.test link.
cd "$here"
t=$(now)
go build -trimpath -ldflags "-s -w" -o "$work/bin/" ./imagelist \
	k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/regression-issue-74839
go build -trimpath -ldflags "-s -w" -o "$tmp/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
go build -trimpath -ldflags "$ldflags" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl
(cd mkimage && go build -trimpath -ldflags "-s -w" -o "$work/bin/mkimage" .)
(cd "$repo" && go build -trimpath -ldflags "-s -w" -o "$work/bin/pause" ./test/pause)
echo "conformance: imagelist, agnhost, regression-issue-74839, ginkgo, kubectl, mkimage, pause built in $(since "$t")s" >&2

"$work/bin/imagelist" >"$work/images.list"
corednsVersion=$(sed -n 's/^#coredns-version //p' "$work/images.list")
pinned=$(cd coredns && go list -m -f '{{.Version}}' github.com/coredns/coredns)
if [[ $corednsVersion != "$pinned" ]]; then
	echo "conformance: kubeadm deploys CoreDNS $corednsVersion, coredns/go.mod pins $pinned" >&2
	exit 1
fi
t=$(now)
(cd coredns && go build -trimpath -ldflags "-s -w" -o "$tmp/coredns" github.com/coredns/coredns)
echo "conformance: coredns $pinned built in $(since "$t")s" >&2

# Files of the images' /etc. agnhost's user and group are the ones the SupplementalGroups test
# expects to be defined in the image (uid 1000 in gid 50000).
cat >"$work/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin
user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh
EOF
cat >"$work/etc/group" <<'EOF'
root:x:0:
www-data:x:33:
user-defined-in-image:x:1000:
group-defined-in-image:x:50000:user-defined-in-image
nogroup:x:65534:
EOF
cat >"$work/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
shadow: files
hosts: files dns
networks: files
protocols: files
services: files
EOF
# nginx the way the upstream image serves: port 80, in the foreground, logs to the container's
# stdout/stderr, the default page at /usr/share/nginx/html.
cat >"$work/etc/nginx.conf" <<'EOF'
user www-data;
worker_processes auto;
pid /run/nginx.pid;
error_log /dev/stderr notice;
events {
	worker_connections 1024;
}
http {
	include /etc/nginx/mime.types;
	default_type application/octet-stream;
	access_log /dev/stdout;
	sendfile on;
	keepalive_timeout 65;
	server {
		listen 80;
		listen [::]:80;
		server_name localhost;
		location / {
			root /usr/share/nginx/html;
			index index.html;
		}
	}
}
EOF
echo '<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body><h1>Welcome to nginx!</h1></body></html>' \
	>"$work/etc/index.html"

path=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
etc=(-file "$work/etc/passwd=/etc/passwd" -file "$work/etc/group=/etc/group"
	-file "$work/etc/nsswitch.conf=/etc/nsswitch.conf" -dir /tmp=1777 -dir /root=0700 -dir /proc -dir /sys -dir /dev)
# The images' shell is bash (as /bin/sh too) with GNU coreutils, findutils, grep, sed and awk, and
# busybox-static's applets for the rest: Debian builds busybox-static as a "standalone shell" that
# prefers its own applets to PATH (its sh would run busybox's wget, which segfaults, and its nc and
# ip instead of the real ones), and its exec-ing applets (timeout, env, xargs, nohup) would too.
gnu=(bash wget find xargs grep sed awk hostname setsid)
while read -r f; do gnu+=("${f##*/}"); done < <(dpkg -L coreutils | grep -E '^/(usr/)?s?bin/[^/]+$')
shell=(-merged-usr -link /usr/bin/sh=bash -applets busybox "${etc[@]}" -env "$path")
for f in "${gnu[@]}"; do shell+=(-bin "$f"); done
dns=(-bin dig -bin nslookup -bin host -bin getent -bin bash -file "$tmp/coredns=/coredns")
net=(-bin curl -bin nc -bin ip -bin ss -bin iperf -bin socat -bin conntrack -bin iptables
	-bin ip6tables -bin iptables-save -bin iptables-restore -bin nft
	-tree /usr/lib/x86_64-linux-gnu/xtables=/usr/lib/x86_64-linux-gnu/xtables
	-file /etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt)
K=$(cd "$here" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)

image() { # image NAME REF FILE: writes one image's tarball
	local args
	case $1 in
	agnhost)
		args=("${shell[@]}" "${dns[@]}" "${net[@]}" -file "$work/bin/agnhost=/agnhost" -link /agnhost-2=agnhost
			-dir /uploads -file "$K/test/images/agnhost/porter/localhost.crt=/localhost.crt"
			-file "$K/test/images/agnhost/porter/localhost.key=/localhost.key"
			-dir /home/user-defined-in-image
			-entrypoint '["/agnhost"]' -cmd '["pause"]') ;;
	busybox) args=("${shell[@]}" -cmd '["sh"]') ;;
	nginx)
		args=("${shell[@]}" -bin nginx -file "$work/etc/nginx.conf=/etc/nginx/nginx.conf"
			-file /etc/nginx/mime.types=/etc/nginx/mime.types -file "$work/etc/index.html=/usr/share/nginx/html/index.html"
			-dir /var/lib/nginx -dir /var/log/nginx -dir /run -dir /var/www
			-cmd '["nginx","-g","daemon off;"]') ;;
	glibc-dns-testing) args=("${shell[@]}" "${dns[@]}" -cmd '["bash"]') ;;
	distroless-iptables)
		args=("${shell[@]}" -bin iptables -bin ip6tables -bin iptables-save -bin iptables-restore
			-bin ip6tables-save -bin ip6tables-restore -bin iptables-legacy -bin nft -bin conntrack -bin ip
			-tree /usr/lib/x86_64-linux-gnu/xtables=/usr/lib/x86_64-linux-gnu/xtables) ;;
	regression-issue-74839)
		args=(-file "$work/bin/regression-issue-74839=/regression-issue-74839" -env "$path"
			-entrypoint '["/regression-issue-74839"]') ;;
	pause) args=(-file "$work/bin/pause=/pause" -entrypoint '["/pause"]') ;;
	coredns)
		args=(-file "$tmp/coredns=/coredns" -file /etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt
			-entrypoint '["/coredns"]') ;;
	*) echo "conformance: no recipe for image $1 ($2)" >&2; return 1 ;;
	esac
	"$work/bin/mkimage" -ref "$2" -out "$tmp/images/$3" "${args[@]}" </dev/null
}

# unpack FILE DIR: the (one) layer of a docker-archive tarball into DIR.
unpack() {
	local x=$work/unpack layer
	rm -rf "$x" "$2" && mkdir -p "$x" "$2"
	tar -xf "$1" -C "$x"
	layer=$(sed -n 's/.*"Layers":\["\([^"]*\)".*/\1/p' "$x/manifest.json")
	tar -xzf "$x/$layer" -C "$2"
	rm -rf "$x"
}

# smoke NAME DIR: runs the image's programs in its unpacked root.
smoke() {
	local c
	case $1 in
	agnhost) c='set -e; curl --version; nc -h 2>&1 | head -1; wget --version | head -1; nslookup -version; dig -v
		host -V; ip -V; ss -V; bash --version | head -1; getent passwd user-defined-in-image; id user-defined-in-image
		iperf -v 2>&1 | head -1; socat -V | head -2; conntrack --version; iptables --version; nft --version; /coredns -version
		cat /etc/nsswitch.conf >/dev/null; ls / >/dev/null; timeout 1 sleep 0 ; seq 1 2 >/dev/null; hostname >/dev/null
		/agnhost netexec --help >/dev/null; /agnhost-2 --help >/dev/null; /agnhost --help | head -3
		/agnhost netexec --http-port 8080 --udp-port 8081 >/dev/null 2>&1 &
		i=0; until curl -sf 127.0.0.1:8080/healthz >/dev/null 2>&1 || [ $((i+=1)) -gt 100 ]; do sleep 0.1; done
		echo "curl: $(curl -sS 127.0.0.1:8080/echo?msg=ok)"; echo "wget: $(wget -qO- 127.0.0.1:8080/echo?msg=ok)"
		echo "nc udp: $(echo echo ok | nc -u -w 1 127.0.0.1 8081)"; nc -z -w 1 127.0.0.1 8080; echo "nc tcp: ok"; kill %1' ;;
	busybox) c='set -e; ls / >/dev/null; wget --version | head -1; seq 1 2 >/dev/null; nslookup 2>&1 | head -1' ;;
	nginx) c='set -e; nginx -v; nginx -t; nginx -g "daemon off;" >/dev/null 2>&1 &
		i=0; until wget -qO- 127.0.0.1:80/ >/dev/null 2>&1 || [ $((i+=1)) -gt 100 ]; do sleep 0.1; done
		wget -qO- 127.0.0.1:80/ | grep -o "Welcome to nginx!" | head -1; kill %1' ;;
	glibc-dns-testing) c='set -e; dig -v; nslookup -version; getent passwd root; bash --version | head -1; /coredns -version' ;;
	distroless-iptables) c='set -e; sleep 0; iptables --version; ip6tables --version; iptables-legacy --version; nft --version; conntrack --version; ip -V' ;;
	*) return 0 ;; # one static binary, nothing else
	esac
	# With /proc mounted, as in a container (busybox's applet lookup goes through /proc/self/exe).
	# In a network namespace of its own (only its loopback) for the servers it starts.
	unshare --net --mount --pid --fork --mount-proc="$2/proc" \
		sh -c 'ip link set lo up && : >"$0/dev/null" && mount --bind /dev/null "$0/dev/null" &&
			exec chroot "$0" /bin/sh -c "$1"' "$2" "$c" </dev/null >"$work/smoke.log" 2>&1 || {
		echo "conformance: smoke test of image $1 failed:" >&2
		cat "$work/smoke.log" >&2
		return 1
	}
	sed "s/^/conformance:   $1: /" "$work/smoke.log" | head -40 >&2
}

t=$(now)
declare -A built
while read -r name ref; do
	[[ $name == \#* ]] && continue
	base=${ref##*/}
	file=${base%%:*}_${base#*:}.tar
	image "$name" "$ref" "$file"
	echo "$ref $file" >>"$tmp/images/images.txt"
	if [[ -z ${built[$name]:-} ]]; then
		built[$name]=1
		unpack "$tmp/images/$file" "$work/root-$name"
		smoke "$name" "$work/root-$name"
		rm -rf "$work/root-$name"
	fi
done <"$work/images.list"
echo "conformance: $(wc -l <"$tmp/images/images.txt") images written and smoke-tested in $(since "$t")s" >&2

# Last, alone: the long compile and the ~3 GB link.
t=$(now)
go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e
echo "conformance: e2e.test built in $(since "$t")s" >&2

v=$("$tmp/e2e.test" --version) && echo "conformance: e2e.test --version: $v" >&2
[[ $v == "$K8S_VERSION" ]] || { echo "conformance: e2e.test is not $K8S_VERSION" >&2; exit 1; }
ginkgoVersion=$(go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
v=$("$tmp/ginkgo" version) && echo "conformance: $v" >&2
[[ $v == *" ${ginkgoVersion#v}" ]] || { echo "conformance: ginkgo is not $ginkgoVersion" >&2; exit 1; }
"$tmp/coredns" -version >&2

rm -rf "$work"
chmod 755 "$tmp"
mv -T "$tmp" "$out"
trap - EXIT
find "$root" -mindepth 1 -maxdepth 1 \( -name '[0-9a-f]*' -mtime +14 -o -name '.lock-*' -mtime +14 \
	-o -name '.tmp-*' -mmin +180 \) -exec rm -rf {} + || true
echo "conformance: built in $(since "$t0")s" >&2
echo "$out"
