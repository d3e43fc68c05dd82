// Command srcip-agent is the ovs-srcip node agent: it programs br-ex and br-int so that
// opted-in Services with externalTrafficPolicy Cluster keep the client's source IP
// (--preserve-source-ip=all: every eligible Service).
package main

import (
	"context"
	"encoding/json"
	"errors"
	goflag "flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/agent"
	egressv1 "github.com/ovs-srcip/ovs-srcip/apis/ovssrcip/v1alpha1"
	egressclient "github.com/ovs-srcip/ovs-srcip/client/clientset/versioned"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
	"github.com/ovs-srcip/ovs-srcip/version"
)

type options struct {
	nodeName           string
	kubeconfig         string
	manifests          string
	ovsdb              string
	ovsRunDir          string
	openflow           string
	bridgeEx           string
	bridgeInt          string
	uplink             string
	genevePort         int
	gatewayPort        string
	nodePortAddresses  []string
	externalIPCIDRs    []string
	serviceCIDRs       []string
	preserveSourceIP   string
	nodePortRange      string
	zoneLimitPercent   int
	fullSyncPeriod     time.Duration
	drainPeriod        time.Duration
	repairPeriod       time.Duration
	bucketsPerMessage  int
	metricsAddr        string
	profiling          bool
	statusSocket       string
	debugAddr          string
	egressClusterCIDRs []string
	routed             routedOptions
	egressPortRange    string
	egressPortBlock    int
	egressPortQuar     time.Duration
	leaseNamespace     string
	leaseDuration      time.Duration
	renewDeadline      time.Duration
	retryPeriod        time.Duration
	flowSnapshot       string
	snapshotInterval   time.Duration
}

func main() {
	if err := newCommand().Execute(); err != nil {
		klog.ErrorS(err, "srcip-agent failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func newCommand() *cobra.Command {
	o := options{}
	cmd := &cobra.Command{
		Use:   "srcip-agent",
		Short: "ovs-srcip node agent: keep the client source IP of external Service traffic on OVS",
		Long: `srcip-agent watches Nodes, Services, EndpointSlices and this node's Pods (from the
Kubernetes API or from a directory of manifests) and keeps the OpenFlow flows of br-ex and br-int
equal to the ovs-srcip pipeline. Services opt in with the annotation
ovs-srcip.io/preserve-source-ip: "true" (externalTrafficPolicy Cluster, type NodePort or
LoadBalancer, or externalIPs); with --preserve-source-ip=all every eligible Service is served
without the annotation, unless it is annotated "false". SIGTERM stops the agent and leaves every
flow in place.`,
		// --version prints "srcip-agent version v0.1.0 (commit ..., go...)" (package version).
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return run(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (the Node object); default $NODE_NAME")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file of the Kubernetes API; empty inside a Pod: the in-cluster config. Exclusive with --manifests")
	f.StringVar(&o.manifests, "manifests", "", "directory of YAML/JSON manifests (Nodes, Services, EndpointSlices, Pods) to use instead of the Kubernetes API; re-read on change. Exclusive with --kubeconfig")
	f.StringVar(&o.ovsdb, "ovsdb", "unix:/var/run/openvswitch/db.sock", "OVSDB endpoint of the node's ovsdb-server: unix:PATH (a bare /PATH is taken as unix:PATH), tcp:IP:PORT or ssl:IP:PORT")
	f.StringVar(&o.ovsRunDir, "ovs-rundir", ofctl.DefaultRunDir, "OVS run directory; ovs-ofctl talks to unix:<rundir>/<bridge>.mgmt")
	f.StringVar(&o.openflow, "openflow", "native", "how flow bundles reach the bridges: native (one persistent OpenFlow 1.5 connection per bridge; bundles with a line it cannot encode go through ovs-ofctl) or ovs-ofctl (one process per bundle)")
	f.StringVar(&o.bridgeEx, "bridge-ex", "br-ex", "the node's external bridge (must exist; holds the uplink and the node IP)")
	f.StringVar(&o.bridgeInt, "bridge-int", "br-int", "the pod (integration) bridge; created when missing")
	f.StringVar(&o.uplink, "uplink", "", "the uplink port on the external bridge; empty: the only port of the external bridge that is not internal, patch or a tunnel (the agent fails clearly if there is not exactly one)")
	f.StringVar(&o.gatewayPort, "gateway-port", ofctl.DefaultGatewayPort, "internal port on the integration bridge that holds the pod gateway address on the host (created by the node set-up step); when it is missing pods have no host connectivity (logged once); \"-\": never look")
	f.IntVar(&o.genevePort, "geneve-port", ofctl.DefaultGeneveUDPPort, "UDP port of the agent's flow-based Geneve tunnel port; the same on every node")
	f.StringSliceVar(&o.nodePortAddresses, "nodeport-addresses", nil, "comma-separated CIDRs of either family: serve NodePorts only on node addresses inside them, per family (a family without a CIDR here keeps all its addresses, as kube-proxy does; default: every InternalIP and ExternalIP of the node, IPv4 and IPv6)")
	f.StringSliceVar(&o.serviceCIDRs, "service-cidrs", nil, "comma-separated CIDRs of either family (both on a dual-stack cluster): the cluster's Service CIDRs (the API server's --service-cluster-ip-range), added to the ServiceCIDR objects (networking.k8s.io/v1) the agent watches where the API server serves them (Kubernetes 1.33+); no LoadBalancer IP or externalIP inside them is served (Event SourceIPRefused). Default: none, only the ServiceCIDR objects and addresses equal to a ClusterIP the agent sees are refused")
	f.StringSliceVar(&o.externalIPCIDRs, "external-ip-cidrs", nil, "comma-separated CIDRs of either family: the ranges a Service's spec.externalIPs may be served from, each family only from its own CIDRs (0.0.0.0/0 admits no IPv6 externalIP; anyone who may edit a Service can set externalIPs, CVE-2020-8554); default: none, no externalIP is served. externalIPs and LoadBalancer IPs equal to a node address, and externalIPs equal to another Service's LoadBalancer IP, are always refused (Event SourceIPRefused)")
	f.StringVar(&o.preserveSourceIP, "preserve-source-ip", string(agent.PreserveAnnotated), `which Services keep the client source IP on the agent's path (the rest are left to kube-proxy): annotated (default) serves only the Services annotated ovs-srcip.io/preserve-source-ip: "true"; all serves every eligible Service as if it were annotated "true" - externalTrafficPolicy Cluster, type NodePort or LoadBalancer or an externalIP inside --external-ip-cidrs, not headless or ExternalName, no label service.kubernetes.io/service-proxy-name or service.kubernetes.io/headless - unless it is annotated "false" (an opt-out); a Service that is not eligible gets no Event, an annotated one is judged as in annotated mode (docs/install.md, "Serving every Service")`)
	routedFlags(f, &o.routed)
	f.StringSliceVar(&o.egressClusterCIDRs, "egress-cluster-cidrs", nil, "comma-separated CIDRs: the cluster's Service and node networks, never sent to an EgressGateway's gateway when its destinations are the default (everything); every node's pod CIDRs and InternalIP are always excluded (docs/egress.md)")
	f.StringVar(&o.egressPortRange, "egress-port-range", "1024-65535", "FIRST-LAST: the source ports an egress IP's pods share; each selected pod gets an aligned block of --egress-port-block-size of them per egress IP (docs/egress.md \"Port blocks\"); the same on every node")
	f.IntVar(&o.egressPortBlock, "egress-port-block-size", agent.DefaultPortPool.Size, "ports per pod and egress IP (a power of two): the pod's TCP and UDP source ports are mapped into its block, so it has that many connections per destination address and port; the pool holds (range / size) pods per egress IP; the same on every node")
	f.DurationVar(&o.egressPortQuar, "egress-port-quarantine", agent.DefaultPortPool.Quarantine, "how long a released port block (its pod gone) stays unused before another pod gets it: 2 x MSL (a server holds the 4-tuple in TIME_WAIT; Linux: 60 s); at least 1s, and shorter than 2m is logged as a warning: another pod may then get the block while servers still hold its old connections in TIME_WAIT")
	f.StringVar(&o.nodePortRange, "service-node-port-range", "30000-32767", "the cluster's NodePort range (the API server's flag of that name), FIRST-LAST: NodePorts outside it are refused (Event SourceIPRefused), so that a Service in a manifests directory cannot capture a node's own port")
	f.IntVar(&o.zoneLimitPercent, "conntrack-zone-limit-percent", 40, "bound each conntrack zone of the pipeline (service, pod) to this percentage of the datapath's conntrack maximum (ovs-appctl dpctl/ct-get-maxconns), so that a flood on one entry point cannot fill the table; set at every full sync; 0 lifts the limits")
	f.DurationVar(&o.fullSyncPeriod, "full-sync-period", agent.DefaultFullSyncPeriod, "period of full syncs that compare the bridges with the desired flows and repair drift")
	f.DurationVar(&o.drainPeriod, "drain-period", agent.DefaultDrainPeriod, "longest time the established TCP connections of a Service entry point that went away (annotation removed, Service or port deleted, externalTrafficPolicy changed) keep being forwarded; the drain ends earlier, at a full sync, once the service conntrack zone holds no live connection to it")
	f.DurationVar(&o.repairPeriod, "repair-period", 10*time.Minute, "period of the deep repair: a full sync re-sends every flow of the agent with modify_strict (restores flows edited in place, keeps their counters) and every group with add_or_mod, in one bundle per bridge; it costs one bundle as large as the whole pipeline (about 6 flows per Service port, e.g. 60k lines and about a second of ovs-vswitchd time for 10k Service ports). 0 disables it")
	f.IntVar(&o.bucketsPerMessage, "group-buckets-per-message", flows.DefaultBucketsPerMessage, "most select-group buckets in one OpenFlow message: a Service port with more endpoints is written as one group add_or_mod plus insert_bucket messages in the same bundle (an OpenFlow message is at most 64 KiB; a Service bucket is 88 bytes)")
	f.StringVar(&o.leaseNamespace, "lease-namespace", envOr("POD_NAMESPACE", "ovs-srcip"), "namespace of the gateway-election Leases (one per egress IP, named egress-<IP>); default $POD_NAMESPACE, else ovs-srcip. Only with the Kubernetes API: with --manifests the gateway is the policy's status.activeGateways entry or the first eligible node by name")
	f.DurationVar(&o.leaseDuration, "egress-lease-duration", agent.DefaultLeaseDuration, "gateway election: a candidate takes over a Lease its holder has not renewed for this long (the failover time when a gateway dies without releasing it)")
	f.DurationVar(&o.renewDeadline, "egress-renew-deadline", agent.DefaultRenewDeadline, "gateway election: a holder that cannot renew its Lease for this long stops answering for the egress IP (must be below --egress-lease-duration)")
	f.DurationVar(&o.retryPeriod, "egress-retry-period", agent.DefaultRetryPeriod, "gateway election: how often holders renew and candidates try to acquire a Lease")
	f.BoolVar(&o.profiling, "profiling", false, "serve Go's /debug/pprof/ on the metrics address (CPU and heap profiles; make bench, performance work)")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:9464", `address of the HTTP server for /metrics, /healthz (process up, OVSDB reachable) and /readyz (first full sync done, syncs not failing); "0" disables it`)
	f.StringVar(&o.statusSocket, "status-socket", "", `unix socket serving the endpoints of --metrics-bind-address plus /status (JSON) and /trace (ofproto/trace on this node), for srcipctl on the node; default <ovs-rundir>/srcip-agent.sock; "-" disables it (a socket that cannot be created is logged, not fatal)`)
	f.StringVar(&o.debugAddr, "debug-bind-address", "", `address of an HTTP server with the status socket's endpoints (/status, /trace, ...) for srcipctl from elsewhere, e.g. 127.0.0.1:9465 behind kubectl port-forward; empty (default): none. /trace costs ovs-vswitchd CPU: never bind it where untrusted clients reach it`)
	f.StringVar(&o.flowSnapshot, "flow-snapshot", "", "file to keep the flow snapshot in: the flows and groups the agent has applied, written atomically after the syncs that changed them (at most every --flow-snapshot-interval) and when it stops, for srcip-agent flow-restore to replay into an ovs-vswitchd that restarted while no agent runs (docs/node-recovery.md; the DaemonSet uses "+DefaultFlowSnapshot+"); empty (default): none")
	f.DurationVar(&o.snapshotInterval, "flow-snapshot-interval", agent.DefaultSnapshotInterval, "shortest time between two writes of --flow-snapshot (each write encodes the whole file: about 20 MB for 10k Service ports with 10 endpoints each)")
	cmd.AddCommand(newNodeSetupCommand(), newNodeTeardownCommand(), newFlowRestoreCommand())
	addKlogFlags(f)
	return cmd
}

// addKlogFlags adds klog's flags to fs and hides all but -v and --vmodule (log_dir, log_file,
// logtostderr, ...), as Kubernetes components do since component-base deprecated them: the
// agent logs to stderr; the hidden flags still work for those who need them.
func addKlogFlags(fs *pflag.FlagSet) {
	gofs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(gofs)
	fs.AddGoFlagSet(gofs)
	gofs.VisitAll(func(f *goflag.Flag) {
		if f.Name != "v" && f.Name != "vmodule" {
			_ = fs.MarkHidden(f.Name)
		}
	})
}

func run(ctx context.Context, o options) error {
	if o.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	cidrs, err := agent.ParseCIDRs(o.nodePortAddresses)
	if err != nil {
		return fmt.Errorf("--nodeport-addresses: %w", err)
	}
	if o.zoneLimitPercent < 0 || o.zoneLimitPercent > 100 {
		return fmt.Errorf("--conntrack-zone-limit-percent %d: want 0..100", o.zoneLimitPercent)
	}
	if o.openflow != "native" && o.openflow != "ovs-ofctl" {
		return fmt.Errorf("--openflow %q: want native or ovs-ofctl", o.openflow)
	}
	npRange, err := agent.ParsePortRange(o.nodePortRange)
	if err != nil {
		return fmt.Errorf("--service-node-port-range: %w", err)
	}
	extCIDRs, err := agent.ParseCIDRs(o.externalIPCIDRs)
	if err != nil {
		return fmt.Errorf("--external-ip-cidrs: %w", err)
	}
	svcCIDRs, err := agent.ParseCIDRs(o.serviceCIDRs)
	if err != nil {
		return fmt.Errorf("--service-cidrs: %w", err)
	}
	mode, err := agent.ParsePreserveMode(o.preserveSourceIP)
	if err != nil {
		return fmt.Errorf("--preserve-source-ip: %w", err)
	}
	egressCIDRs, err := agent.ParseCIDRs(o.egressClusterCIDRs)
	if err != nil {
		return fmt.Errorf("--egress-cluster-cidrs: %w", err)
	}
	nonMasq, err := o.routed.set()
	if err != nil {
		return err
	}
	portPool, err := agent.ParsePortPool(o.egressPortRange, o.egressPortBlock, o.egressPortQuar)
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("node", o.nodeName)
	logger.Info("Starting srcip-agent", "version", version.Version, "commit", version.Commit)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Egress port blocks", "ports", o.egressPortRange, "blockSize", portPool.Size, "blocksPerEgressIP", portPool.Blocks(),
		"quarantine", portPool.Quarantine, "maxBlocksPerPolicy", egressv1.MaxPortBlocks)
	for _, w := range portPool.Warnings() {
		logger.Info("Warning: egress port blocks: " + w)
	}

	var src agent.Source
	var election *agent.LeaseElection
	var status *agent.EgressStatusWriter
	switch {
	case o.manifests != "" && o.kubeconfig != "":
		return errors.New("--manifests and --kubeconfig are exclusive")
	case o.manifests != "":
		src = &agent.ManifestSource{Dir: o.manifests, NodeName: o.nodeName}
	default:
		useListGates()
		cfg, err := kubeConfig(o.kubeconfig)
		if err != nil {
			return err
		}
		// Built-in types as protobuf (as kube-proxy reads them): smaller and cheaper to decode
		// than JSON; EgressGateways (a CRD) stay JSON.
		core := rest.CopyConfig(cfg)
		core.ContentType = "application/vnd.kubernetes.protobuf"
		core.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		cs, err := kubernetes.NewForConfig(core)
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		ecs, err := egressclient.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("egress client: %w", err)
		}
		src = agent.NewKubeSource(cs, o.nodeName).WithEgress(ecs)
		election = agent.NewLeaseElection(cs, o.leaseNamespace, o.nodeName)
		election.LeaseDuration, election.RenewDeadline, election.RetryPeriod = o.leaseDuration, o.renewDeadline, o.retryPeriod
		status = agent.NewEgressStatusWriter(ecs, o.nodeName)
		go status.Run(ctx)
	}

	endpoint, err := ofctl.NormalizeEndpoint(o.ovsdb)
	if err != nil {
		return fmt.Errorf("--ovsdb: %w", err)
	}
	db, err := ofctl.Connect(ctx, endpoint)
	if err != nil {
		return err
	}
	defer db.Close()
	dp := &dataplane{
		db: db,
		cfg: ofctl.IntegrationConfig{
			BrEx: o.bridgeEx, BrInt: o.bridgeInt, Uplink: o.uplink, GeneveUDPPort: o.genevePort, GatewayPort: o.gatewayPort,
		},
		bridges: map[flows.Bridge]string{flows.BrEx: o.bridgeEx, flows.BrInt: o.bridgeInt},
		changes: mergeChanges(ctx, db.Changes(), ofctl.WatchVswitchd(ctx, o.ovsRunDir, time.Second)),
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	brEx := ofctl.NewOpenFlow(o.bridgeEx, ofctl.MgmtTarget(o.ovsRunDir, o.bridgeEx))
	brInt := ofctl.NewOpenFlow(o.bridgeInt, ofctl.MgmtTarget(o.ovsRunDir, o.bridgeInt))
	for _, b := range []*ofctl.OpenFlow{brEx, brInt} {
		if o.openflow == "native" {
			b.Native = ofctl.NewConn(b.Target)
			defer b.Native.Close()
		}
		for _, path := range []string{"native", "ovs-ofctl"} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "srcip_agent_openflow_bundles_total",
				Help:        "OpenFlow bundles applied, by bridge and path: native (the persistent OpenFlow connection) or ovs-ofctl (--openflow=ovs-ofctl, or a bundle with a message that does not encode natively).",
				ConstLabels: prometheus.Labels{"bridge": b.Bridge, "path": path},
			}, func() float64 {
				n, f := b.BundleCounts()
				if path == "native" {
					return float64(n)
				}
				return float64(f)
			}))
		}
	}
	sctp := sctpSupport(ctx, db, brEx, o.bridgeEx)
	a, err := agent.New(agent.Config{
		ReconcilerConfig: agent.ReconcilerConfig{
			NodeName:  o.nodeName,
			Dataplane: dp,
			Bridges: map[flows.Bridge]agent.FlowBridge{
				flows.BrEx:  brEx,
				flows.BrInt: brInt,
			},
			NodePortCIDRs:      cidrs,
			ExternalIPCIDRs:    extCIDRs,
			ServiceCIDRs:       svcCIDRs,
			RouteNextHops:      routeNextHops,
			SCTP:               sctp,
			EgressClusterCIDRs: egressCIDRs,
			NonMasqueradeCIDRs: nonMasq,
			EgressPortPool:     portPool,
			PreserveSourceIP:   mode,
			Announcer:          brEx,
			NodePortRange:      npRange,
			Manifests:          absOrEmpty(o.manifests),
			ZoneLimitPercent:   o.zoneLimitPercent,
			Metrics:            agent.NewMetrics(reg),
			Conntrack:          brEx,
			DrainPeriod:        o.drainPeriod,
			RepairPeriod:       o.repairPeriod,
			BucketsPerMessage:  o.bucketsPerMessage,
			ReleaseMemory:      true,
			FlowSnapshot:       snapshotConfig(o),
		},
		Source:         src,
		Election:       election,
		FullSyncPeriod: o.fullSyncPeriod,
	})
	if err != nil {
		return err
	}
	if status != nil {
		a.Reconciler().SetEgressStatus(status)
	}
	metricsMux := newMux(reg, a, nil)
	if o.profiling {
		metricsMux.HandleFunc("/debug/pprof/", pprof.Index)
		metricsMux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		metricsMux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		metricsMux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	debugMux := newMux(reg, a, map[string]*ofctl.OpenFlow{"br-ex": brEx, "br-int": brInt})
	type server struct {
		ln  net.Listener
		mux *http.ServeMux
	}
	var servers []server
	for _, l := range []struct{ addr, flag string }{{o.metricsAddr, "--metrics-bind-address"}, {o.debugAddr, "--debug-bind-address"}} {
		if l.addr == "0" || l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			return fmt.Errorf("HTTP listener (%s %s): %w", l.flag, l.addr, err)
		}
		mux := metricsMux
		if l.flag == "--debug-bind-address" {
			mux = debugMux
		}
		servers = append(servers, server{ln, mux})
	}
	if o.statusSocket != "-" {
		path := o.statusSocket
		if path == "" {
			path = filepath.Join(o.ovsRunDir, statusSocketName)
		}
		_ = os.Remove(path) // a previous agent's socket
		if ln, err := net.Listen("unix", path); err != nil {
			logger.Error(err, "No status socket: srcipctl status and trace cannot reach this agent; set --status-socket to a writable path", "path", path)
		} else {
			servers = append(servers, server{ln, debugMux})
		}
	}
	for _, sv := range servers {
		ln := sv.ln
		srv := serveHTTP(ctx, ln, sv.mux)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				logger.Error(err, "HTTP server did not shut down cleanly", "addr", ln.Addr().String())
			}
		}()
	}
	logger.Info("Starting", "preserveSourceIP", mode, "openflow", o.openflow, "ovsdb", o.ovsdb, "bridgeEx", o.bridgeEx, "bridgeInt", o.bridgeInt, "manifests", o.manifests, "flowSnapshot", o.flowSnapshot)
	return a.Run(ctx)
}

// snapshotConfig is the agent's FlowSnapshotConfig of --flow-snapshot (nil: none).
func snapshotConfig(o options) *agent.FlowSnapshotConfig {
	if o.flowSnapshot == "" {
		return nil
	}
	return &agent.FlowSnapshotConfig{
		Path:        o.flowSnapshot,
		BridgeNames: map[flows.Bridge]string{flows.BrEx: o.bridgeEx, flows.BrInt: o.bridgeInt},
		MinInterval: o.snapshotInterval,
	}
}

func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig, no --manifests and not in a cluster: %w", err)
		}
		return uncompressed(cfg), nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return uncompressed(cfg), nil
}

// uncompressed turns off gzip of API responses: the agent's first lists (every Service and
// EndpointSlice of the cluster) are then not compressed by the API server and decompressed by
// the agent, which at 10k Services cost about 0.2 s of the agent's CPU and more of the API
// server's in the cold start; the API server is on the cluster network, where bytes are cheap.
func uncompressed(cfg *rest.Config) *rest.Config {
	cfg.DisableCompression = true
	return cfg
}

// statusSocketName is the agent's status socket in the OVS run directory (--status-socket).
const statusSocketName = "srcip-agent.sock"

// newMux returns the agent's HTTP endpoints: /metrics, /healthz, /readyz and, with bridges,
// /status (JSON agent.Report) and /trace (ofproto/trace on one of the node's bridges: query
// bridge=br-ex|br-int, flow=<ovs-fields(7) flow>, ct-next=<state> repeated; text/plain answer;
// read-only).
func newMux(reg *prometheus.Registry, a *agent.Agent, bridges map[string]*ofctl.OpenFlow) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	check := func(f func() error) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if err := f(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux.Handle("/healthz", check(a.Healthy))
	mux.Handle("/readyz", check(a.Ready))
	if bridges == nil {
		return mux
	}
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(a.Reconciler().Report())
	})
	mux.HandleFunc("/trace", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		of := bridges[q.Get("bridge")]
		if of == nil {
			http.Error(w, "bridge must be br-ex or br-int", http.StatusBadRequest)
			return
		}
		if q.Get("flow") == "" {
			http.Error(w, "flow is required", http.StatusBadRequest)
			return
		}
		out, err := of.Trace(r.Context(), q.Get("flow"), q["ct-next"])
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, out)
	})
	return mux
}

// serveHTTP serves mux on ln until Shutdown.
func serveHTTP(ctx context.Context, ln net.Listener, mux *http.ServeMux) *http.Server {
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	logger := klog.FromContext(ctx)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP server stopped", "addr", ln.Addr().String())
		}
	}()
	return srv
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// absOrEmpty returns the absolute form of path ("" stays "", a path Abs cannot resolve stays
// as given): the --manifests the status socket reports, for srcipctl diff run from elsewhere.
func absOrEmpty(path string) string {
	if path == "" {
		return ""
	}
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// The cold start's full sync encodes its next bundle while the switch commits the current one.
var _ agent.EncodedBundler = (*ofctl.OpenFlow)(nil)
