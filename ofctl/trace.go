package ofctl

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// The one reader of what `ovs-appctl ofproto/trace` prints (OpenFlow.Trace; ovs-vswitchd(8)
// "ofproto/trace"), as OVS 3.1 prints it: per bridge("NAME") section, one line per flow the
// packet matches ("41. MATCH, priority 100, cookie 0x5c10..."), the OpenFlow actions of that flow
// indented under it with notes ("-> using bucket N"), and per recirculation a "Datapath actions:"
// line. srcipctl trace and the ofproto/trace tests (test/trace) read traces through it.

// TraceStep is one flow of the pipeline a traced packet matched.
type TraceStep struct {
	// Bridge is the bridge of the bridge("NAME") section, named through the map ParseTrace was
	// given. After a recirculation ofproto/trace names the bridge the trace started on; the step
	// is then on the bridge whose ct(table=N) resumed it.
	Bridge flows.Bridge
	// Table and Priority are the flow's table number and priority; Cookie its cookie (0 when the
	// trace prints none).
	Table    flows.Table
	Priority int
	Cookie   flows.Cookie
	// Match is the flow's match as printed ("" for a flow without match fields).
	Match string
	// Actions are the OpenFlow actions printed under the flow, one per line as printed (ovs-actions(7)
	// syntax), without the "->" notes; those of a chosen group bucket included.
	Actions []string
	// Group is N of a group:N action of the flow (0: none); Bucket the bucket ofproto/trace chose
	// in it ("-> using bucket N"; -1: none).
	Group  uint32
	Bucket int64
}

// Has reports whether one of the step's actions contains s.
func (s TraceStep) Has(sub string) bool {
	for _, a := range s.Actions {
		if strings.Contains(a, sub) {
			return true
		}
	}
	return false
}

// Trace is a parsed ofproto/trace output.
type Trace struct {
	// Raw is the output as read.
	Raw string
	// Steps are the flows the packet matched on the named bridges, in order. After
	// "-> output to native tunnel" ofproto/trace follows the encapsulated (outer) packet through
	// the underlay bridge up to the end of that section: those flows are no step of the packet.
	Steps []TraceStep
	// DatapathActions are the "Datapath actions:" lines, one per recirculation; Final is the last.
	DatapathActions []string
	Final           string
	// TunDst and VNI are the tunnel destination (IPv4, or IPv6 over an IPv6 underlay) and VNI (as printed: 0x2, or decimal) the
	// packet leaves with: those of the datapath's tnl_push when there is one, else the last
	// set_field to tun_dst and tun_id. NATDst is the last nat(dst=IP:PORT) of a ct action
	// ([IPv6]:PORT for an IPv6 endpoint).
	TunDst, VNI, NATDst string
}

// DefaultTraceBridges names the bridges of the node: br-ex and br-int.
var DefaultTraceBridges = map[string]flows.Bridge{"br-ex": flows.BrEx, "br-int": flows.BrInt}

// Last returns the last step of the packet (false: none).
func (t Trace) Last() (TraceStep, bool) {
	if len(t.Steps) == 0 {
		return TraceStep{}, false
	}
	return t.Steps[len(t.Steps)-1], true
}

// Dropped reports whether the final datapath actions drop the packet ("drop", or none).
func (t Trace) Dropped() bool { return t.Final == "drop" || t.Final == "" }

var (
	traceBridgeRE  = regexp.MustCompile(`^bridge\("([^"]+)"\)`)
	traceTableRE   = regexp.MustCompile(`^\s*(\d+)\. (?:(.*?), )?priority (\d+)(?:, cookie (0x[0-9a-f]+))?$`)
	traceBucketRE  = regexp.MustCompile(`-> using bucket (\d+)`)
	traceTunDstRE  = regexp.MustCompile(`set_field:([0-9a-f:.]+)->tun_(?:ipv6_)?dst`)
	traceVNIRE     = regexp.MustCompile(`set_field:(0x[0-9a-f]+|\d+)->tun_id`)
	traceNATRE     = regexp.MustCompile(`nat\(dst=([0-9.]+:\d+|\[[0-9a-fA-F:.]+\]:\d+)\)`)
	traceGroupRE   = regexp.MustCompile(`^group:(\d+)`)
	traceResumeRE  = regexp.MustCompile(`^Resuming from table (\d+)`)
	traceCTTableRE = regexp.MustCompile(`^ct\(.*table=(\d+)`)
	// tnl_push(...,ipv4(src=A,dst=B,...),...,geneve(vni=0xN)...) in datapath actions (ipv6(...)
	// over an IPv6 underlay).
	tnlDstRE = regexp.MustCompile(`tnl_push\(.*?ipv[46]\(src=[0-9a-f:.]+,dst=([0-9a-f:.]+)`)
	tnlVNIRE = regexp.MustCompile(`geneve\(vni=(0x[0-9a-f]+)`)
)

// ParseTrace parses an ofproto/trace output. bridges names the OVS bridges (nil:
// DefaultTraceBridges); the flows of other bridges are no Steps. It never fails: what it does not
// recognise it skips.
func ParseTrace(out string, bridges map[string]flows.Bridge) Trace {
	if bridges == nil {
		bridges = DefaultTraceBridges
	}
	r := Trace{Raw: out}
	var cur flows.Bridge
	var last *TraceStep
	// After a recirculation ofproto/trace names the bridge the trace started on, whichever bridge
	// issued the ct(table=N): resumeOn remembers that one per table.
	resumeOn := map[string]flows.Bridge{}
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
		if a, ok := strings.CutPrefix(t, "Datapath actions:"); ok {
			r.Final = strings.TrimSpace(a)
			r.DatapathActions = append(r.DatapathActions, r.Final)
			continue
		}
		if m := traceTableRE.FindStringSubmatch(l); m != nil && cur != 0 {
			id, _ := strconv.Atoi(m[1])
			prio, _ := strconv.Atoi(m[3])
			var c uint64
			if m[4] != "" {
				c, _ = strconv.ParseUint(strings.TrimPrefix(m[4], "0x"), 16, 64)
			}
			r.Steps = append(r.Steps, TraceStep{Bridge: cur, Table: flows.Table(id), Priority: prio, Cookie: flows.Cookie(c), Match: m[2], Bucket: -1})
			last = &r.Steps[len(r.Steps)-1]
			continue
		}
		if m := traceBucketRE.FindStringSubmatch(t); m != nil && last != nil {
			last.Bucket, _ = strconv.ParseInt(m[1], 10, 64)
		}
		if m := traceTunDstRE.FindStringSubmatch(t); m != nil {
			r.TunDst = m[1]
		}
		if m := traceVNIRE.FindStringSubmatch(t); m != nil {
			r.VNI = m[1]
		}
		if m := traceNATRE.FindStringSubmatch(t); m != nil {
			r.NATDst = m[1]
		}
		if last != nil && strings.HasPrefix(l, "    ") && t != "" && !strings.HasPrefix(t, "->") {
			last.Actions = append(last.Actions, t)
			if m := traceGroupRE.FindStringSubmatch(t); m != nil {
				id, _ := strconv.ParseUint(m[1], 10, 32)
				last.Group = uint32(id)
			}
		}
	}
	// The datapath's tunnel header is the truth (a tun_dst moved from ct_label shows no
	// set_field).
	if m := tnlDstRE.FindStringSubmatch(r.Final); m != nil {
		r.TunDst = m[1]
	}
	if m := tnlVNIRE.FindStringSubmatch(r.Final); m != nil {
		r.VNI = m[1]
	}
	return r
}
