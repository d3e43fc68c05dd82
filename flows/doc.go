// Package flows is the pure OpenFlow pipeline of srcip-agent: typed state in (State: nodes, local
// pods, opted-in Service ports, the OpenFlow port numbers), flow sets out (Desired: one FlowSet
// per object, each with its own cookie), and the plan of one atomic bundle that moves a bridge
// from what it holds to what is desired (Plan, FullDiff). It does no I/O: package ofctl applies the
// rendered lines, package agent decides when.
//
// Every kind of flow set has one entry in the registry (registry.go: name, bridge, collision tier,
// triggers, how to build it from State) and its builder in <kind>.go. Tables, registers, conntrack
// zones, ct_mark/ct_label bits and Geneve VNIs are declared once, in tables.go and fields.go, and
// documented with a diagram of the pipeline in docs/pipeline.md:
//
//	br-ex:  0 ExClassifier -> 40 ExServiceLB -> ct -> 41 ExServiceCT -> group -> ct commit/DNAT
//	        -> 42 ExServiceOut -> patch;  patch -> 45 ExFromInt -> ct un-DNAT -> 46 ExServiceReply -> uplink
//	br-int: 0 IntClassifier -> (pods: ct -> 50 IntPodEgressCT) -> 60 IntL3Forwarding
//	        -> 65 IntPodIngress (commit origin) -> pod | Geneve | patch;  ARP -> 55 IntARPResponder
//
// Sources: ovs-actions(7) for ct, nat, group, move and load; ovs-fields(7) for ct_state, ct_mark,
// ct_label, tun_id, tun_dst and the NXM registers; ovs-ofctl(8) for the flow, group and bundle
// syntax; RFC 8926 for Geneve; the Kubernetes Service API (externalTrafficPolicy, KEP-1669
// terminating endpoints) for which endpoints are used.
package flows
