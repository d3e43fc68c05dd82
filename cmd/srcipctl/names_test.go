package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ovs-srcip/ovs-srcip/agent"
)

// An endpoint address is named within its Service port only: two Services that list the same
// ip:port (an EndpointSlice in another namespace claiming another pod or node) do not rewrite
// each other's names.
func TestEndpointNamesPerService(t *testing.T) {
	rep := &agent.Report{Services: []agent.ServiceReport{
		{Namespace: "a", Name: "web", OptedIn: true, Ports: []agent.ServicePortReport{{PortName: "http", Protocol: "TCP", Group: 1,
			Endpoints: []agent.EndpointReport{{Addr: "10.244.2.5:8080", Pod: "a/echo-a", Node: "node2"}}}}},
		{Namespace: "b", Name: "evil", OptedIn: true, Ports: []agent.ServicePortReport{{PortName: "http", Protocol: "TCP", Group: 2,
			Endpoints: []agent.EndpointReport{{Addr: "10.244.2.5:8080", Pod: "b/fake", Node: "node3"}}}}},
	}}
	n := newNames(rep)
	if got := n.endpoint("a/web http/TCP", "10.244.2.5:8080"); got != "endpoint a/echo-a 10.244.2.5:8080 on node2" {
		t.Errorf("a/web: %q", got)
	}
	if got := n.endpoint("b/evil http/TCP", "10.244.2.5:8080"); got != "endpoint b/fake 10.244.2.5:8080 on node3" {
		t.Errorf("b/evil: %q", got)
	}
	if got := n.endpoint("c/other http/TCP", "10.244.2.5:8080"); got != "endpoint 10.244.2.5:8080" {
		t.Errorf("unknown Service: %q", got)
	}
}

// A declined Service (SCTP only; an IPv6-only Service is no longer declined, issue 22) shows as
// declined, never as opted in without a port, and never blames the EndpointSlices.
func TestDeclinedServiceShown(t *testing.T) {
	rep := &agent.Report{Services: []agent.ServiceReport{{Namespace: "a", Name: "sctp", OptedIn: true, Annotated: true, Annotation: "true",
		Declined: []string{"port assoc 9999/SCTP declined: the pipeline does not serve SCTP"}}}}
	var st, ls, narrow bytes.Buffer
	writeStatus(&st, rep, nil)
	writeServices(&ls, rep, true)
	writeServices(&narrow, rep, false)
	if !strings.Contains(narrow.String(), "declined") || strings.Contains(narrow.String(), "no-endpoints") {
		t.Errorf("narrow services:\n%s", narrow.String())
	}
	for _, out := range []string{st.String(), ls.String()} {
		if !strings.Contains(out, "the pipeline does not serve SCTP") || strings.Contains(out, "no-endpoints") {
			t.Errorf("output:\n%s", out)
		}
	}
	if !strings.Contains(st.String(), "DECLINED") || !strings.Contains(ls.String(), "declined") {
		t.Errorf("status:\n%s\nservices:\n%s", st.String(), ls.String())
	}
}
