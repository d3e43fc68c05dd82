package ofctl

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// ipProto returns the IP protocol number of a Service protocol (TCP 6, UDP 17).
func ipProto(p flows.Protocol) (uint8, error) {
	switch p {
	case flows.TCP:
		return 6, nil
	case flows.UDP:
		return 17, nil
	}
	return 0, fmt.Errorf("protocol %q: want %s or %s", p, flows.TCP, flows.UDP)
}

// FlushConntrack deletes the conntrack entries that f selects (see flows.ConntrackFilter): those
// of zone f.Zone with protocol f.Protocol whose reply tuple has source f.ReplySrc, restricted to
// entries whose original destination is f.OrigDst when that is valid:
//
//	ovs-appctl -t CTL dpctl/flush-conntrack zone=Z 'ct_nw_dst=D,ct_nw_proto=P,ct_tp_dst=DP' \
//	    'ct_nw_src=IP,ct_nw_proto=P,ct_tp_src=PORT'
//
// or, with f.ReplyDst, those whose reply tuple has destination f.ReplyDst (reply tuple
// 'ct_nw_dst=IP,ct_nw_proto=P'). An error when f has both or neither.
//
// (ct_ipv6_dst and ct_ipv6_src for IPv6 tuples; both tuples must be of one family)
// with P the IP protocol number of f.Protocol (partial original and reply tuples,
// ovs-vswitchd(8) "dpctl/flush-conntrack"; an empty original tuple matches any). No matching
// entry is not an error. Checked against OVS 3.1's userspace datapath (see conntrack_test.go).
func (o *OpenFlow) FlushConntrack(ctx context.Context, f flows.ConntrackFilter) error {
	proto, err := ipProto(f.Protocol)
	if err != nil {
		return fmt.Errorf("flush conntrack: %w", err)
	}
	if f.ReplySrc.IsValid() == f.ReplyDst.IsValid() {
		return fmt.Errorf("flush conntrack: want a reply source or a reply destination, not both or neither (reply source %s, reply destination %s)", f.ReplySrc, f.ReplyDst)
	}
	replyAddr := f.ReplySrc.Addr()
	if f.ReplyDst.IsValid() {
		replyAddr = f.ReplyDst
	}
	v6 := replyAddr.Is6()
	if f.OrigDst.IsValid() && f.OrigDst.Addr().Is6() != v6 {
		return fmt.Errorf("flush conntrack: reply address %s and original destination %s are not addresses of one family", replyAddr, f.OrigDst)
	}
	src, dst := "ct_nw_src", "ct_nw_dst"
	if v6 {
		src, dst = "ct_ipv6_src", "ct_ipv6_dst"
	}
	ctl, err := o.appctlTarget()
	if err != nil {
		return err
	}
	orig := ""
	if f.OrigDst.IsValid() {
		orig = fmt.Sprintf("%s=%s,ct_nw_proto=%d,ct_tp_dst=%d", dst, f.OrigDst.Addr(), proto, f.OrigDst.Port())
	}
	rpl := fmt.Sprintf("%s=%s,ct_nw_proto=%d,ct_tp_src=%d", src, f.ReplySrc.Addr(), proto, f.ReplySrc.Port())
	if f.ReplyDst.IsValid() {
		rpl = fmt.Sprintf("%s=%s,ct_nw_proto=%d", dst, f.ReplyDst, proto)
	}
	argv := []string{o.appctl(), "-t", ctl, "dpctl/flush-conntrack", fmt.Sprintf("zone=%d", f.Zone), orig, rpl}
	if err := run(ctx, argv, nil, nil); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Flushed conntrack entries", "zone", f.Zone, "protocol", f.Protocol, "replySource", f.ReplySrc, "replyDestination", f.ReplyDst, "origDestination", f.OrigDst)
	return nil
}

// ConntrackDestinations counts the live connections of conntrack zone by original destination and
// protocol (TCP and UDP; `ovs-appctl dpctl/dump-conntrack zone=Z`). TCP entries in TIME_WAIT or
// CLOSED are not live and not counted.
func (o *OpenFlow) ConntrackDestinations(ctx context.Context, zone uint16) (map[flows.EntryPoint]int, error) {
	ctl, err := o.appctlTarget()
	if err != nil {
		return nil, err
	}
	out := map[flows.EntryPoint]int{}
	argv := []string{o.appctl(), "-t", ctl, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", zone)}
	err = run(ctx, argv, nil, func(r io.Reader) error { return scanConntrack(r, out) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ConntrackMax returns the maximum number of entries of the datapath's connection tracker
// (ovs-vswitchd(8) "dpctl/ct-get-maxconns"; the userspace datapath's default is 3,000,000).
func (o *OpenFlow) ConntrackMax(ctx context.Context) (int, error) {
	ctl, err := o.appctlTarget()
	if err != nil {
		return 0, err
	}
	out, err := o.output(ctx, []string{o.appctl(), "-t", ctl, "dpctl/ct-get-maxconns"})
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, fmt.Errorf("dpctl/ct-get-maxconns: %q: %w", out, err)
	}
	return n, nil
}

// SetConntrackZoneLimits sets the maximum number of entries of each zone of limits
// (ovs-vswitchd(8) "dpctl/ct-set-limits zone=Z,limit=N ..."; every limit must be positive, see
// DeleteConntrackZoneLimits). The limits live in ovs-vswitchd and are lost when it restarts: the
// agent sets them at every full sync that finds them different.
func (o *OpenFlow) SetConntrackZoneLimits(ctx context.Context, limits map[uint16]int) error {
	ctl, err := o.appctlTarget()
	if err != nil {
		return err
	}
	argv := []string{o.appctl(), "-t", ctl, "dpctl/ct-set-limits"}
	zones := slices.Sorted(maps.Keys(limits))
	for _, z := range zones {
		if limits[z] <= 0 {
			return fmt.Errorf("conntrack zone %d: limit %d is not positive", z, limits[z])
		}
		argv = append(argv, fmt.Sprintf("zone=%d,limit=%d", z, limits[z]))
	}
	if err := run(ctx, argv, nil, nil); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Set conntrack zone limits", "limits", limits)
	return nil
}

// DeleteConntrackZoneLimits lifts the limits of zones (ovs-vswitchd(8) "dpctl/ct-del-limits"):
// only the datapath's total bounds them again.
func (o *OpenFlow) DeleteConntrackZoneLimits(ctx context.Context, zones ...uint16) error {
	ctl, err := o.appctlTarget()
	if err != nil {
		return err
	}
	zs := make([]string, len(zones))
	for i, z := range zones {
		zs[i] = strconv.Itoa(int(z))
	}
	return run(ctx, []string{o.appctl(), "-t", ctl, "dpctl/ct-del-limits", "zone=" + strings.Join(zs, ",")}, nil, nil)
}

// ConntrackZoneLimits reads the limit and the entry count of each of zones
// (ovs-vswitchd(8) "dpctl/ct-get-limits zone=Z,..."); a zone without its own limit has Limit 0.
func (o *OpenFlow) ConntrackZoneLimits(ctx context.Context, zones ...uint16) (map[uint16]flows.ZoneLimit, error) {
	ctl, err := o.appctlTarget()
	if err != nil {
		return nil, err
	}
	zs := make([]string, len(zones))
	for i, z := range zones {
		zs[i] = strconv.Itoa(int(z))
	}
	out, err := o.output(ctx, []string{o.appctl(), "-t", ctl, "dpctl/ct-get-limits", "zone=" + strings.Join(zs, ",")})
	if err != nil {
		return nil, err
	}
	return parseZoneLimits(out)
}

// parseZoneLimits reads "zone=64256,limit=3,count=0" lines (the "default limit=" line is skipped).
func parseZoneLimits(out string) (map[uint16]flows.ZoneLimit, error) {
	res := map[uint16]flows.ZoneLimit{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "zone=") {
			continue
		}
		var z, lim, cnt int
		if _, err := fmt.Sscanf(l, "zone=%d,limit=%d,count=%d", &z, &lim, &cnt); err != nil {
			return nil, fmt.Errorf("dpctl/ct-get-limits: %q: %w", l, err)
		}
		res[uint16(z)] = flows.ZoneLimit{Limit: lim, Count: cnt}
	}
	return res, nil
}

func (o *OpenFlow) appctl() string {
	if o.AppctlPath != "" {
		return o.AppctlPath
	}
	return "ovs-appctl"
}

// scanConntrack parses dump-conntrack lines such as
//
//	tcp,orig=(src=198.51.100.10,dst=192.0.2.11,sport=40000,dport=30100),reply=(...),zone=64256,protoinfo=(state=ESTABLISHED)
//
// and counts the live ones by original destination.
func scanConntrack(r io.Reader, counts map[flows.EntryPoint]int) error {
	s := newScanner(r)
	for s.Scan() {
		line := s.Bytes()
		var proto flows.Protocol
		switch {
		case bytes.HasPrefix(line, []byte("tcp,")):
			proto = flows.TCP
		case bytes.HasPrefix(line, []byte("udp,")):
			proto = flows.UDP
		default:
			continue
		}
		if bytes.Contains(line, []byte("state=TIME_WAIT")) || bytes.Contains(line, []byte("state=CLOSED)")) {
			continue
		}
		orig, ok := tupleField(line, "orig=(")
		if !ok {
			return fmt.Errorf("bad dump-conntrack line %q", line)
		}
		dst, ok1 := tupleValue(orig, "dst=")
		dport, ok2 := tupleValue(orig, "dport=")
		if !ok1 || !ok2 {
			return fmt.Errorf("bad dump-conntrack line %q", line)
		}
		a, err := netip.ParseAddr(string(dst))
		if err != nil {
			return fmt.Errorf("bad dump-conntrack line %q: %w", line, err)
		}
		p, err := strconv.ParseUint(string(dport), 10, 16)
		if err != nil {
			return fmt.Errorf("bad dump-conntrack line %q: %w", line, err)
		}
		counts[flows.EntryPoint{Protocol: proto, Addr: netip.AddrPortFrom(a, uint16(p))}]++
	}
	return s.Err()
}

// tupleField returns the text between prefix (ending in "(") and the next ")".
func tupleField(line []byte, prefix string) ([]byte, bool) {
	i := bytes.Index(line, []byte(prefix))
	if i < 0 {
		return nil, false
	}
	rest := line[i+len(prefix):]
	j := bytes.IndexByte(rest, ')')
	if j < 0 {
		return nil, false
	}
	return rest[:j], true
}

// tupleValue returns the value of key ("dst=") in a comma-separated tuple.
func tupleValue(tuple []byte, key string) ([]byte, bool) {
	for _, f := range bytes.Split(tuple, []byte(",")) {
		if v, ok := bytes.CutPrefix(f, []byte(key)); ok {
			return v, true
		}
	}
	return nil, false
}
