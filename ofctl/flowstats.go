package ofctl

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/ovs-srcip/ovs-srcip/flows"
)

// FlowStats returns the place (table, priority), cookie and counters of every flow of the bridge
// whose cookie has the agent's owner byte (`dump-flows --no-names TARGET
// cookie=0x5c00000000000000/0xff00000000000000`). Only the tokens cookie=, table=, n_packets=,
// n_bytes=, priority= and the start of actions= are read; table=0 and priority=32768, which
// ovs-ofctl leaves out, are the defaults. Errors: the ovs-ofctl failure (*Error).
func (o *OpenFlow) FlowStats(ctx context.Context) ([]flows.FlowStat, error) {
	var out []flows.FlowStat
	err := run(ctx, o.ofctl("--no-names", "dump-flows", o.Target, ownedCookieFilter), nil,
		func(r io.Reader) error {
			var err error
			out, err = scanFlowStats(r)
			return err
		})
	return out, err
}

// scanFlowStats parses dump-flows lines into FlowStats (lines without a cookie are skipped).
func scanFlowStats(r io.Reader) ([]flows.FlowStat, error) {
	var out []flows.FlowStat
	s := newScanner(r)
	for s.Scan() {
		line := s.Bytes()
		head, actions, ok := bytes.Cut(line, []byte(" actions="))
		if !ok {
			continue
		}
		fs := flows.FlowStat{Priority: 32768, ToGroup: bytes.HasPrefix(actions, []byte("group:"))}
		seen := false
		for _, f := range bytes.FieldsFunc(head, func(r rune) bool { return r == ',' || r == ' ' }) {
			k, v, ok := bytes.Cut(f, []byte("="))
			if !ok {
				continue
			}
			switch string(k) {
			case "cookie":
				c, ok := parseHex(bytes.TrimPrefix(v, []byte("0x")))
				if !ok {
					return nil, fmt.Errorf("bad cookie in dump-flows line %q", line)
				}
				fs.Cookie, seen = flows.Cookie(c), true
			case "table":
				n, err := strconv.Atoi(string(v))
				if err != nil {
					return nil, fmt.Errorf("bad table in dump-flows line %q", line)
				}
				fs.Table = flows.Table(n)
			case "priority":
				n, err := strconv.Atoi(string(v))
				if err != nil {
					return nil, fmt.Errorf("bad priority in dump-flows line %q", line)
				}
				fs.Priority = n
			case "n_packets":
				fs.Packets, _ = strconv.ParseUint(string(v), 10, 64)
			case "n_bytes":
				fs.Bytes, _ = strconv.ParseUint(string(v), 10, 64)
			}
		}
		if seen && fs.Cookie.Owned() {
			out = append(out, fs)
		}
	}
	return out, s.Err()
}
