package flows

import (
	"fmt"
	"net/netip"
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
}

// MarshalText implements encoding.TextMarshaler.
func (c CT) MarshalText() ([]byte, error) {
	var args []string
	if c.Commit {
		args = append(args, "commit")
	}
	if c.Table != nil {
		args = append(args, fmt.Sprintf("table=%d", int(*c.Table)))
	}
	args = append(args, fmt.Sprintf("zone=%d", c.Zone))
	if c.NAT != nil {
		switch {
		case !c.NAT.Dst.IsValid():
			args = append(args, "nat")
		case c.NAT.Dst.Addr().Is4():
			args = append(args, fmt.Sprintf("nat(dst=%s:%d)", c.NAT.Dst.Addr(), c.NAT.Dst.Port()))
		default:
			args = append(args, fmt.Sprintf("nat(dst=[%s]:%d)", c.NAT.Dst.Addr(), c.NAT.Dst.Port()))
		}
		if c.NAT.Dst.IsValid() && !c.Commit {
			return nil, fmt.Errorf("ct: nat(dst=...) requires commit")
		}
	}
	if len(c.Exec) > 0 {
		if !c.Commit {
			return nil, fmt.Errorf("ct: exec requires commit")
		}
		ex := make([]string, 0, len(c.Exec))
		for _, a := range c.Exec {
			t, err := a.MarshalText()
			if err != nil {
				return nil, err
			}
			ex = append(ex, string(t))
		}
		args = append(args, "exec("+strings.Join(ex, ",")+")")
	}
	return []byte("ct(" + strings.Join(args, ",") + ")"), nil
}

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
