package ofctl

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
)

// GroupStats is one group of `ovs-ofctl -O OpenFlow15 dump-group-stats` as OVS 3.1 prints it
// (ovs-ofctl(8) "dump-group-stats"; OpenFlow 1.5 ofp_group_stats and ofp_bucket_counter):
//
//	group_id=1546854295,duration=1.561s,ref_count=1,packet_count=3,byte_count=222,bucket0:packet_count=2,byte_count=148,bucket1:packet_count=1,byte_count=74
//
// The bucket counters are in the order of the group's buckets (bucketN is the N-th bucket, not
// bucket_id N): GroupBuckets gives the bucket ids in that order.
type GroupStats struct {
	ID uint32
	// Packets and Bytes are the group's packet_count and byte_count: the packets that were
	// sent to the group since it was added (for a Service port's group, the first packet of each
	// new connection).
	Packets, Bytes uint64
	// Buckets are the bucket counters by position.
	Buckets []BucketCounter
}

// BucketCounter is one bucket's packet_count and byte_count.
type BucketCounter struct{ Packets, Bytes uint64 }

// GroupBucket is one bucket of a group description (dump-groups): its bucket_id and, when its
// actions hold a ct(...,nat(dst=ADDR)), ADDR (ip:port, as OVS prints it; "" without one).
type GroupBucket struct {
	ID     uint32
	NATDst string
}

// ParseGroupStats parses one dump-group-stats line; false for a line that is no group (the reply
// header). Errors: a group id or a counter that does not parse.
func ParseGroupStats(line string) (GroupStats, bool, error) {
	b := bytes.TrimLeft([]byte(line), " ")
	rest, ok := bytes.CutPrefix(b, groupToken)
	if !ok {
		return GroupStats{}, false, nil
	}
	id, n := parseDecimal(rest)
	if n == 0 || id >= 1<<32 || (n < len(rest) && rest[n] != ',') {
		return GroupStats{}, true, fmt.Errorf("bad group id in dump-group-stats line %q", line)
	}
	g := GroupStats{ID: uint32(id)}
	head := rest
	if i := bytes.Index(rest, []byte(",bucket0:")); i >= 0 {
		head = rest[:i]
	}
	var err error
	if g.Packets, g.Bytes, err = counters(head, line); err != nil {
		return GroupStats{}, true, err
	}
	for k := 0; ; k++ {
		tok := []byte(",bucket" + strconv.Itoa(k) + ":")
		i := bytes.Index(rest, tok)
		if i < 0 {
			break
		}
		part := rest[i+len(tok):]
		if j := bytes.Index(part, []byte(",bucket"+strconv.Itoa(k+1)+":")); j >= 0 {
			part = part[:j]
		}
		var c BucketCounter
		if c.Packets, c.Bytes, err = counters(part, line); err != nil {
			return GroupStats{}, true, err
		}
		g.Buckets = append(g.Buckets, c)
	}
	return g, true, nil
}

// counters reads packet_count= and byte_count= of part.
func counters(part []byte, line string) (uint64, uint64, error) {
	var out [2]uint64
	for i, key := range []string{"packet_count=", "byte_count="} {
		v, ok := dumpField(part, []byte(key))
		if !ok {
			return 0, 0, fmt.Errorf("no %s in dump-group-stats line %q", key, line)
		}
		n, m := parseDecimal(v)
		if m == 0 || m != len(v) {
			return 0, 0, fmt.Errorf("bad %s%s in dump-group-stats line %q", key, v, line)
		}
		out[i] = n
	}
	return out[0], out[1], nil
}

// ParseGroupBuckets parses one dump-groups line: the group id and its buckets in order; false
// for a line that is no group. Errors: a group id or a bucket_id that does not parse.
func ParseGroupBuckets(line string) (uint32, []GroupBucket, bool, error) {
	b := bytes.TrimLeft([]byte(line), " ")
	rest, ok := bytes.CutPrefix(b, groupToken)
	if !ok {
		return 0, nil, false, nil
	}
	id, n := parseDecimal(rest)
	if n == 0 || id >= 1<<32 || (n < len(rest) && rest[n] != ',') {
		return 0, nil, true, fmt.Errorf("bad group id in dump-groups line %q", line)
	}
	var out []GroupBucket
	parts := bytes.Split(rest, []byte(",bucket="))
	for _, p := range parts[1:] {
		v, ok := bytes.CutPrefix(p, []byte("bucket_id:"))
		if !ok {
			return 0, nil, true, fmt.Errorf("bucket without bucket_id in dump-groups line %q", line)
		}
		bid, m := parseDecimal(v)
		if m == 0 || bid >= 1<<32 {
			return 0, nil, true, fmt.Errorf("bad bucket_id in dump-groups line %q", line)
		}
		gb := GroupBucket{ID: uint32(bid)}
		if i := bytes.Index(p, []byte("nat(dst=")); i >= 0 {
			d := p[i+len("nat(dst="):]
			if j := bytes.IndexByte(d, ')'); j >= 0 {
				gb.NATDst = string(d[:j])
			}
		}
		out = append(out, gb)
	}
	return uint32(id), out, true, nil
}

// GroupStats runs `dump-group-stats TARGET` (every group, 16 bytes per bucket in the reply: safe
// for groups of any size) and returns its owned and foreign groups alike.
func (o *OpenFlow) GroupStats(ctx context.Context) ([]GroupStats, error) {
	var out []GroupStats
	err := run(ctx, o.ofctl("--no-names", "dump-group-stats", o.Target), nil, func(r io.Reader) error {
		s := newScanner(r)
		for s.Scan() {
			g, ok, err := ParseGroupStats(s.Text())
			if err != nil {
				return err
			}
			if ok {
				out = append(out, g)
			}
		}
		return s.Err()
	})
	return out, err
}

// GroupBuckets runs `dump-groups TARGET ID` and returns the buckets of group id in order (nil
// when the bridge has no such group). The reply holds the whole group: OVS 3.1 cannot send a
// group of more than about 744 Service buckets (see the README's warning); callers keep to
// smaller groups. (`dump-groups TARGET group_id=ID` is not read as a group id by OVS 3.1's
// ovs-ofctl: it dumps every group.)
func (o *OpenFlow) GroupBuckets(ctx context.Context, id uint32) ([]GroupBucket, error) {
	var out []GroupBucket
	err := run(ctx, o.ofctl("--no-names", "dump-groups", o.Target, strconv.FormatUint(uint64(id), 10)), nil, func(r io.Reader) error {
		s := newScanner(r)
		for s.Scan() {
			gid, bs, ok, err := ParseGroupBuckets(s.Text())
			if err != nil {
				return err
			}
			if ok && gid == id {
				out = bs
			}
		}
		return s.Err()
	})
	return out, err
}
