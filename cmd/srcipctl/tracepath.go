package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovs-srcip/ovs-srcip/agent"
	"github.com/ovs-srcip/ovs-srcip/flows"
	"github.com/ovs-srcip/ovs-srcip/ofctl"
)

// nodeView is one node as srcipctl trace sees it: its agent (for /trace and /status), its report
// and the names that report resolves.
type nodeView struct {
	name  string
	c     *agentClient
	rep   *agent.Report
	names *names
}

func (v *nodeView) ip() string {
	for _, n := range v.rep.Nodes {
		if n.Name == v.name {
			return n.InternalIP
		}
	}
	return ""
}

// pathTracer traces a new external connection across nodes: the ingress node's path, the chosen
// endpoint, the backend node's path (traced on that node's OVS through its agent), the reply path
// back and the un-DNAT, and ends in one verdict line.
type pathTracer struct {
	out     io.Writer
	ingress *nodeView
	// peer returns the agent of another node (nil, error: not reachable).
	peer func(ctx context.Context, node string) (*agentClient, error)
	full bool
	// clientMAC is the Ethernet source of the client's packets (its router) as traced.
	clientMAC net.HardwareAddr
	step      int
	// stale is set when a traced flow's cookie is not in its node's report (names.stale): the
	// report is older than the flows, and the trace is run again with a new report.
	stale bool
}

func (t *pathTracer) trace(ctx context.Context, v *nodeView, bridge, what, flow string, ctNext ...string) (ofctl.Trace, error) {
	t.step++
	fmt.Fprintf(t.out, "\n== %d. %s %s: %s\n", t.step, v.name, bridge, what)
	fmt.Fprintf(t.out, "   ofproto/trace %s '%s'", bridge, flow)
	for _, c := range ctNext {
		fmt.Fprintf(t.out, " --ct-next %s", c)
	}
	fmt.Fprintln(t.out)
	out, err := v.c.Trace(ctx, bridge, flow, ctNext)
	if err != nil {
		return ofctl.Trace{}, err
	}
	r := ofctl.ParseTrace(out, nil)
	if t.full {
		fmt.Fprint(t.out, out)
	}
	t.printHits(v, r)
	return r, nil
}

// printHits prints one line per table the packet went through: bridge, table name, priority, the
// object of the flow's cookie, the group and bucket chosen, and the reason of a drop flow.
func (t *pathTracer) printHits(v *nodeView, r ofctl.Trace) {
	for _, h := range r.Steps {
		notes := []string{v.names.cookie(h.Cookie)}
		t.stale = t.stale || v.names.stale(h.Cookie)
		if h.Group != 0 {
			t.stale = t.stale || v.names.staleGroup(h.Group)
			g := "group " + v.names.group(h.Group)
			if h.Bucket >= 0 {
				g += fmt.Sprintf(" -> bucket %d: %s", h.Bucket, v.names.bucket(h.Group, uint32(h.Bucket)))
			} else {
				g += " -> no bucket"
			}
			notes = append(notes, g)
		}
		// Only a step that drops gets its drop reason: a drop spot's (table, priority, kind) is
		// shared by the other flows of that priority (IntPodEgressCT's reply steering and its
		// kubernetes#74839 drop are both prioMid of int-base).
		if d := dropNote(h.Bridge, h.Table, h.Priority, h.Cookie); d != "" && slices.Contains(h.Actions, "drop") {
			notes = append(notes, d)
		}
		fmt.Fprintf(t.out, "   %-6s %2d %-16s prio %-4d %s\n", h.Bridge, int(h.Table), h.Table.Name(h.Bridge), h.Priority, strings.Join(notes, "; "))
	}
	fmt.Fprintf(t.out, "   datapath actions: %s\n", r.Final)
}

// dropVerdict explains why r ended in a drop on node: the drop flow's reason, an empty group, a
// tunnel that could not be routed, or the table it ended in.
func dropVerdict(node string, r ofctl.Trace) string {
	h, ok := r.Last()
	if !ok {
		return fmt.Sprintf("dropped on %s before any table of the pipeline", node)
	}
	where := fmt.Sprintf("%s %s %s", node, h.Bridge, h.Table.Name(h.Bridge))
	if info, ok := flows.DropAt(h.Bridge, h.Table, h.Priority, h.Cookie.Kind()); ok {
		return fmt.Sprintf("dropped at %s: %s (%s)", where, info.Reason, info.Doc)
	}
	if h.Group != 0 && h.Bucket < 0 {
		info, _ := flows.DropInfoOf(flows.DropNoEndpoints)
		return fmt.Sprintf("dropped at %s: %s (%s)", where, info.Reason, info.Doc)
	}
	if strings.Contains(r.Raw, "routing failed") {
		return fmt.Sprintf("dropped at %s: the Geneve packet has no route or next hop on the underlay (native tunnel routing failed)", where)
	}
	return fmt.Sprintf("dropped at %s (priority %d): no drop reason declared for this flow", where, h.Priority)
}

// noEndpoints reports whether the trace's last step is a Service port's new-connection flow that
// hands the packet to the host: the port has no usable endpoint, the host's kube-proxy rejects it.
func noEndpoints(last ofctl.TraceStep) bool {
	return last.Bridge == flows.BrEx && last.Table == flows.ExServiceCT && last.Cookie.Kind() == flows.KindServicePort && last.Has("LOCAL")
}

// rejectVerdict is the verdict of a new connection to a port without endpoints on node.
func rejectVerdict(node string) string {
	info, _ := flows.DropInfoOf(flows.DropNoEndpoints)
	return fmt.Sprintf("rejected at %s br-ex ExServiceCT: %s (%s)", node, info.Reason, info.Doc)
}

// entryOwner returns "demo/web http/TCP" when entry is served on v's node, else "" and why not.
func entryOwner(v *nodeView, entry netip.AddrPort, proto string) (string, string) {
	want := entry.String() + "/" + strings.ToUpper(proto)
	for _, s := range v.rep.Services {
		for _, p := range s.Ports {
			for _, e := range p.EntryPoints {
				if e == want {
					return s.Namespace + "/" + s.Name + " " + p.PortName + "/" + p.Protocol + familySuffix(p), ""
				}
			}
		}
	}
	var why []string
	np := fmt.Sprintf("nodePort %d/%s", entry.Port(), strings.ToUpper(proto))
	isNode := false
	for _, n := range v.rep.Nodes {
		isNode = isNode || n.InternalIP == entry.Addr().String()
	}
	for _, s := range v.rep.Services {
		for _, r := range s.Refused {
			if r.Entry == want || r.Entry == np {
				why = append(why, fmt.Sprintf("%s/%s: %s", s.Namespace, s.Name, r.Reason))
			}
		}
		asks := false
		for _, e := range s.Requested {
			asks = asks || e == want || (isNode && e == np)
		}
		if asks && !s.OptedIn && s.Reason != "" {
			why = append(why, fmt.Sprintf("%s/%s is not opted in: %s", s.Namespace, s.Name, s.Reason))
		}
		if asks && s.OptedIn {
			for _, d := range s.Declined {
				why = append(why, fmt.Sprintf("%s/%s: %s", s.Namespace, s.Name, d))
			}
		}
		for _, c := range s.Conflicts {
			if strings.Contains(c, entry.Addr().String()) || strings.Contains(c, fmt.Sprint(entry.Port())) {
				why = append(why, fmt.Sprintf("%s/%s: %s", s.Namespace, s.Name, c))
			}
		}
	}
	if len(why) == 0 {
		why = append(why, "no opted-in Service of this node has this entry point")
	}
	return "", strings.Join(why, "; ")
}

// ipLabel is the ct_label a backend node records for a connection tunnelled from the ingress
// node at underlay address ip: CTLabelIngressNode (ct_label[0..31]) over an IPv4 underlay,
// CTLabelIngressNode6 (all 128 bits) over an IPv6 one; "0" for no address.
func ipLabel(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return "0"
	}
	return "0x" + hex.EncodeToString(a.Unmap().AsSlice())
}

// underlayUDP is the protocol of a Geneve packet from the node at underlay address ip: udp over
// an IPv4 underlay, udp6 over an IPv6 one.
func underlayUDP(ip string) string {
	if a, err := netip.ParseAddr(ip); err == nil && !a.Unmap().Is4() {
		return "udp6"
	}
	return "udp"
}

// underlayAddrs are the outer addresses of a Geneve packet from src to dst (underlay addresses).
func underlayAddrs(src, dst string) string {
	if underlayUDP(src) == "udp6" {
		return "ipv6_src=" + src + ",ipv6_dst=" + dst
	}
	return "nw_src=" + src + ",nw_dst=" + dst
}

// tunAddrs are the tunnel metadata of a Geneve packet from src to dst (underlay addresses):
// tun_src/tun_dst over IPv4, tun_ipv6_src/tun_ipv6_dst over IPv6 (ovs-fields(7)).
func tunAddrs(src, dst string) string {
	if underlayUDP(src) == "udp6" {
		return "tun_ipv6_src=" + src + ",tun_ipv6_dst=" + dst
	}
	return "tun_src=" + src + ",tun_dst=" + dst
}

func macLabel(m net.HardwareAddr) string {
	return "0x" + strings.ReplaceAll(m.String(), ":", "")
}

// l4 renders the protocol and ports of a flow: "tcp,...,tcp_src=A,tcp_dst=B[,tcp_flags=F]".
func l4(proto string, src, dst uint16, tcpFlags string) string {
	s := fmt.Sprintf("%s_src=%d,%s_dst=%d", proto, src, proto, dst)
	if proto == "tcp" && tcpFlags != "" {
		s += ",tcp_flags=" + tcpFlags
	}
	return s
}

// run traces the first packet of a new connection from client to entry and its reply; it
// returns the verdict line.
func (t *pathTracer) run(ctx context.Context, proto string, client, entry netip.AddrPort) (string, error) {
	in := t.ingress
	p := in.rep.Ports
	if p.ExUplink == 0 || p.ExMAC == "" {
		return "", fmt.Errorf("the agent of %s has not read its ports from OVSDB yet (no full sync): %s", in.name, in.rep.LastError)
	}
	svc, why := entryOwner(in, entry, proto)
	conn := fmt.Sprintf("%s -> %s/%s", client, entry, strings.ToUpper(proto))
	fmt.Fprintf(t.out, "trace %s, a new connection entering at %s\n", conn, in.name)
	if svc != "" {
		fmt.Fprintf(t.out, "entry point of %s\n", svc)
	} else {
		fmt.Fprintf(t.out, "not an entry point of ovs-srcip on %s: %s\n", in.name, why)
	}
	flow := fmt.Sprintf("in_port=%d,%s,dl_src=%s,dl_dst=%s,%s,nw_ttl=64,%s",
		p.ExUplink, l3(proto, client.Addr()), t.clientMAC, p.ExMAC, addrs(client.Addr(), entry.Addr()), l4(proto, client.Port(), entry.Port(), "syn"))
	r, err := t.trace(ctx, in, "br-ex", "the client's first packet", flow, "trk,new", "trk,new,dnat")
	if err != nil {
		return "", err
	}
	last, _ := r.Last()
	switch {
	case r.Dropped():
		return dropVerdict(in.name, r), nil
	case noEndpoints(last):
		return rejectVerdict(in.name), nil
	case last.Bridge == flows.BrEx && last.Has("LOCAL"):
		return fmt.Sprintf("not handled by ovs-srcip: %s hands %s to its host stack (kube-proxy serves it without source IP preservation, or nothing listens): %s", in.name, entry, why), nil
	case r.NATDst == "":
		return fmt.Sprintf("unexpected: %s forwarded the packet without a DNAT (datapath actions %s)", in.name, r.Final), nil
	}
	ep := r.NATDst
	epAddr, _ := netip.ParseAddrPort(ep)
	fmt.Fprintf(t.out, "   => DNAT to %s\n", in.names.endpoint(svc, ep))

	backend := in
	if r.TunDst != "" && last.Bridge == flows.BrInt && last.Table == flows.IntL3Forwarding {
		name := in.names.nodeByIP[r.TunDst]
		fmt.Fprintf(t.out, "   => Geneve (VNI %s) to %s\n", r.VNI, in.names.node(r.TunDst))
		if name == "" {
			return fmt.Sprintf("dropped after %s: the tunnel destination %s is no known node", in.name, r.TunDst), nil
		}
		c, err := t.peer(ctx, name)
		if err != nil {
			return fmt.Sprintf("forwarded by %s to %s over Geneve; %s not traced: %v", in.name, in.names.endpoint(svc, ep), name, err), nil
		}
		rep, err := c.Report(ctx)
		if err != nil {
			return fmt.Sprintf("forwarded by %s to %s over Geneve; %s not traced: %v", in.name, in.names.endpoint(svc, ep), name, err), nil
		}
		backend = &nodeView{name: name, c: c, rep: rep, names: newNames(rep)}
		bp := rep.Ports
		// The Geneve packet on the backend's uplink: let in only from a known node (tunnel-peer).
		gflow := fmt.Sprintf("in_port=%d,%s,dl_dst=%s,%s,nw_ttl=64,udp_src=49152,udp_dst=%d",
			bp.ExUplink, underlayUDP(in.ip()), bp.ExMAC, underlayAddrs(in.ip(), r.TunDst), bp.TunnelUDPPort)
		g, err := t.trace(ctx, backend, "br-ex", "the Geneve packet from "+in.name+" on the uplink", gflow)
		if err != nil {
			return "", err
		}
		if g.Dropped() {
			return dropVerdict(name, g), nil
		}
		bflow := fmt.Sprintf("in_port=%d,tun_id=%d,%s,%s,%s,nw_ttl=63,%s",
			bp.IntTunnel, flows.VNIService, tunAddrs(in.ip(), r.TunDst), l3(proto, client.Addr()), addrs(client.Addr(), epAddr.Addr()), l4(proto, client.Port(), epAddr.Port(), "syn"))
		b, err := t.trace(ctx, backend, "br-int", "the decapsulated packet to the endpoint", bflow, "trk,new")
		if err != nil {
			return "", err
		}
		if b.Dropped() {
			return dropVerdict(name, b), nil
		}
		if bl, _ := b.Last(); bl.Table != flows.IntPodIngressCT {
			return fmt.Sprintf("unexpected: on %s the packet ended in %s %s (datapath actions %s)", name, bl.Bridge, bl.Table.Name(bl.Bridge), b.Final), nil
		}
	} else if last.Bridge != flows.BrInt || last.Table != flows.IntPodIngressCT {
		return fmt.Sprintf("unexpected: on %s the packet ended in %s %s (datapath actions %s)", in.name, last.Bridge, last.Table.Name(last.Bridge), r.Final), nil
	}
	pod := backend.names.podByIP[epAddr.Addr().String()]
	fmt.Fprintf(t.out, "   => delivered to %s (the pod sees the client %s)\n", backend.names.endpoint(svc, ep), client)

	// The reply: from the pod's port, with the connection's ZonePod state.
	var pr *agent.PodReport
	for i := range backend.rep.Pods {
		for _, ip := range backend.rep.Pods[i].IPs {
			if ip == epAddr.Addr().String() {
				pr = &backend.rep.Pods[i]
			}
		}
	}
	if pr == nil {
		return fmt.Sprintf("delivered to %s; reply not traced: %s has no pod port with %s", in.names.endpoint(svc, ep), backend.name, epAddr.Addr()), nil
	}
	gwMAC := gatewayMAC(backend, epAddr.Addr())
	mark, label, ctn := flows.OriginTunnel.CTMarkValue(), ipLabel(in.ip()), []string{"trk,est,rpl"}
	if backend == in {
		mark, label, ctn = flows.OriginBrEx.CTMarkValue(), macLabel(t.clientMAC), []string{"trk,est,rpl", "trk,est,rpl"}
	}
	rflow := fmt.Sprintf("in_port=%d,%s,dl_src=%s,dl_dst=%s,%s,nw_ttl=64,%s,ct_mark=%#x,ct_label=%s",
		pr.OFPort, l3(proto, client.Addr()), pr.MAC, gwMAC, addrs(epAddr.Addr(), client.Addr()), l4(proto, epAddr.Port(), client.Port(), "syn|ack"), mark, label)
	rr, err := t.trace(ctx, backend, "br-int", "the reply of "+pod, rflow, ctn...)
	if err != nil {
		return "", err
	}
	if rr.Dropped() {
		return dropVerdict(backend.name, rr), nil
	}
	if backend != in {
		rl, _ := rr.Last()
		if rr.TunDst != in.ip() || rl.Table != flows.IntPodEgressCT {
			return fmt.Sprintf("unexpected: %s sends the reply to %s (datapath actions %s), not back to the ingress node %s", backend.name, rr.TunDst, rr.Final, in.name), nil
		}
		fmt.Fprintf(t.out, "   => Geneve (VNI %s) back to the ingress node %s\n", rr.VNI, in.names.node(in.ip()))
		iflow := fmt.Sprintf("in_port=%d,tun_id=%d,%s,%s,%s,nw_ttl=63,%s,ct_label=%s",
			p.IntTunnel, flows.VNIServiceReply, tunAddrs(backend.ip(), in.ip()), l3(proto, client.Addr()), addrs(epAddr.Addr(), client.Addr()), l4(proto, epAddr.Port(), client.Port(), "syn|ack"), macLabel(t.clientMAC))
		if rr, err = t.trace(ctx, in, "br-int", "the reply from "+backend.name, iflow, "trk,est,rpl"); err != nil {
			return "", err
		}
		if rr.Dropped() {
			return dropVerdict(in.name, rr), nil
		}
	}
	rl, _ := rr.Last()
	if rl.Bridge != flows.BrEx || rl.Table != flows.ExServiceReply {
		return fmt.Sprintf("unexpected: on %s the reply ended in %s %s (datapath actions %s)", in.name, rl.Bridge, rl.Table.Name(rl.Bridge), rr.Final), nil
	}
	zone := "ZoneService"
	if !client.Addr().Is4() {
		zone = "ZoneService6"
	}
	fmt.Fprintf(t.out, "   => ct(zone=%s,nat) un-DNATs the reply: %s -> %s becomes %s -> %s; out of the uplink to the client's MAC (ct_label)\n",
		zone, ep, client, entry, client)
	via := in.name
	if backend != in {
		via = in.name + " -> " + backend.name + " -> " + in.name
	}
	return fmt.Sprintf("delivered: %s (%s) reaches %s with the client address kept, and the reply returns from %s (path %s)",
		conn, svc, in.names.endpoint(svc, ep), entry, via), nil
}

// gatewayMAC is the MAC br-int answers for the pod gateway of v's node (the pods' next hop) in
// the family of pod: that of the gateway of the node's first pod CIDR of that family.
func gatewayMAC(v *nodeView, pod netip.Addr) string {
	for _, n := range v.rep.Nodes {
		if n.Name != v.name {
			continue
		}
		for _, c := range n.PodCIDRs {
			if pfx, err := netip.ParsePrefix(c); err == nil && pfx.Addr().Is4() == pod.Is4() {
				return flows.GatewayMAC(flows.GatewayIP(pfx)).String()
			}
		}
	}
	return "0a:58:00:00:00:01"
}
