package agent

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// flowStatsCollector exports, at every scrape, the counters of the agent's flows read from Open
// vSwitch (FlowStatser): packets dropped by reason, and per Service port the packets to its entry
// points, the new connections sent to its group and the packets dropped for it. The counters
// are OVS's flow counters: they restart from zero when a flow set is replaced (a new cookie), which
// Prometheus' rate() treats as a counter reset.
type flowStatsCollector struct {
	r       *Reconciler
	bridges map[flows.Bridge]FlowBridge
	timeout time.Duration

	dropped, svcPackets, svcNew, svcDropped, scrapeErrors *prometheus.Desc
}

func newFlowStatsCollector(r *Reconciler, bridges map[flows.Bridge]FlowBridge) *flowStatsCollector {
	svc := []string{"namespace", "service", "port", "protocol"}
	return &flowStatsCollector{r: r, bridges: bridges, timeout: 5 * time.Second,
		dropped: prometheus.NewDesc("srcip_agent_dropped_packets_total",
			"Packets dropped by the agent's drop flows (and new connections to Service ports without endpoints, handed to the host's kube-proxy to reject), by bridge and reason (flows.DropReason; docs/troubleshooting.md). OVS flow counters: they restart when a flow set is rewritten.",
			[]string{"bridge", "reason"}, nil),
		svcPackets: prometheus.NewDesc("srcip_agent_service_packets_total",
			"Packets from clients to the entry points of an opted-in Service port on this node (ExServiceLB), by Service port.", svc, nil),
		svcNew: prometheus.NewDesc("srcip_agent_service_new_connections_total",
			"New connections of an opted-in Service port sent to its endpoints on this node (ExServiceCT: its select group, or the session affinity lookup), by Service port.", svc, nil),
		svcDropped: prometheus.NewDesc("srcip_agent_service_dropped_packets_total",
			"Packets of new connections to an opted-in Service port not served on this node (a retransmitted SYN counts again), by Service port and reason (outside-source-ranges: dropped; no-endpoints: handed to the host, whose kube-proxy rejects them). OVS flow counters: they restart when a flow set is rewritten.",
			append(svc, "reason"), nil),
		scrapeErrors: prometheus.NewDesc("srcip_agent_flow_stats_errors",
			"1 when the flow counters of a bridge could not be read at this scrape.", []string{"bridge"}, nil),
	}
}

func (c *flowStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.dropped, c.svcPackets, c.svcNew, c.svcDropped, c.scrapeErrors} {
		ch <- d
	}
}

func (c *flowStatsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	keys, empty := c.r.cookieIndex()
	pk, nc := map[flows.Key]float64{}, map[flows.Key]float64{}
	sd := map[flows.Key]map[flows.DropReason]float64{}
	for _, b := range applyOrder {
		fsr, ok := c.bridges[b].(FlowStatser)
		if !ok {
			continue
		}
		stats, err := fsr.FlowStats(ctx)
		failed := 0.0
		if err != nil {
			failed = 1
			klog.Background().V(2).Info("Could not read flow counters", "bridge", b.String(), "err", err)
		}
		ch <- prometheus.MustNewConstMetric(c.scrapeErrors, prometheus.GaugeValue, failed, b.String())
		drops := map[flows.DropReason]float64{}
		for _, info := range flows.DropInfos() {
			if len(info.Spots) > 0 && info.Spots[0].Bridge == b || info.Reason == flows.DropNoEndpoints && b == flows.BrEx {
				drops[info.Reason] = 0
			}
		}
		for _, s := range stats {
			kind := s.Cookie.Kind()
			if info, ok := flows.DropAt(b, s.Table, s.Priority, kind); ok {
				drops[info.Reason] += float64(s.Packets)
			}
			k, known := keys[s.Cookie]
			if !known || kind != flows.KindServicePort {
				continue
			}
			dropInfo, isDrop := flows.DropAt(b, s.Table, s.Priority, kind)
			noEndpoints := empty[k]
			// The series are by Service port without its family: a dual-stack port's IPv4 and
			// IPv6 flow sets add up (two series with the same labels would fail the scrape).
			k.Family = flows.IPv4
			switch {
			case s.Table == flows.ExServiceLB:
				pk[k] += float64(s.Packets)
			case s.Table != flows.ExServiceCT:
			case isDrop:
				addDrop(sd, k, dropInfo.Reason, float64(s.Packets))
			case noEndpoints:
				// A port without endpoints hands its new connections to the host, whose
				// kube-proxy rejects them.
				drops[flows.DropNoEndpoints] += float64(s.Packets)
				addDrop(sd, k, flows.DropNoEndpoints, float64(s.Packets))
			default:
				// The group, or for a sessionAffinity port the lookup of the client's endpoint.
				nc[k] += float64(s.Packets)
			}
		}
		for r, v := range drops {
			ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, v, b.String(), string(r))
		}
	}
	for k, v := range pk {
		ch <- prometheus.MustNewConstMetric(c.svcPackets, prometheus.CounterValue, v, svcLabels(k)...)
		ch <- prometheus.MustNewConstMetric(c.svcNew, prometheus.CounterValue, nc[k], svcLabels(k)...)
	}
	for k, m := range sd {
		for r, v := range m {
			ch <- prometheus.MustNewConstMetric(c.svcDropped, prometheus.CounterValue, v, append(svcLabels(k), string(r))...)
		}
	}
}

func addDrop(m map[flows.Key]map[flows.DropReason]float64, k flows.Key, r flows.DropReason, v float64) {
	if m[k] == nil {
		m[k] = map[flows.DropReason]float64{}
	}
	m[k][r] += v
}

func svcLabels(k flows.Key) []string {
	return []string{k.Namespace, k.Name, k.Port, string(k.Protocol)}
}

// cookieIndex returns the key of every applied cookie, and the Service-port keys whose group has
// no bucket (no usable endpoint).
func (r *Reconciler) cookieIndex() (map[flows.Cookie]flows.Key, map[flows.Key]bool) {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	keys := map[flows.Cookie]flows.Key{}
	empty := map[flows.Key]bool{}
	for _, b := range applyOrder {
		for k, a := range r.syncer.applied[b] {
			keys[a.Cookie] = k
		}
	}
	for k, sp := range r.model.st.Services {
		if len(sp.Endpoints) == 0 {
			empty[k] = true
		}
	}
	return keys, empty
}
