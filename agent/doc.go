// Package agent is the Kubernetes (or manifests-directory) glue of srcip-agent: it watches
// Nodes, Services, EndpointSlices and Pods through a Source, converts them into the pure input
// model of package flows (convert.go, model.go), and keeps the node's bridges equal to the flow
// sets built from it with one writer goroutine (Reconciler, driven by a bounded-frequency Runner).
// The Reconciler has two halves: the model (caches, conversion, claims, which objects dirty which
// keys) and the syncer (build -> resolve conflicts -> drains -> plan -> apply, one pipeline for
// partial and full syncs). docs/architecture.md walks one Service through every step.
//
// The control loop follows kube-proxy: Source handlers only record {previous, current} pairs in
// ChangeTrackers and request a sync; the Reconciler checks the trackers out, rebuilds only the
// dirty flow sets (partial sync) and writes one ovs-ofctl bundle per bridge. Pod ports in OVSDB
// are such an input too (podPortSource: a CNI ADD or DEL is a partial sync of that pod). A full
// sync (re-read OVSDB, dump the bridge's inventory, flows.FullDiff, repair drift) runs at start,
// after any failed write, after an OVSDB change beyond pod ports (a bridge, the uplink, the
// patch, tunnel or gateway port, their ofports; a reconnect; an ovs-vswitchd restart), and
// periodically. Nothing is written before the Source has
// synced: a sync on partial data would delete live flows.
//
// No flow logic lives here; the package never formats a flow.
package agent
