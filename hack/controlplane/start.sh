#!/usr/bin/env bash
# start.sh [--prepare-only] DIR [COMPONENT...]
#
# Starts a test Kubernetes control plane - etcd, kube-apiserver, kube-controller-manager - whose
# state lives in DIR, and waits until it is ready. No kubelet, no scheduler: tests create Nodes,
# bind Pods with spec.nodeName and write Pod status themselves.
#
# This script is the only place that knows the components' flags: test/kube (Go) runs it with
# --prepare-only, which writes everything below and the command lines, and then starts the
# processes itself from DIR/<component>.args (so they die with the test process).
#
#   DIR/kubeconfig                 admin (system:masters) token, CA embedded
#   DIR/pki/                       CA, apiserver serving cert, service-account key
#   DIR/tokens.csv                 token auth file
#   DIR/<component>.args           command line, one argument per line, binary first
#   DIR/<component>.pid            pid of a process started by this script
#   DIR/logs/<component>.log
#   DIR/etcd-data/                 removed by stop.sh
#
# kube-apiserver gets --allow-privileged=true, as kubeadm sets it: the DaemonSet's node-setup init
# container is privileged (deploy/deploy_test.go applies it).
# kube-apiserver gets --shutdown-send-retry-after=true: without it SIGTERM waits up to 60 s
# (--request-timeout) for open watch connections; with it, it exits ~2 s later.
#
# COMPONENT is etcd, kube-apiserver or kube-controller-manager (default: all three, in this
# order). A component whose pidfile names a live process of this DIR is left alone, so running
# start.sh again is harmless; "stop.sh DIR kube-apiserver; start.sh DIR kube-apiserver" restarts
# the API server alone.
#
# Environment:
#   SRCIP_CP_BIN              directory holding the binaries (default: the output of build.sh)
#   SRCIP_CP_PORT_BASE        etcd client port; etcd peer = base+1, kube-apiserver = base+2
#                             (default: etcd 2379, peer 2380, kube-apiserver 6443)
#   SRCIP_CP_ETCD_PORT, SRCIP_CP_ETCD_PEER_PORT, SRCIP_CP_APISERVER_PORT  override one port
#   SRCIP_CP_CONTROLLERS      kube-controller-manager --controllers
#                             (default: endpointslice, endpointslice mirroring, namespace,
#                             garbage collector)
#   SRCIP_CP_TIMEOUT          seconds to wait for readiness (default 60)
#   SRCIP_CP_NODE_PORT_RANGE    kube-apiserver --service-node-port-range (default 30000-32767)
#   SRCIP_CP_APISERVER_ADDRESS  address kube-apiserver binds to and advertises, put in its
#                             certificate and in DIR/kubeconfig (default 127.0.0.1); the
#                             real-kubelet lab (test/cluster) uses its root<->lab link address
#   SRCIP_CP_CLUSTER_CIDR     when set, kube-controller-manager allocates node pod CIDRs from it
#                             (--allocate-node-cidrs, /SRCIP_CP_NODE_CIDR_MASK, default 24); add
#                             node-ipam-controller to SRCIP_CP_CONTROLLERS. Dual-stack: two CIDRs,
#                             IPv4 first, comma separated (10.244.0.0/16,2001:db8:244::/48); the
#                             masks are then --node-cidr-mask-size-ipv4 (SRCIP_CP_NODE_CIDR_MASK,
#                             default 24) and --node-cidr-mask-size-ipv6 (SRCIP_CP_NODE_CIDR_MASK6,
#                             default 64)
#   SRCIP_CP_SERVICE_CIDR     kube-apiserver and kube-controller-manager --service-cluster-ip-range
#                             (default 10.96.0.0/16); dual-stack: 10.96.0.0/16,2001:db8:96::/112
#   SRCIP_CP_SERVICE_ACCOUNTS=1  keep the ServiceAccount admission plugin (pods get projected
#                             tokens; add serviceaccount-controller and
#                             root-ca-certificate-publisher-controller to SRCIP_CP_CONTROLLERS)
#   SRCIP_CP_KUBELETS=1       a control plane for real kubelets that the API server dials (the
#                             conformance lab, test/cluster Config.Conformance): kube-apiserver gets
#                             a client certificate for the kubelets (DIR/pki/apiserver-kubelet-client.*,
#                             O=system:masters, as kubeadm's) and verifies their serving
#                             certificates against the CA (DIR/pki/ca.key signs them), and the
#                             lease endpoint reconciler keeps the "kubernetes" Service's endpoints
#                             (the address must not be loopback); kube-controller-manager gets the
#                             service-account key, the root CA and the CSR signing pair
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prepare_only=false
if [[ ${1:-} == --prepare-only ]]; then prepare_only=true; shift; fi
if [[ $# -lt 1 ]]; then
	echo "usage: $0 [--prepare-only] DIR [etcd|kube-apiserver|kube-controller-manager...]" >&2
	exit 2
fi
mkdir -p "$1"
dir=$(cd "$1" && pwd)
shift
components=("$@")
[[ ${#components[@]} -gt 0 ]] || components=(etcd kube-apiserver kube-controller-manager)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
t0=$(now)

bin=${SRCIP_CP_BIN:-$("$here/build.sh" | tail -n1)}
for b in etcd kube-apiserver kube-controller-manager; do
	[[ -x $bin/$b ]] || { echo "start.sh: $bin/$b missing" >&2; exit 1; }
done

if [[ -n ${SRCIP_CP_PORT_BASE:-} ]]; then
	: "${SRCIP_CP_ETCD_PORT:=$SRCIP_CP_PORT_BASE}"
	: "${SRCIP_CP_ETCD_PEER_PORT:=$((SRCIP_CP_PORT_BASE + 1))}"
	: "${SRCIP_CP_APISERVER_PORT:=$((SRCIP_CP_PORT_BASE + 2))}"
fi
etcd_port=${SRCIP_CP_ETCD_PORT:-2379}
peer_port=${SRCIP_CP_ETCD_PEER_PORT:-2380}
api_port=${SRCIP_CP_APISERVER_PORT:-6443}
controllers=${SRCIP_CP_CONTROLLERS:-endpointslice-controller,endpointslice-mirroring-controller,namespace-controller,garbage-collector-controller}
timeout=${SRCIP_CP_TIMEOUT:-60}
api_addr=${SRCIP_CP_APISERVER_ADDRESS:-127.0.0.1}
cluster_cidr=${SRCIP_CP_CLUSTER_CIDR:-}
service_cidr=${SRCIP_CP_SERVICE_CIDR:-10.96.0.0/16}
admission=(--disable-admission-plugins=ServiceAccount)
if [[ ${SRCIP_CP_SERVICE_ACCOUNTS:-} == 1 ]]; then admission=(); fi

# --- credentials (kept across restarts) ------------------------------------------------------
pki=$dir/pki
mkdir -p "$pki" "$dir/logs"
if [[ ! -s $pki/apiserver.crt ]]; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-subj /CN=ovs-srcip-test-ca -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=kube-apiserver \
		-keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1%s\nextendedKeyUsage=serverAuth\n' \
		"$([[ $api_addr == 127.0.0.1 ]] || echo ",IP:$api_addr")" >"$pki/apiserver.ext"
	openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
		-CAcreateserial -days 3650 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt.tmp" 2>/dev/null
	openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key" 2>/dev/null
	mv "$pki/apiserver.crt.tmp" "$pki/apiserver.crt"
fi
kubelets=false
if [[ ${SRCIP_CP_KUBELETS:-} == 1 ]]; then kubelets=true; fi
if $kubelets && [[ ! -s $pki/apiserver-kubelet-client.crt ]]; then
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
		-keyout "$pki/apiserver-kubelet-client.key" -out "$pki/apiserver-kubelet-client.csr" 2>/dev/null
	printf 'extendedKeyUsage=clientAuth\n' >"$pki/apiserver-kubelet-client.ext"
	openssl x509 -req -in "$pki/apiserver-kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
		-CAcreateserial -days 3650 -extfile "$pki/apiserver-kubelet-client.ext" \
		-out "$pki/apiserver-kubelet-client.crt.tmp" 2>/dev/null
	mv "$pki/apiserver-kubelet-client.crt.tmp" "$pki/apiserver-kubelet-client.crt"
fi
if [[ ! -s $dir/tokens.csv ]]; then
	token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	echo "$token,admin,admin-uid,system:masters" >"$dir/tokens.csv.tmp"
	mv "$dir/tokens.csv.tmp" "$dir/tokens.csv"
fi
token=$(cut -d, -f1 "$dir/tokens.csv")

cat >"$dir/kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: https://$api_addr:$api_port
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: admin
  user:
    token: $token
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
EOF
mv "$dir/kubeconfig.tmp" "$dir/kubeconfig"

# --- command lines ---------------------------------------------------------------------------
write_args() { # component binary args...
	local c=$1
	shift
	printf '%s\n' "$@" >"$dir/$c.args.tmp"
	mv "$dir/$c.args.tmp" "$dir/$c.args"
}
write_args etcd "$bin/etcd" \
	--name=default \
	--data-dir="$dir/etcd-data" \
	--listen-client-urls="http://127.0.0.1:$etcd_port" \
	--advertise-client-urls="http://127.0.0.1:$etcd_port" \
	--listen-peer-urls="http://127.0.0.1:$peer_port" \
	--initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
	--initial-cluster="default=http://127.0.0.1:$peer_port" \
	--unsafe-no-fsync
apiserver_extra=(--endpoint-reconciler-type=none)
if $kubelets; then
	apiserver_extra=(--endpoint-reconciler-type=lease
		--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt"
		--kubelet-client-key="$pki/apiserver-kubelet-client.key"
		--kubelet-certificate-authority="$pki/ca.crt")
fi
write_args kube-apiserver "$bin/kube-apiserver" \
	--etcd-servers="http://127.0.0.1:$etcd_port" \
	--bind-address="$api_addr" \
	--secure-port="$api_port" \
	--advertise-address="$api_addr" \
	--kubelet-preferred-address-types=InternalIP \
	"${apiserver_extra[@]}" \
	--cert-dir="$pki" \
	--tls-cert-file="$pki/apiserver.crt" \
	--tls-private-key-file="$pki/apiserver.key" \
	--client-ca-file="$pki/ca.crt" \
	--token-auth-file="$dir/tokens.csv" \
	--authorization-mode=RBAC \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$pki/sa.key" \
	--service-account-signing-key-file="$pki/sa.key" \
	--service-cluster-ip-range="$service_cidr" \
	--service-node-port-range="${SRCIP_CP_NODE_PORT_RANGE:-30000-32767}" \
	"${admission[@]}" \
	--allow-privileged=true \
	--shutdown-send-retry-after=true
kcm_extra=()
if [[ -n $cluster_cidr ]]; then
	if [[ $cluster_cidr == *,* ]]; then
		# Dual-stack: kube-controller-manager refuses --node-cidr-mask-size with two CIDRs.
		kcm_extra=(--allocate-node-cidrs --cluster-cidr="$cluster_cidr"
			--node-cidr-mask-size-ipv4="${SRCIP_CP_NODE_CIDR_MASK:-24}"
			--node-cidr-mask-size-ipv6="${SRCIP_CP_NODE_CIDR_MASK6:-64}" --service-cluster-ip-range="$service_cidr")
	else
		kcm_extra=(--allocate-node-cidrs --cluster-cidr="$cluster_cidr"
			--node-cidr-mask-size="${SRCIP_CP_NODE_CIDR_MASK:-24}" --service-cluster-ip-range="$service_cidr")
	fi
fi
if $kubelets; then
	kcm_extra+=(--service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt"
		--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key")
fi
write_args kube-controller-manager "$bin/kube-controller-manager" \
	--kubeconfig="$dir/kubeconfig" \
	--controllers="$controllers" \
	--leader-elect=false \
	--secure-port=0 \
	"${kcm_extra[@]}"

if $prepare_only; then
	echo "$dir"
	exit 0
fi

# --- processes -------------------------------------------------------------------------------
# ours PID: the process is alive and its command line names DIR (guards against pid reuse).
ours() {
	[[ -n $1 && -r /proc/$1/cmdline ]] && tr '\0' '\n' <"/proc/$1/cmdline" | grep -qF -- "$dir/"
}
ready() {
	case $1 in
	etcd) curl -sf -m 2 "http://127.0.0.1:$etcd_port/health" 2>/dev/null | grep -q '"health":"true"' ;;
	kube-apiserver)
		[[ $(curl -s -m 2 --cacert "$pki/ca.crt" -H "Authorization: Bearer $token" \
			"https://$api_addr:$api_port/readyz" 2>/dev/null) == ok ]] ;;
	kube-controller-manager)
		# No serving port (--secure-port=0): its log says when the EndpointSlice controller runs
		# (the Nth start of the process prints the Nth marker).
		has_endpointslice || return 0
		(($(grep -c -- "$kcm_marker" "$dir/logs/$c.log") >= $(grep -c -- "$start_marker$c" "$dir/logs/$c.log")))
		;;
	esac
}
kcm_marker='"Starting endpoint slice controller"'
start_marker='=== starting '
has_endpointslice() {
	local x list
	IFS=, read -ra list <<<"$controllers"
	for x in "${list[@]}"; do
		case $x in endpointslice | endpointslice-controller | '*') return 0 ;; esac
	done
	return 1
}
for c in "${components[@]}"; do
	case $c in etcd | kube-apiserver | kube-controller-manager) ;; *)
		echo "start.sh: unknown component $c" >&2
		exit 2
		;;
	esac
	pid=$(cat "$dir/$c.pid" 2>/dev/null || true)
	if ours "$pid"; then
		echo "start.sh: $c already running (pid $pid)" >&2
	else
		mapfile -t argv <"$dir/$c.args"
		echo "$start_marker$c at $(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" >>"$dir/logs/$c.log"
		# setsid: its own session, not killed with the caller's terminal or process group.
		setsid "${argv[@]}" >>"$dir/logs/$c.log" 2>&1 </dev/null &
		pid=$!
		echo "$pid" >"$dir/$c.pid"
	fi
	t=$(now)
	deadline=$(($(date +%s) + timeout))
	until ready "$c"; do
		if ! ours "$pid"; then
			echo "start.sh: $c exited; last log lines:" >&2
			tail -n 20 "$dir/logs/$c.log" >&2
			exit 1
		fi
		if (($(date +%s) >= deadline)); then
			echo "start.sh: $c not ready after ${timeout}s; see $dir/logs/$c.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "start.sh: $c ready (pid $pid) in $(since "$t")s" >&2
done
echo "start.sh: control plane ready in $(since "$t0")s; KUBECONFIG=$dir/kubeconfig" >&2
echo "$dir"
