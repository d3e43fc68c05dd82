#!/usr/bin/env bash
# Installs, only when missing, every program that `make demo`, `make test` and the lab execute, on a
# fresh Debian 12 machine (as root). Prerequisites that `make` itself needs before this script can
# run: make, bash, Go (see README). The lab checks the same programs when it starts and names the
# package of a missing one (test/lab/programs.go; TestDepsInstallsEveryProgram keeps the lists in
# step).
set -euo pipefail
# program    Debian package    who executes it
progs=(
	# the lab (test/lab), the agents it runs, srcipctl and the tests on the lab
	"ip           iproute2"           # namespaces, veths, addresses, routes
	"sh           dash"               # ethtool batches in a netns
	"sleep        coreutils"          # TestCleanup's placeholder process
	"sysctl       procps"             # per-netns sysctls (IPv6 off, forwarding)
	"ethtool      ethtool"            # checksum offload off on veths
	"ping         iputils-ping"       # TestLabUp reachability
	"tcpdump      tcpdump"            # captures in test/e2e
	"python3      python3"            # line server, line client and ACK injector of test/e2e/entry_test.go
	"nft          nftables"           # the lab's node set-up stand-in (masquerade), test/e2e/host_test.go's ClusterIP DNAT, node-setup (knftables)
	"ovsdb-tool   openvswitch-common" # each node's own database
	"ovsdb-server openvswitch-common"
	"ovs-appctl   openvswitch-common" # the lab, the agent (conntrack), srcipctl trace
	"ovs-ofctl    openvswitch-common" # the lab, the agent (bundles)
	"ovs-vsctl    openvswitch-switch" # the lab, srcipctl trace
	"ovs-vswitchd openvswitch-switch" # userspace datapath; no kernel module needed
	"nsenter      util-linux"         # test/nodesetup runs node-setup inside a node namespace
	# hack/controlplane/{build,start,stop}.sh (test/kube, make controlplane)
	"bash         bash"
	"flock        util-linux"         # one build per cache entry
	"setsid       util-linux"         # detached components
	"openssl      openssl"            # the test CA
	"curl         curl"               # readiness probes
	"awk          mawk"               # elapsed times
	"grep         grep"               # readiness, pid ownership
	"sed          sed"                # process state
	"find         findutils"          # cache pruning
	"sha256sum    coreutils"          # cache key
	"od           coreutils"          # token
	"base64       coreutils"          # kubeconfig
	# the real-kubelet lab (test/cluster, hack/cluster): containerd runs runc; each node's private
	# mount namespace (unshare, mount; nsenter and kube-proxy's nft are above)
	"runc         runc"               # Debian's 1.1.5; crun refuses hybrid cgroups
	"iptables-save     iptables"      # kube-proxy in iptables mode (test/cluster ProxyMode; nf_tables backend)
	"iptables-restore  iptables"
	"ip6tables         iptables"      # probed by kube-proxy for dual-stack
	"ip6tables-save    iptables"
	"ip6tables-restore iptables"
	"unshare      util-linux"         # a node's private mount namespace
	"pivot_root   util-linux"         # the node holder, when the lab runs in a chroot
	"mount        mount"              # bind mounts inside it
	# test/cluster/frr: the upstream BGP router of MetalLB's BGP mode, in the lab's router netns
	"/usr/lib/frr/zebra frr"          # outside PATH on Debian
	"/usr/lib/frr/bgpd  frr"
	"vtysh        frr"                # the daemons' state as JSON
	"nstat        iproute2"           # the router's kernel counters (rp_filter drops)
	# hack/conformance/build.sh (make conformance-build): copied with their libraries into the e2e
	# images, the package versions of the cache key, the images' smoke test
	"busybox      busybox-static"     # sh and the usual tools of the images
	"wget         wget"               # GNU wget (busybox-static's segfaults)
	"nc           netcat-openbsd"
	"dig          bind9-dnsutils"     # the DNS tests' probes
	"nslookup     bind9-dnsutils"
	"host         bind9-host"
	"ss           iproute2"
	"getent       libc-bin"           # the DNS tests' /etc/hosts probes
	"iperf        iperf"
	"socat        socat"
	"conntrack    conntrack"          # distroless-iptables, kube-proxy's CLOSE_WAIT test
	"iptables     iptables"
	"nginx        nginx"              # the nginx e2e images
	"dpkg-query   dpkg"
	"tar          tar"                # unpacking an image's layer
	"chroot       coreutils"          # running its programs
	# the Makefile
	"git          git"                # make vet lists the Go files with git ls-files
)
need=()
for p in "${progs[@]}"; do
	read -r prog pkg <<<"$p"
	if ! command -v "$prog" >/dev/null 2>&1 && [[ " ${need[*]} " != *" $pkg "* ]]; then
		need+=("$pkg")
	fi
done
# curl needs the CA bundle for https (the Go module proxy is reached by go itself), and the e2e
# images of hack/conformance carry it.
if [[ " ${need[*]} " == *" curl "* || ! -s /etc/ssl/certs/ca-certificates.crt ]]; then need+=(ca-certificates); fi
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then echo "deps: need root to install ${need[*]}" >&2; exit 1; fi
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	# frr's postinst starts the package's service (watchfrr, zebra, staticd in the root netns);
	# the lab runs its own daemons in its router netns only. A policy-rc.d that exits 101 makes
	# invoke-rc.d refuse the start; one already there (a container image's) is left as it is.
	guard=
	if [[ " ${need[*]} " == *" frr "* && ! -e /usr/sbin/policy-rc.d ]]; then
		guard=/usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
		printf '#!/bin/sh\n# hack/deps.sh: no service starts while it installs packages\nexit 101\n' >"$guard"
		chmod 755 "$guard"
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	if [ -n "$guard" ]; then rm -f "$guard"; trap - EXIT; fi
	if [[ " ${need[*]} " == *" frr "* ]]; then
		# Should a postinst have started the service anyway (an init that ignores policy-rc.d),
		# stop its daemons by the pids they wrote (watchfrr first: it restarts the others), and
		# keep systemd from starting it at boot.
		for d in watchfrr zebra bgpd staticd; do
			f=/run/frr/$d.pid
			if [ -s "$f" ] && pid=$(cat "$f") && kill "$pid" 2>/dev/null; then
				echo "deps: stopped the frr package's $d (pid $pid)"
			fi
		done
		if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then systemctl disable -q frr.service || true; fi
	fi
fi
if [ "$(id -u)" != 0 ]; then echo "deps: the lab needs root (network namespaces, OVS)" >&2; exit 1; fi
ovs-vswitchd --version | head -1
