package agent

import (
	"strings"

	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the agent's Prometheus metrics (prefix srcip_agent_). They are registered on the
// Registerer given to NewMetrics, never on a package-level registry.
type Metrics struct {
	SyncDuration *prometheus.HistogramVec
	// SyncStepDuration is the time of each step of a sync (model, build, resolve, inventory,
	// drain, plan, apply, zones), by kind (full, partial).
	SyncStepDuration *prometheus.HistogramVec
	SyncFailures     *prometheus.CounterVec
	// ChangeToFlows is the time from a watch event (an object change seen by the handlers) to
	// the end of the sync that applied it, for the oldest change of each sync.
	ChangeToFlows   prometheus.Histogram
	AppliedFlows    *prometheus.GaugeVec
	AppliedGroups   *prometheus.GaugeVec
	BundleLines     *prometheus.CounterVec
	LastSuccess     prometheus.Gauge
	DesiredFlowSets *prometheus.GaugeVec
	// ConntrackOps counts conntrack dumps and flushes by op (dump, flush) and result (ok, error).
	ConntrackOps        *prometheus.CounterVec
	DrainingEntryPoints prometheus.Gauge
	// ConntrackZoneLimit and ConntrackZoneEntries are each conntrack zone's limit (0: none) and
	// entries at the last full sync, by zone name.
	ConntrackZoneLimit   *prometheus.GaugeVec
	ConntrackZoneEntries *prometheus.GaugeVec
	FlowConflicts        prometheus.Gauge
	// RejectedFlowSets counts, by kind, the flow sets Open vSwitch rejected (each version once);
	// RejectedNow is how many are rejected now (not applied; retried at the next full sync).
	RejectedFlowSets *prometheus.CounterVec
	RejectedNow      prometheus.Gauge
	// DeclinedServicePorts is how many opted-in Service ports this node leaves to the host
	// because an endpoint is outside every node's pod CIDRs (docs/field-cases.md#c34).
	DeclinedServicePorts prometheus.Gauge
	// FlowSnapshotLastWrite and FlowSnapshotBytes are the Unix time and the size of the last
	// successful write of the flow snapshot (--flow-snapshot; 0: none yet, or no snapshot);
	// FlowSnapshotWriteErrors counts the writes that failed (the file on disk stays the older one).
	FlowSnapshotLastWrite   prometheus.Gauge
	FlowSnapshotBytes       prometheus.Gauge
	FlowSnapshotWriteErrors prometheus.Counter

	// reg is where NewMetrics registered them (nil: nowhere); agent.New registers the flow
	// counters' collector there too.
	reg prometheus.Registerer
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "srcip_agent"
	m := &Metrics{
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "sync_duration_seconds",
			Help:    "Duration of syncs (build, diff and apply), by kind (full, partial).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"kind"}),
		SyncStepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "sync_step_duration_seconds",
			Help:    "Duration of each step of a sync (model: state from the caches and OVSDB; build; resolve: flow conflicts; inventory: dump of the bridges, full syncs; drain; plan; apply: the bundles; zones: conntrack zone limits), by step and kind (full, partial).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"step", "kind"}),
		ChangeToFlows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "change_to_flows_seconds",
			Help:    "Time from an object change seen by the agent's watch (Service, EndpointSlice, Node, Pod, EgressGateway, Namespace) to the end of the sync that wrote it into the bridges; one observation per sync, for its oldest change (like kube-proxy's network_programming_duration_seconds, without the API server's part).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		SyncFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "sync_failures_total",
			Help: "Syncs that failed, by kind (full, partial).",
		}, []string{"kind"}),
		AppliedFlows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "applied_flows",
			Help: "Flows the agent has successfully written and holds in place, by bridge.",
		}, []string{"bridge"}),
		AppliedGroups: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "applied_groups",
			Help: "OpenFlow groups the agent has successfully written and holds in place, by bridge.",
		}, []string{"bridge"}),
		BundleLines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "bundle_lines_total",
			Help: "Lines (flow and group adds and deletes) written in successful bundles, by bridge.",
		}, []string{"bridge"}),
		LastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "last_successful_sync_timestamp_seconds",
			Help: "Unix time of the last successful sync.",
		}),
		DesiredFlowSets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "desired_flow_sets",
			Help: "Flow sets in the desired state, by kind (" + strings.Join(flows.KindNames(), ", ") + ").",
		}, []string{"kind"}),
		ConntrackOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "conntrack_operations_total",
			Help: "Conntrack operations, by op (dump: drain check, flush: UDP entries of a removed endpoint, limits: zone limits) and result (ok, error).",
		}, []string{"op", "result"}),
		ConntrackZoneLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "conntrack_zone_limit",
			Help: "Maximum number of conntrack entries of each zone of the pipeline (0: bounded by the datapath's total only), by zone (ZoneService, ZonePod, ZoneService6).",
		}, []string{"zone"}),
		ConntrackZoneEntries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "conntrack_zone_entries",
			Help: "Conntrack entries of each zone of the pipeline at the last full sync, by zone (ZoneService, ZonePod, ZoneService6); a zone at its limit refuses new connections.",
		}, []string{"zone"}),
		DrainingEntryPoints: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "draining_entry_points",
			Help: "Entry points of Service ports that went away whose established connections are still forwarded (drain flow sets).",
		}),
		FlowConflicts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "flow_conflicts",
			Help: "Flows (bridge, table, priority, match) that more than one flow set renders, at the last sync; each goes to one winner.",
		}),
		RejectedFlowSets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "rejected_flow_sets_total",
			Help: "Flow sets that Open vSwitch rejected while the rest of their bundle was applied, by kind (each rejected version counted once).",
		}, []string{"kind"}),
		RejectedNow: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "rejected_flow_sets",
			Help: "Flow sets Open vSwitch rejected at their last attempt: not applied (the installed version, if any, is kept), retried at the next full sync.",
		}),
		DeclinedServicePorts: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "declined_service_ports",
			Help: "Opted-in Service ports with an endpoint outside every node's pod CIDRs (e.g. hostNetwork): no flows, served by the host without source IP preservation.",
		}),
		FlowSnapshotLastWrite: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "flow_snapshot_last_write_timestamp_seconds",
			Help: "Unix time of the last successful write of the flow snapshot (--flow-snapshot), which flow-restore replays after an ovs-vswitchd restart while no agent runs; 0: none yet, or no --flow-snapshot.",
		}),
		FlowSnapshotBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "flow_snapshot_bytes",
			Help: "Size in bytes of the flow snapshot file at its last successful write (--flow-snapshot).",
		}),
		FlowSnapshotWriteErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Name: "flow_snapshot_write_errors_total",
			Help: "Writes of the flow snapshot (--flow-snapshot) that failed; the file keeps its previous content (flow-restore would replay that, or only the base flow).",
		}),
	}
	m.reg = reg
	if reg != nil {
		reg.MustRegister(m.SyncDuration, m.SyncStepDuration, m.ChangeToFlows, m.SyncFailures, m.AppliedFlows, m.AppliedGroups, m.BundleLines, m.LastSuccess, m.DesiredFlowSets,
			m.ConntrackOps, m.DrainingEntryPoints, m.ConntrackZoneLimit, m.ConntrackZoneEntries, m.FlowConflicts, m.RejectedFlowSets, m.RejectedNow, m.DeclinedServicePorts,
			m.FlowSnapshotLastWrite, m.FlowSnapshotBytes, m.FlowSnapshotWriteErrors)
	}
	return m
}
