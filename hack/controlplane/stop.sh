#!/usr/bin/env bash
# stop.sh DIR [COMPONENT...]
#
# Stops the processes that start.sh started for DIR - exactly the pids in DIR/<component>.pid,
# and only if that process's command line still names DIR - with SIGTERM, then SIGKILL after
# SRCIP_CP_STOP_GRACE seconds (default 10). Without COMPONENT it stops all three
# (kube-controller-manager, kube-apiserver, etcd) and removes DIR/etcd-data; credentials,
# kubeconfig and logs stay. Stopping what is not running is not an error.
set -euo pipefail

if [[ $# -lt 1 ]]; then
	echo "usage: $0 DIR [etcd|kube-apiserver|kube-controller-manager...]" >&2
	exit 2
fi
[[ -d $1 ]] || exit 0
dir=$(cd "$1" && pwd)
shift
components=("$@")
all=false
if [[ ${#components[@]} -eq 0 ]]; then
	components=(kube-controller-manager kube-apiserver etcd)
	all=true
fi
grace=${SRCIP_CP_STOP_GRACE:-10}

ours() {
	[[ -n $1 && -r /proc/$1/cmdline ]] && tr '\0' '\n' <"/proc/$1/cmdline" | grep -qF -- "$dir/"
}
# A zombie (our child, not yet reaped) counts as gone.
alive() {
	[[ -r /proc/$1/stat ]] || return 1
	local st
	st=$(sed 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f1)
	[[ $st != Z ]]
}

t0=$(date +%s.%N)
for c in "${components[@]}"; do
	pidfile=$dir/$c.pid
	pid=$(cat "$pidfile" 2>/dev/null || true)
	if ours "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		deadline=$(($(date +%s) + grace))
		while alive "$pid" && (($(date +%s) < deadline)); do sleep 0.05; done
		if alive "$pid"; then
			echo "stop.sh: $c (pid $pid) ignored SIGTERM for ${grace}s, sending SIGKILL" >&2
			kill -KILL "$pid" 2>/dev/null || true
			while alive "$pid"; do sleep 0.05; done
		fi
		echo "stop.sh: stopped $c (pid $pid)" >&2
	fi
	rm -f "$pidfile"
done
if $all; then
	rm -rf "$dir/etcd-data"
fi
awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "stop.sh: done in %.2fs\n", b - a }' >&2
