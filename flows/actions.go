package flows

import (
	"encoding"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/digitalocean/go-openvswitch/ovs"
)

// CT is the conntrack action (ovs-actions(7) "The ct action"), typed so that no flow string is
// assembled outside the renderer. It implements ovs.Action.
type CT struct {
	// Commit commits the connection (required for NAT and for exec).
	Commit bool
	// Zone is the conntrack zone (ZoneService, ZonePod).
	Zone uint16
	// Table, when set, recirculates the packet to that table after conntrack (ct(table=N));
	// nil continues in the current action list without recirculation.
	Table *Table
	// NAT, when set, applies NAT: an empty NAT{} is "nat" (apply the connection's existing
	// translation), NAT{Dst: ip:port} installs a DNAT on commit.
	NAT *NAT
	// Exec are the actions run on the committed connection (set ct_mark / ct_label).
	Exec []ovs.Action
}

// NAT is the nat(...) argument of CT.
type NAT struct {
	// Dst is the DNAT target; zero means "nat" without arguments.
	Dst netip.AddrPort
	// Src is the SNAT address (nat(src=IP), ovs-actions(7): the source port is kept when it is
	// free); only with a zero Dst.
	Src netip.Addr
}

// MarshalText implements encoding.TextMarshaler.
func (c CT) MarshalText() ([]byte, error) { return c.AppendText(make([]byte, 0, 96)) }

// AppendText implements encoding.TextAppender: MarshalText appended to b.
func (c CT) AppendText(b []byte) ([]byte, error) {
	// Appended by hand, not with fmt: a full sync renders one of these per Service bucket.
	b = append(b, "ct("...)
	if c.Commit {
		b = append(b, "commit,"...)
	}
	if c.Table != nil {
		b = append(b, "table="...)
		b = strconv.AppendInt(b, int64(*c.Table), 10)
		b = append(b, ',')
	}
	b = append(b, "zone="...)
	b = strconv.AppendUint(b, uint64(c.Zone), 10)
	if c.NAT != nil {
		switch {
		case c.NAT.Src.Is4() && !c.NAT.Dst.IsValid():
			if !c.Commit {
				return nil, fmt.Errorf("ct: nat(src=...) requires commit")
			}
			b = append(b, ",nat(src="...)
			b = c.NAT.Src.AppendTo(b)
			b = append(b, ')')
		case !c.NAT.Dst.IsValid():
			b = append(b, ",nat"...)
		case c.NAT.Dst.Addr().Is4():
			b = append(b, ",nat(dst="...)
			b = c.NAT.Dst.Addr().AppendTo(b)
			b = append(b, ':')
			b = strconv.AppendUint(b, uint64(c.NAT.Dst.Port()), 10)
			b = append(b, ')')
		default:
			b = append(b, ",nat(dst=["...)
			b = c.NAT.Dst.Addr().AppendTo(b)
			b = append(b, "]:"...)
			b = strconv.AppendUint(b, uint64(c.NAT.Dst.Port()), 10)
			b = append(b, ')')
		}
		if c.NAT.Dst.IsValid() && !c.Commit {
			return nil, fmt.Errorf("ct: nat(dst=...) requires commit")
		}
	}
	if len(c.Exec) > 0 {
		if !c.Commit {
			return nil, fmt.Errorf("ct: exec requires commit")
		}
		b = append(b, ",exec("...)
		var err error
		if b, err = appendActions(b, c.Exec); err != nil {
			return nil, err
		}
		b = append(b, ')')
	}
	return append(b, ')'), nil
}

// move is "move:SRC->DST" (ovs-actions(7) "The move action"), rendered as go-openvswitch's
// ovs.Move renders it but by appending, not with fmt: every Service bucket's ct(exec(...)) has
// one.
type move struct{ src, dst string }

// Move copies the bits of field src into dst (NXM names with an optional [start..end] range).
func Move(src, dst string) ovs.Action { return move{src, dst} }

// MarshalText implements encoding.TextMarshaler.
func (m move) MarshalText() ([]byte, error) {
	return m.AppendText(make([]byte, 0, len("move:->")+len(m.src)+len(m.dst)))
}

// AppendText implements encoding.TextAppender.
func (m move) AppendText(b []byte) ([]byte, error) {
	if m.src == "" || m.dst == "" {
		return nil, fmt.Errorf("move: empty field")
	}
	b = append(b, "move:"...)
	b = append(b, m.src...)
	b = append(b, "->"...)
	return append(b, m.dst...), nil
}

// appendActions appends the actions' text to b, comma-separated, without an intermediate copy
// for an action that can append itself.
func appendActions(b []byte, acts []ovs.Action) ([]byte, error) {
	for i, a := range acts {
		if i > 0 {
			b = append(b, ',')
		}
		if ap, ok := a.(encoding.TextAppender); ok {
			var err error
			if b, err = ap.AppendText(b); err != nil {
				return nil, err
			}
			continue
		}
		t, err := a.MarshalText()
		if err != nil {
			return nil, err
		}
		b = append(b, t...)
	}
	return b, nil
}

// GoString implements fmt.GoStringer.
func (m move) GoString() string { return fmt.Sprintf("flows.Move(%q, %q)", m.src, m.dst) }

// GoString implements fmt.GoStringer.
func (c CT) GoString() string { t, _ := c.MarshalText(); return fmt.Sprintf("flows.CT(%s)", t) }

// tableRef returns a pointer to a copy of t (for CT.Table).
func tableRef(t Table) *Table { return &t }

// groupAction is "group:N" (ovs-actions(7) "The group action").
type groupAction uint32

// Group sends the packet to OpenFlow group id.
func Group(id uint32) ovs.Action { return groupAction(id) }

func (g groupAction) MarshalText() ([]byte, error) {
	return []byte(fmt.Sprintf("group:%d", uint32(g))), nil
}
func (g groupAction) GoString() string { return fmt.Sprintf("flows.Group(%d)", uint32(g)) }

// gotoTable is "goto_table:N" (OpenFlow 1.1+ instruction).
type gotoTable Table

// Goto continues processing in table t.
func Goto(t Table) ovs.Action { return gotoTable(t) }

func (g gotoTable) MarshalText() ([]byte, error) {
	return []byte(fmt.Sprintf("goto_table:%d", int(g))), nil
}
func (g gotoTable) GoString() string { return fmt.Sprintf("flows.Goto(%d)", int(g)) }

// rawAction is a fixed action keyword the library lacks (e.g. "LOCAL", "IN_PORT").
type rawAction string

func (r rawAction) MarshalText() ([]byte, error) { return []byte(r), nil }
func (r rawAction) GoString() string             { return fmt.Sprintf("flows.rawAction(%q)", string(r)) }

// Actions and matches of the pipeline with their field names in one place.
var (
	outputLocal  ovs.Action = rawAction("LOCAL")
	outputInPort ovs.Action = rawAction("IN_PORT")
)

// ResetLearn is the learn action (ovs-actions(7) "The learn action") of the collision reset: run
// on a TCP SYN that the backend delivers to a local pod's closed port 0 instead of its Service
// port, it learns the flow that carries the pod's answer (the kernel's RST to a SYN for a port
// without a socket) back the way the SYN came, as a reply of the SYN's own connection:
//
//	table=IntClassifier, priority=prioTunnelPeer, hard_timeout=HardTimeout, cookie=KindLearnedReset
//	tcp, in_port=<the pod's port (RegOutPort)>, nw_src=<SYN's nw_dst>, nw_dst=<SYN's nw_src>,
//	tp_src=0, tp_dst=<SYN's tp_src>
//	actions: tp_src=<SYN's tp_dst>, tun_dst=<SYN's tun_src>, tun_id=VNIServiceReply,
//	         output:<SYN's in_port> (the Geneve port, or the patch port to br-ex)
//
// It must run before the SYN's tp_dst is rewritten.
type ResetLearn struct {
	// HardTimeout bounds the learned flow's life, in seconds.
	HardTimeout int
}

// MarshalText implements encoding.TextMarshaler.
func (l ResetLearn) MarshalText() ([]byte, error) {
	if l.HardTimeout <= 0 {
		return nil, fmt.Errorf("learn: hard timeout %d s must be positive", l.HardTimeout)
	}
	spec := []string{
		fmt.Sprintf("table=%d", int(IntClassifier)),
		fmt.Sprintf("priority=%d", prioTunnelPeer),
		fmt.Sprintf("hard_timeout=%d", l.HardTimeout),
		fmt.Sprintf("cookie=%s", NewCookie(KindLearnedReset, 0)),
		"eth_type=0x800", "nw_proto=6",
		"NXM_OF_IN_PORT[]=" + fmt.Sprintf("NXM_NX_REG%d[0..15]", RegOutPort.reg),
		"NXM_OF_IP_SRC[]=NXM_OF_IP_DST[]",
		"NXM_OF_IP_DST[]=NXM_OF_IP_SRC[]",
		"NXM_OF_TCP_SRC[]=0",
		"NXM_OF_TCP_DST[]=NXM_OF_TCP_SRC[]",
		"load:NXM_OF_TCP_DST[]->NXM_OF_TCP_SRC[]",
		"load:NXM_NX_TUN_IPV4_SRC[]->NXM_NX_TUN_IPV4_DST[]",
		fmt.Sprintf("load:%#x->NXM_NX_TUN_ID[]", VNIServiceReply),
		"output:NXM_OF_IN_PORT[]",
	}
	return []byte("learn(" + strings.Join(spec, ",") + ")"), nil
}

// GoString implements ovs.Action.
func (l ResetLearn) GoString() string {
	return fmt.Sprintf("flows.ResetLearn{HardTimeout: %d}", l.HardTimeout)
}
