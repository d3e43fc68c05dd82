#!/usr/bin/env bash
# Installs what the lab and the tests need on a fresh Debian machine, only when missing:
# Open vSwitch (userspace datapath is enough), iproute2, ethtool, tcpdump, and for the test control
# plane openssl and curl.
set -euo pipefail
need=()
command -v ovs-vswitchd >/dev/null 2>&1 || need+=(openvswitch-switch)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v ethtool >/dev/null 2>&1 || need+=(ethtool)
command -v tcpdump >/dev/null 2>&1 || need+=(tcpdump)
# hack/controlplane/start.sh makes the test CA with openssl and probes readiness with curl.
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl ca-certificates)
command -v flock >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then echo "deps: need root to install ${need[*]}" >&2; exit 1; fi
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [ "$(id -u)" != 0 ]; then echo "deps: the lab needs root (network namespaces, OVS)" >&2; exit 1; fi
ovs-vswitchd --version | head -1
