package main

import (
	"fmt"
	"strings"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// names resolves what OVS prints (cookies, groups, buckets, addresses) to the objects of an
// agent's report. A nil *names (no agent reachable) resolves kinds and tables only.
type names struct {
	rep      *agent.Report
	cookies  map[string]agent.FlowSetReport // cookie (0x...) -> flow set
	groups   map[uint32]*agent.ServicePortReport
	svcOf    map[uint32]string // group -> "ns/name"
	nodeByIP map[string]string
	podByIP  map[string]string // ip -> ns/name (this node's pods)
	// eps are the endpoints by Service port ("ns/name port/PROTO") and ip:port: an address is
	// named only within the Service port that lists it (two Services may list the same
	// address, with different pods or nodes in their EndpointSlices).
	eps map[endpointKey]agent.EndpointReport
}

type endpointKey struct {
	svc  string // ns/name port/PROTO
	addr string // ip:port
}

func newNames(rep *agent.Report) *names {
	if rep == nil {
		return nil
	}
	n := &names{rep: rep, cookies: map[string]agent.FlowSetReport{}, groups: map[uint32]*agent.ServicePortReport{},
		svcOf: map[uint32]string{}, nodeByIP: map[string]string{}, podByIP: map[string]string{}, eps: map[endpointKey]agent.EndpointReport{}}
	for _, fs := range rep.FlowSets {
		n.cookies[fs.Cookie] = fs
	}
	for i := range rep.Services {
		s := &rep.Services[i]
		for j := range s.Ports {
			p := &s.Ports[j]
			n.groups[p.Group] = p
			n.svcOf[p.Group] = s.Namespace + "/" + s.Name
			for _, e := range p.Endpoints {
				n.eps[endpointKey{svc: s.Namespace + "/" + s.Name + " " + p.PortName + "/" + p.Protocol + familySuffix(*p), addr: e.Addr}] = e
			}
		}
	}
	for _, nd := range rep.Nodes {
		n.nodeByIP[nd.InternalIP] = nd.Name
	}
	for _, p := range rep.Pods {
		for _, ip := range p.IPs {
			n.podByIP[ip] = p.Namespace + "/" + p.Name
		}
	}
	return n
}

// cookie names the object of cookie c: "service-port demo/web http/TCP", or the kind alone when
// the agent does not know the cookie (not applied now: an old version, or another agent's).
func (n *names) cookie(c flows.Cookie) string {
	if !c.Owned() {
		return "not ours"
	}
	if c.Learned() {
		return c.Kind().String() + " (learned at run time)"
	}
	if n != nil {
		if fs, ok := n.cookies[c.String()]; ok {
			if fs.Object == "" {
				return fs.Kind
			}
			return fs.Kind + " " + fs.Object
		}
		return c.Kind().String() + " (not applied by the agent now)"
	}
	return c.Kind().String()
}

// stale reports whether c is a cookie of ours, not learned at run time, that n's report does
// not list: the flows were read after the report (the agent applied a change in between), or
// another agent (an old version) wrote them. False for a nil n.
func (n *names) stale(c flows.Cookie) bool {
	if n == nil || !c.Owned() || c.Learned() {
		return false
	}
	_, ok := n.cookies[c.String()]
	return !ok
}

// staleGroup reports whether group id is not a Service port group of n's report (see stale).
// False for a nil n.
func (n *names) staleGroup(id uint32) bool {
	if n == nil {
		return false
	}
	_, ok := n.groups[id]
	return !ok
}

// group names a group id: "group of demo/web http/TCP".
func (n *names) group(id uint32) string {
	if n != nil {
		if p, ok := n.groups[id]; ok {
			return fmt.Sprintf("of %s %s/%s%s, %d bucket(s)", n.svcOf[id], p.PortName, p.Protocol, familySuffix(*p), p.Buckets)
		}
	}
	if flows.OwnedGroup(id) {
		return "of a Service port (not known to the agent now)"
	}
	return "(not ours)"
}

// bucket names bucket b of group id: "endpoint demo/echo-a 10.244.2.5:8080 on node2".
func (n *names) bucket(id, b uint32) string {
	if n == nil {
		return ""
	}
	p, ok := n.groups[id]
	if !ok {
		return ""
	}
	for _, e := range p.Endpoints {
		if e.Bucket == b {
			return endpointString(e)
		}
	}
	return ""
}

// bucketEndpoint returns the endpoint of bucket b of group id, false when the agent does not
// know it (n nil, another group or bucket).
func (n *names) bucketEndpoint(id, b uint32) (agent.EndpointReport, bool) {
	if n == nil {
		return agent.EndpointReport{}, false
	}
	if p, ok := n.groups[id]; ok {
		for _, e := range p.Endpoints {
			if e.Bucket == b {
				return e, true
			}
		}
	}
	return agent.EndpointReport{}, false
}

// endpoint names the endpoint ip:port of Service port svc ("ns/name port/PROTO"), as that
// Service's EndpointSlices describe it; never from another Service's.
func (n *names) endpoint(svc, addr string) string {
	if n != nil {
		if e, ok := n.eps[endpointKey{svc: svc, addr: addr}]; ok {
			return endpointString(e)
		}
	}
	return "endpoint " + addr
}

func endpointString(e agent.EndpointReport) string {
	s := "endpoint "
	if e.Pod != "" {
		s += e.Pod + " "
	}
	s += e.Addr
	if e.Node != "" {
		s += " on " + e.Node
	}
	return s
}

// node names a node address.
func (n *names) node(ip string) string {
	if n != nil {
		if name, ok := n.nodeByIP[ip]; ok {
			return name + " (" + ip + ")"
		}
	}
	return ip
}

// tableByName maps the table names of both bridges to (bridge, table).
var tableByName = func() map[string]struct {
	b flows.Bridge
	t flows.Table
} {
	m := map[string]struct {
		b flows.Bridge
		t flows.Table
	}{}
	for _, b := range []flows.Bridge{flows.BrEx, flows.BrInt} {
		for t, name := range flows.TableNames(b) {
			m[name] = struct {
				b flows.Bridge
				t flows.Table
			}{b, t}
		}
	}
	return m
}()

// dropNote returns "drop: REASON (DOC)" for a drop flow at (b, t, prio) with cookie c, "" when it
// is no drop flow of the pipeline.
func dropNote(b flows.Bridge, t flows.Table, prio int, c flows.Cookie) string {
	if info, ok := flows.DropAt(b, t, prio, c.Kind()); ok {
		return "drop: " + string(info.Reason) + " (" + info.Doc + ")"
	}
	return ""
}

// tableOf returns the table of a dumped flow (ovs-ofctl prints it by number, or by name under
// --names); false for a name of neither bridge.
func tableOf(f *ofctl.DumpedFlow) (flows.Table, bool) {
	if f.TableName == "" {
		return f.Table, true
	}
	if e, ok := tableByName[f.TableName]; ok {
		return e.t, true
	}
	return 0, false
}

// annotateDump appends to every dump-flows line of bridge b with a cookie: the table's name, the
// object the cookie serves, the group's Service port and, for a drop flow, the reason.
func annotateDump(dump string, b flows.Bridge, n *names) string {
	var sb strings.Builder
	for _, l := range strings.Split(strings.TrimRight(dump, "\n"), "\n") {
		sb.WriteString(l)
		if f, ok, err := ofctl.ParseFlowLine(l); ok && err == nil && strings.Contains(l, "cookie=") {
			t, _ := tableOf(&f)
			notes := []string{n.cookie(f.Cookie), t.Name(b)}
			if g, ok := f.Group(); ok {
				notes = append(notes, "group "+n.group(g))
			}
			if d := dropNote(b, t, f.Priority, f.Cookie); d != "" {
				notes = append(notes, d)
			}
			sb.WriteString("  # " + strings.Join(notes, "; "))
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// annotateDesired is annotateDump for rendered bundle lines ("flow add ...", "group ..."); n
// names the rendered flow sets.
func annotateDesired(lines []string, b flows.Bridge, n *names) string {
	var sb strings.Builder
	for _, l := range lines {
		sb.WriteString(annotateDump(l, b, n))
	}
	return sb.String()
}
