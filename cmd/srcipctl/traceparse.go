package main

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// hit is one table an ofproto/trace output shows the packet in: the bridge, the table, the
// flow's priority and cookie, and the OpenFlow actions printed under it.
type hit struct {
	bridge   flows.Bridge
	table    flows.Table
	priority int
	cookie   flows.Cookie
	match    string
	actions  []string
	// bucket is the bucket chosen by a group action of this flow (-1: none); group its id.
	bucket int64
	group  uint32
}

// traceResult is a parsed ofproto/trace output.
type traceResult struct {
	raw  string
	hits []hit
	// final is the last "Datapath actions:" line (that of the last recirculation).
	final string
	// tunDst is the last set_field:IP->tun_dst, vni the last set_field:N->tun_id.
	tunDst string
	vni    string
	// natDst is the last nat(dst=IP:PORT) of a ct action.
	natDst string
}

var (
	traceBridgeRE  = regexp.MustCompile(`^bridge\("([^"]+)"\)`)
	traceTableRE   = regexp.MustCompile(`^\s*(\d+)\. (?:(.*?), )?priority (\d+)(?:, cookie (0x[0-9a-f]+))?$`)
	traceBucketRE  = regexp.MustCompile(`-> using bucket (\d+)`)
	traceTunDstRE  = regexp.MustCompile(`set_field:([0-9.]+)->tun_dst`)
	traceVNIRE     = regexp.MustCompile(`set_field:(0x[0-9a-f]+|\d+)->tun_id`)
	traceNATRE     = regexp.MustCompile(`nat\(dst=([0-9.]+:\d+)\)`)
	traceGroupRE   = regexp.MustCompile(`^group:(\d+)`)
	traceResumeRE  = regexp.MustCompile(`^Resuming from table (\d+)`)
	traceCTTableRE = regexp.MustCompile(`^ct\(.*table=(\d+)`)
	// tnl_push(...,ipv4(src=A,dst=B,...),...,geneve(vni=0xN)...) in datapath actions.
	tnlDstRE = regexp.MustCompile(`tnl_push\(.*?ipv4\(src=[0-9.]+,dst=([0-9.]+)`)
	tnlVNIRE = regexp.MustCompile(`geneve\(vni=(0x[0-9a-f]+)`)
)

// parseTrace parses ofproto/trace output; bridge names are mapped with bridges (OVS name ->
// flows.Bridge; unknown bridges are skipped).
func parseTrace(out string, bridges map[string]flows.Bridge) traceResult {
	r := traceResult{raw: out}
	var cur flows.Bridge
	var last *hit
	// After a recirculation ofproto/trace names the bridge the trace started on, whichever bridge
	// issued the ct(table=N): resumeOn remembers that one per table.
	resumeOn := map[string]flows.Bridge{}
	// outer: after "-> output to native tunnel" ofproto/trace follows the encapsulated (outer)
	// packet through the underlay bridge (br-ex's NORMAL, ...): not the packet's own path, up to
	// the end of the section.
	outer := false
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "-> output to native tunnel") {
			outer = true
		}
		if strings.HasPrefix(l, "Final flow:") || strings.HasPrefix(l, "Datapath actions:") || strings.HasPrefix(l, "====") {
			outer = false
		}
		if outer {
			continue
		}
		if m := traceBridgeRE.FindStringSubmatch(t); m != nil {
			cur = bridges[m[1]]
			last = nil
			continue
		}
		if m := traceResumeRE.FindStringSubmatch(t); m != nil {
			if b, ok := resumeOn[m[1]]; ok {
				cur = b
			}
			continue
		}
		if m := traceCTTableRE.FindStringSubmatch(t); m != nil && last != nil {
			resumeOn[m[1]] = cur
		}
		if strings.HasPrefix(t, "Datapath actions:") {
			r.final = strings.TrimSpace(strings.TrimPrefix(t, "Datapath actions:"))
			continue
		}
		if m := traceTableRE.FindStringSubmatch(l); m != nil && cur != 0 {
			id, _ := strconv.Atoi(m[1])
			prio, _ := strconv.Atoi(m[3])
			var c uint64
			if m[4] != "" {
				c, _ = strconv.ParseUint(strings.TrimPrefix(m[4], "0x"), 16, 64)
			}
			r.hits = append(r.hits, hit{bridge: cur, table: flows.Table(id), priority: prio, cookie: flows.Cookie(c), match: m[2], bucket: -1})
			last = &r.hits[len(r.hits)-1]
			continue
		}
		if m := traceBucketRE.FindStringSubmatch(t); m != nil && last != nil {
			last.bucket, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if m := traceTunDstRE.FindStringSubmatch(t); m != nil {
			r.tunDst = m[1]
		}
		if m := traceVNIRE.FindStringSubmatch(t); m != nil {
			r.vni = m[1]
		}
		if m := traceNATRE.FindStringSubmatch(t); m != nil {
			r.natDst = m[1]
		}
		if last != nil && strings.HasPrefix(l, "    ") && t != "" && !strings.HasPrefix(t, "->") {
			last.actions = append(last.actions, t)
			if m := traceGroupRE.FindStringSubmatch(t); m != nil {
				id, _ := strconv.ParseUint(m[1], 10, 32)
				last.group = uint32(id)
			}
		}
	}
	// The datapath's tunnel header is the truth (a tun_dst moved from ct_label shows no
	// set_field).
	if m := tnlDstRE.FindStringSubmatch(r.final); m != nil {
		r.tunDst = m[1]
	}
	if m := tnlVNIRE.FindStringSubmatch(r.final); m != nil {
		r.vni = m[1]
	}
	return r
}

// lastHit returns the last table the packet was in (zero hit: none).
func (r traceResult) lastHit() (hit, bool) {
	if len(r.hits) == 0 {
		return hit{}, false
	}
	return r.hits[len(r.hits)-1], true
}

// dropped reports whether the final datapath actions drop the packet.
func (r traceResult) dropped() bool { return r.final == "drop" || r.final == "" }

// has reports whether one of h's actions contains s.
func (h hit) has(s string) bool {
	for _, a := range h.actions {
		if strings.Contains(a, s) {
			return true
		}
	}
	return false
}
