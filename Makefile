# ovs-srcip. Two commands do everything on a fresh Debian machine (as root):
#   make demo   builds, brings up a 3-node OVS lab, runs the agents, sends real traffic, shows it
#   make test   unit, golden, ofproto/trace, end-to-end (real OVS, real packets) and live
#               Kubernetes API server tests (the control plane is built once and cached)
SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
export GOFLAGS ?= -buildvcs=false
# The release (VERSION: the tag deploy/ and the Helm chart are pinned to) and the commit, stamped in
# srcip-agent, srcip-cni and srcipctl (package version: srcip-agent --version, srcipctl version).
VERSION ?= $(shell cat VERSION)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null)
LDFLAGS := -X github.com/ovs-srcip/ovs-srcip/version.Version=$(VERSION) -X github.com/ovs-srcip/ovs-srcip/version.Commit=$(COMMIT)

.PHONY: all build image deps check demo test test-unit test-e2e test-conformance test-upgrade conformance conformance-build golden bench bench-datapath bench-podstart bench-dualstack bench-go bench-api vet fmt clean clean-labs controlplane cluster metallb test-metallb try-lab

# Extra flags for the demo, e.g. `make demo DEMO_ARGS=--keep` keeps the lab up for poking.
DEMO_ARGS ?=

all: build

deps:
	@hack/deps.sh

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/srcip-agent ./cmd/srcip-agent
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/srcipctl ./cmd/srcipctl
	$(GO) build -o $(BIN)/echo ./test/echo
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/srcip-cni ./cmd/srcip-cni
	$(GO) build -o $(BIN)/host-local github.com/containernetworking/plugins/plugins/ipam/host-local
	$(GO) build -o $(BIN)/loopback github.com/containernetworking/plugins/plugins/main/loopback
	$(GO) build -o $(BIN)/portmap github.com/containernetworking/plugins/plugins/meta/portmap

# The release image without docker (hack/image.sh): bin/image/srcip-agent-$(VERSION).tar, an OCI
# image layout tarball of ghcr.io/ovs-srcip/srcip-agent:$(VERSION) (srcip-agent, srcipctl,
# srcip-cni and its CNI plugins, this machine's ovs-ofctl/ovs-appctl/ovs-vsctl/nft with their
# libraries), the version stamped in the binaries. On each containerd node:
#   ctr -n k8s.io images import srcip-agent-$(VERSION).tar
# IMAGE_ARGS adds hack/image.sh flags, e.g. -r REGISTRY/srcip-agent, -f docker.
IMAGE_ARGS ?=
image: deps
	hack/image.sh -v $(VERSION) $(IMAGE_ARGS)

demo: deps build
	$(GO) build -o $(BIN)/demo ./test/demo
	$(BIN)/demo --agent $(BIN)/srcip-agent --echo $(BIN)/echo --srcipctl $(BIN)/srcipctl --manifests test/manifests/demo $(DEMO_ARGS)

# The loop to run while editing: go vet, gofmt and the tiers that need no Open vSwitch, no root,
# no apt-get and no network (golden files, flows/, agent/ with the fakes, the pure tests of ofctl/,
# cmd/ and nodesetup/). -short makes ovstest.StartDummy skip the tests that need a private OVS;
# `make test-unit` runs them. Also the lab's program tables (hack/deps.sh against test/lab) and the
# conformance runner's report logic and the settings files of make try-lab. No deps: nothing is
# installed.
PURE := ./openflow/... ./flows/... ./agent/... ./bgp/... ./ofctl/... ./cmd/... ./nodesetup/... ./flowsnap/... ./version/...
check:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) test -short $(PURE)
	$(GO) test -short -run 'TestDepsInstallsEveryProgram|TestEveryExecutedProgramIsListed|TestCheckProgramsNamesThePackage' ./test/lab/
	$(GO) test -short ./test/conformance/
	$(GO) test -short ./test/cluster/trylab/ ./test/cluster/frr/

vet:
	$(GO) vet ./...
	$(GO) mod tidy -diff
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Pure and OVS-sandbox tiers (golden files, ofproto/trace on a dummy datapath, fakes).
test-unit: deps
	$(GO) test -count=1 ./openflow/... ./flows/... ./ofctl/... ./agent/... ./bgp/... ./cmd/... ./nodesetup/... ./flowsnap/... ./version/...

# kube-apiserver, kube-controller-manager and etcd for the tests (test/kube), built from the Go
# module proxy by the nested module hack/controlplane; cached, a cache hit takes milliseconds.
controlplane:
	@hack/controlplane/build.sh

# kubelet, kube-proxy, kube-scheduler (v1.37.2, hack/controlplane's pins), containerd v2.4.2, the
# reference CNI plugins and the image writer for the real-kubelet lab (test/cluster), built from the
# Go module proxy by the nested modules of hack/cluster; cached like the control plane.
cluster:
	@hack/cluster/build.sh >/dev/null

# MetalLB v0.15.2's speaker and controller (hack/metallb/go.mod says why not v0.16: a 403 on a
# dependency's zip), their images (written by hack/cluster's mkimage) and the module's
# metallb-native.yaml, for test/cluster/metallb; built from the Go module proxy by the nested module
# of hack/metallb, cached like hack/cluster (~/.cache/ovs-srcip/metallb). Cold: about 29 minutes
# at nice 19 on 2 busy cores (load 18-24), warm: a cache hit (2 s).
metallb: cluster
	@hack/metallb/build.sh >/dev/null

# The Kubernetes e2e suite at the control plane's v1.37.2 for the real-kubelet lab: e2e.test, ginkgo,
# CoreDNS (kubeadm's version) and docker-archive tarballs of the images the [sig-network] tests use,
# under their upstream references, built from the Go module proxy and Debian packages without docker
# (hack/conformance); cached like the control plane. Prints the output directory.
conformance-build: deps
	@hack/conformance/build.sh

# The lab (real ovsdb-server + ovs-vswitchd per emulated node, real packets from a client netns),
# with the agents reading manifests (test/e2e) or watching a live API server (test/kubee2e), and the
# deploy/ manifests applied to a live API server, and the real-kubelet lab (test/cluster: kubelet,
# containerd, kube-proxy per node, pods from Deployments on srcip-cni).
# test/cluster runs verbose (without the === lines) so that its figures are printed: the build or
# cache hit of hack/cluster, each node's Ready time, the pods' Ready time, what each test saw.
# kube-proxy runs in nftables mode there, then the real-kubelet lab's own tests (package
# test/cluster: pods, Services, NodePorts, hostPorts, agent restart; about 1 minute) run a second
# time with kube-proxy in iptables mode, kubeadm's default (SRCIP_CLUSTER_PROXY_MODE). The first run is
# dual-stack, IPv4 first (SRCIP_LAB_DUAL_STACK=1: IPv4 and IPv6 pod CIDRs, Service CIDRs and node
# addresses); the iptables run is dual-stack IPv6 first (SRCIP_LAB_DUAL_STACK=ipv6-first: pod CIDRs,
# pod IPs and the Nodes' InternalIPs IPv6 first; the Service CIDRs stay IPv4 first) and leaves out
# the API server's calls to the kubelets (the lab's root netns, where the API server runs, has no
# IPv6 route to the nodes, and the API server dials a Node's first InternalIP) and the egress
# failover test (TestEgressFailoverUnderLoad, about 35 s: agent and ovs-vswitchd faults of the
# active gateway under load; the selected pod's egress does not go through kube-proxy).
# test/cluster/install (IPv4-only labs whatever SRCIP_LAB_DUAL_STACK says, so the real-kubelet
# lab runs IPv4-only there; each test on a lab of its own) installs with kubectl apply -k and Helm
# and rolls an older commit's image to this checkout's and back under traffic (TestRollingUpgrade,
# 1 roll): 761 s in all on a loaded 2-vCPU machine, 371 s of it TestRollingUpgrade; hence the
# line's 25m timeout.
test-e2e: deps build controlplane cluster
	SRCIP_AGENT=$(BIN)/srcip-agent SRCIP_ECHO=$(BIN)/echo SRCIPCTL=$(BIN)/srcipctl $(GO) test -count=1 -p 1 -timeout 40m \
		$$($(GO) list ./test/... ./deploy/... | grep -v /test/cluster)
	set -o pipefail; SRCIP_AGENT=$(BIN)/srcip-agent SRCIP_LAB_DUAL_STACK=1 $(GO) test -count=1 -p 1 -timeout 25m -v ./test/cluster/... \
		| grep -v '^=== '
	set -o pipefail; SRCIP_AGENT=$(BIN)/srcip-agent SRCIP_CLUSTER_PROXY_MODE=iptables SRCIP_LAB_DUAL_STACK=ipv6-first $(GO) test -count=1 -p 1 -timeout 10m -v \
		-skip '^(TestEgressFailoverUnderLoad|TestAPIServerReachesKubeletsAndPods|TestExecIntoContainer)$$' ./test/cluster/ \
		| grep -v '^=== '

# The real-kubelet lab that test/cluster/install installs ovs-srcip on, held until Ctrl-C or
# kill <pid> (then closed): three nodes registered and NotReady (no CNI), nothing of ovs-srcip
# installed, the release image (hack/image.sh, as make image writes it) imported into each node's
# containerd: the empty cluster to try docs/install.md on ("Try it on the lab"). Prints, and writes
# to /tmp/<lab>/try-lab.env, KUBECONFIG, kubectl, helm and ctr, the nodes (netns, how to enter
# them, containerd sockets), the client, the router and the address ranges the install takes.
# Refuses to start while another lab is up. TRY_LAB_ARGS adds flags, e.g. -proxy-mode iptables.
TRY_LAB_ARGS ?=
try-lab: deps controlplane cluster
	$(GO) build -o $(BIN)/try-lab ./test/cluster/trylab
	$(BIN)/try-lab $(TRY_LAB_ARGS)

# Kubernetes' own e2e tests (e2e.test, ginkgo and kubectl v1.37.2, CoreDNS and the e2e images, built
# from the Go module proxy and Debian's packages by hack/conformance/build.sh, cached like the control
# plane) on the real-kubelet lab in Conformance mode (test/conformance, docs/conformance.md).
# `make conformance` runs every [sig-network] test but the skip list, in mode plain (kube-proxy
# serves Services, ovs-srcip is the pod network) and mode all (--preserve-source-ip=all), on one
# lab, and compares the pass sets. CONFORMANCE_ARGS adds flags, e.g. -modes plain,all,bridge (the
# reference bridge CNI as the baseline), -focus REGEX, -procs N, -hold 30m.
CONFORMANCE_ARGS ?=
# The runner is bin/conformance-run: bin/conformance is its reports directory (-out); a runner
# binary of that name left by an older checkout is removed.
conformance: deps build controlplane cluster
	$(GO) build -o $(BIN)/conformance-run ./test/conformance
	if [ -f $(BIN)/conformance ]; then rm -f $(BIN)/conformance; fi
	set -o pipefail; e2e=$$(hack/conformance/build.sh | tail -1) && \
		$(BIN)/conformance-run -e2e "$$e2e" -agent $(BIN)/srcip-agent -out $(BIN)/conformance $(CONFORMANCE_ARGS)

# The subset of make test, on a dual-stack lab (-dual-stack: IPv4 and IPv6 pod and Service CIDRs
# and node addresses, IPv4 first) in modes plain and all: the [sig-network] [Conformance] tests, the
# Service tests that are not [Conformance] but exercise what the preserved path does beyond them in
# mode all (the session-affinity timeout on a NodePort, the two "rejected" tests (no endpoints) and
# the ETP change), and the IPv6 and dual-stack tests ([Feature:IPv6DualStack],
# [Feature:Networking-IPv6]; docs/conformance.md "Dual-stack"). About 15 minutes on 2 cores.
test-conformance: deps build controlplane cluster
	$(GO) build -o $(BIN)/conformance-run ./test/conformance
	set -o pipefail; e2e=$$(hack/conformance/build.sh | tail -1) && \
		$(BIN)/conformance-run -e2e "$$e2e" -agent $(BIN)/srcip-agent -out $(BIN)/conformance-subset \
		-dual-stack -modes plain,all \
		-focus '\[sig-network\].*\[Conformance\]|\[sig-network\] Services should (have session affinity timeout work for NodePort|be rejected|implement NodePort and HealthCheckNodePort correctly when ExternalTrafficPolicy changes)|\[sig-network\].*(\[Feature:IPv6DualStack\]|\[Feature:Networking-IPv6\])'

# The rolling-upgrade test of issue 23 (test/cluster/install TestRollingUpgrade, alone; it also
# runs in make test, test-e2e's ./test/cluster/... line): an older commit's image installed with
# kubectl apply -k, rolled to this checkout's build and back (1 roll by default) under client
# streams and new connections (docs/install.md, Upgrade).
# Stress: SRCIP_UPGRADE_ROLLS=3 SRCIP_UPGRADE_CONN_EVERY=50ms SRCIP_UPGRADE_DIAG=/tmp/diag make test-upgrade
test-upgrade: deps build controlplane cluster
	set -o pipefail; SRCIP_AGENT=$(BIN)/srcip-agent $(GO) test -count=1 -p 1 -timeout 15m -v -run '^TestRollingUpgrade$$' ./test/cluster/install/ \
		| grep -v '^=== '

# MetalLB beside ovs-srcip on the real-kubelet lab (issue 24; test/cluster/metallb, build tag
# metallb): MetalLB v0.15.2 (make metallb) installed from its own manifest, webhooks off, L2 mode
# announcing a pool on br-ex, and BGP mode peering with FRR on the lab router (test/cluster/frr,
# Debian's frr from make deps); an annotated LoadBalancer Service keeps the client's IP through the
# announcing node, and through each of the router's ECMP next hops. Part of make test (after
# test-e2e; the build tag keeps it out of test-e2e's ./test/cluster/...); about a minute warm.
test-metallb: deps build controlplane cluster metallb
	set -o pipefail; SRCIP_AGENT=$(BIN)/srcip-agent $(GO) test -tags metallb -count=1 -p 1 -timeout 15m -v ./test/cluster/metallb/ \
		| grep -v '^=== '

test: deps vet build test-unit test-e2e test-metallb test-conformance

golden:
	$(GO) test ./flows -update -update-wire

# srcip-agent side by side with the OVS floor and kube-proxy (nftables) at 1k and 10k opted-in
# Services x 10 endpoints over 50 nodes, through a live API server (test/perf; docs/performance.md).
# Prints the tables (and progress on stderr), writes bin/bench/results.json and the plot
# bin/bench/performance.png. About 17 minutes on 2 cores (the data-path phase first, ~2.5 min)
# once the control plane and hack/cluster are cached, plus about 7 minutes for the dual-stack part
# (-dual-stack=false leaves it out; most of it is making the 10k Services dual-stack, 20k writes). BENCH_ARGS adds test/perf flags, e.g.
# BENCH_ARGS=-sizes=100,1000.
BENCH_ARGS ?=
bench: deps build controlplane cluster
	$(GO) build -o $(BIN)/perf ./test/perf
	$(BIN)/perf -agent $(BIN)/srcip-agent -cni $(BIN)/srcip-cni -kube-proxy "$$(hack/cluster/build.sh 2>/dev/null | tail -1)/kube-proxy" \
		-out $(BIN)/bench/results.json $(BENCH_ARGS)
	cd test/perf/plot && $(GO) run . -in $(BIN)/bench/results.json -out $(BIN)/bench/performance.png

# The data-path phase of `make bench` alone (about 2 minutes): connections/s and throughput through
# one ingress node, the preserved-source path against kube-proxy's SNAT path to the same pods.
bench-datapath: deps build controlplane cluster
	$(GO) build -o $(BIN)/perf ./test/perf
	$(BIN)/perf -agent $(BIN)/srcip-agent -kube-proxy "$$(hack/cluster/build.sh 2>/dev/null | tail -1)/kube-proxy" \
		-out $(BIN)/bench/datapath.json -only=datapath $(BENCH_ARGS)

# The pod-start phase of `make bench` alone (about 3 minutes): the agent at 10k Services, then 50
# CNI ADDs at once on one node (srcip-cni as the runtime calls it): bin/bench/podstart.json.
bench-podstart: deps build controlplane
	$(GO) build -o $(BIN)/perf ./test/perf
	$(BIN)/perf -agent $(BIN)/srcip-agent -cni $(BIN)/srcip-cni -only=podstart -sizes=10000 \
		-out $(BIN)/bench/podstart.json $(BENCH_ARGS)

# The dual-stack part of `make bench` alone (issue 22): at 10k Services the agent's IPv4 cold start,
# then the same cluster dual-stack (IPv6 Nodes, PreferDualStack/RequireDualStack Services, an IPv6
# EndpointSlice each): its cold start, flows, messages and RSS, their ratios to IPv4 and PASS/FAIL
# against the 2x bound (bin/bench/dualstack.json). About 11-12 minutes at 10k on 2 cores (writing the
# 10k Services takes ~4 min, making them dual-stack ~6); BENCH_ARGS=-sizes=1000 takes about 1.5.
bench-dualstack: deps build controlplane
	$(GO) build -o $(BIN)/perf ./test/perf
	$(BIN)/perf -agent $(BIN)/srcip-agent -only=dualstack -sizes=10000 \
		-out $(BIN)/bench/dualstack.json $(BENCH_ARGS)

# Go micro-benchmarks of the pure and OVS-sandbox tiers.
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./flows/... ./ofctl/... ./agent/...

# EndpointSlice write -> bucket in OVS, p50/p99 over 200 changes at 100 and 1,000 Services.
bench-api: deps build controlplane
	SRCIP_AGENT=$(BIN)/srcip-agent SRCIP_ECHO=$(BIN)/echo $(GO) test -count=1 -p 1 -timeout 30m -run '^$$' -bench EndpointSliceToFlow -benchtime=1x ./test/kubee2e/

clean:
	rm -rf $(BIN)

# Removes what labs of dead test runs left behind (netns, OVS daemons, kubelets, cgroups, /tmp
# directories); labs whose owner is alive are left alone. Needs root.
clean-labs:
	$(GO) run ./test/cleanup
