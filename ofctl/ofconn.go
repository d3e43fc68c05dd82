package ofctl

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/contiv/libOpenflow/common"
	of13 "github.com/contiv/libOpenflow/openflow13"
	"k8s.io/klog/v2"

	"github.com/ovs-srcip/ovs-srcip/openflow"
)

// OpenFlow 1.5 wire constants of the messages this file frames (libOpenflow is an OpenFlow 1.3
// library; the bundle messages differ).
const (
	ofp15Version        = openflow.Version
	ofpt15GroupMod      = openflow.TypeGroupMod
	ofpt15BundleControl = 33
	ofpt15BundleAdd     = 34
)

// ofMessage is one message of a bundle: its OpenFlow type, its encoding without header (body),
// and the typed message it encodes (its text names it in errors).
type ofMessage struct {
	typ  uint8
	body []byte
	msg  openflow.Message
}

// Conn is a persistent OpenFlow 1.5 connection to one bridge's management socket (see
// MgmtTarget; ovs-vswitchd(8) "OpenFlow connections"), used to apply bundles without starting an
// ovs-ofctl process per bundle. It connects on first use, answers the switch's echo requests,
// sends its own every EchoInterval (closing the connection when no reply comes within Timeout),
// matches replies and errors to requests by xid, and reconnects on the next Bundle after any
// error. Bundles are applied one at a time. A Conn is safe for concurrent use.
type Conn struct {
	// Target is "unix:PATH" or "tcp:IP:PORT".
	Target string
	// Timeout bounds the connect and every request/reply exchange (default 10 s) in addition to
	// the caller's context.
	Timeout time.Duration
	// EchoInterval is the keepalive period (default 5 s).
	EchoInterval time.Duration

	mu       sync.Mutex // one bundle (and one connect) at a time
	sess     *session
	bundleID uint32
	closed   bool
}

// NewConn returns a Conn for target (MgmtTarget(runDir, bridge) or "tcp:IP:PORT"); it does not
// connect yet.
func NewConn(target string) *Conn {
	return &Conn{Target: target, Timeout: 10 * time.Second, EchoInterval: 5 * time.Second}
}

// Close closes the connection (if any); a closed Conn refuses further bundles.
func (c *Conn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.sess != nil {
		c.sess.close(errors.New("connection closed"))
		c.sess = nil
	}
}

// reply is one message received from the switch.
type reply struct {
	typ  uint8
	body []byte
}

// session is one connected socket; it is replaced, never reused, after an error.
type session struct {
	nc      net.Conn
	wmu     sync.Mutex
	pmu     sync.Mutex
	xid     uint32
	pending map[uint32]chan reply
	// addLo..addHi are the xids of the bundle-add messages in flight (0, 0: none); errors
	// answering them are collected in addErrs (one slice instead of a channel per message: a
	// cold start bundle has tens of thousands of messages).
	addLo, addHi uint32
	addErrs      []xidReply
	done         chan struct{}
	err          error
	once         sync.Once
}

func (s *session) close(err error) {
	s.once.Do(func() {
		s.pmu.Lock()
		s.err = err
		s.pmu.Unlock()
		close(s.done)
		_ = s.nc.Close()
	})
}

func (s *session) closeErr() error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return s.err
}

// register returns a new xid and the channel its replies (and errors) are delivered to.
func (s *session) register() (uint32, chan reply) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.xid++
	if s.xid == 0 {
		s.xid = 1
	}
	ch := make(chan reply, 4)
	s.pending[s.xid] = ch
	return s.xid, ch
}

// xidReply is a message received for one xid.
type xidReply struct {
	xid uint32
	reply
}

// reserveAdds allocates n consecutive xids for bundle-add messages and starts collecting the
// errors answering them; endAdds stops it and returns them.
func (s *session) reserveAdds(n int) uint32 {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if uint64(s.xid)+uint64(n)+1 > 0xffffffff {
		s.xid = 0 // wrap before the range, never inside it
	}
	lo := s.xid + 1
	s.xid += uint32(n)
	s.addLo, s.addHi, s.addErrs = lo, s.xid, nil
	return lo
}

// addErrorsSoFar returns the errors received so far for the reserved bundle-add xids.
func (s *session) addErrorsSoFar() []xidReply {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	return append([]xidReply(nil), s.addErrs...)
}

func (s *session) endAdds() {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.addLo, s.addHi, s.addErrs = 0, 0, nil
}

func (s *session) unregister(xids ...uint32) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	for _, x := range xids {
		delete(s.pending, x)
	}
}

func (s *session) write(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.nc.Write(b); err != nil {
		s.close(err)
		return err
	}
	return nil
}

// readLoop delivers every message to its xid's channel, answers echo requests and ends the
// session on the first read error.
func (s *session) readLoop(r *bufio.Reader) {
	for {
		typ, xid, body, err := readMessage(r)
		if err != nil {
			s.close(err)
			return
		}
		if typ == of13.Type_EchoRequest {
			if s.write(message(of13.Type_EchoReply, xid, body)) != nil {
				return
			}
			continue
		}
		s.pmu.Lock()
		ch := s.pending[xid]
		if ch == nil && typ == of13.Type_Error && s.addLo != 0 && xid >= s.addLo && xid <= s.addHi {
			s.addErrs = append(s.addErrs, xidReply{xid: xid, reply: reply{typ: typ, body: body}})
		}
		s.pmu.Unlock()
		if ch != nil {
			select {
			case ch <- reply{typ: typ, body: body}:
			default: // more replies than expected for one xid: keep the first ones
			}
		}
	}
}

// readMessage reads one OpenFlow message: its type, xid and body (after the 8-byte header).
func readMessage(r io.Reader) (uint8, uint32, []byte, error) {
	var h [8]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, 0, nil, err
	}
	n := int(binary.BigEndian.Uint16(h[2:]))
	if n < 8 {
		return 0, 0, nil, fmt.Errorf("bad OpenFlow message length %d", n)
	}
	body := make([]byte, n-8)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, 0, nil, err
	}
	return h[1], binary.BigEndian.Uint32(h[4:]), body, nil
}

// appendBundleAdd appends to buf an OFPT_BUNDLE_ADD_MESSAGE (OpenFlow 1.5.1 section 7.3.9.6:
// header, bundle_id, 2 pad bytes, flags) that carries the message of type typ and body, both
// with xid, without intermediate copies (a cold start sends tens of thousands).
func appendBundleAdd(buf []byte, xid, bundleID uint32, flags uint16, typ uint8, body []byte) []byte {
	innerLen := 8 + len(body)
	buf = append(buf, ofp15Version, ofpt15BundleAdd)
	buf = binary.BigEndian.AppendUint16(buf, uint16(8+8+innerLen))
	buf = binary.BigEndian.AppendUint32(buf, xid)
	buf = binary.BigEndian.AppendUint32(buf, bundleID)
	buf = append(buf, 0, 0)
	buf = binary.BigEndian.AppendUint16(buf, flags)
	buf = append(buf, ofp15Version, typ)
	buf = binary.BigEndian.AppendUint16(buf, uint16(innerLen))
	buf = binary.BigEndian.AppendUint32(buf, xid)
	return append(buf, body...)
}

// message encodes an OpenFlow 1.5 message with libOpenflow's header.
func message(typ uint8, xid uint32, body []byte) []byte {
	h := common.Header{Version: ofp15Version, Type: typ, Length: uint16(8 + len(body)), Xid: xid}
	b, _ := h.MarshalBinary()
	return append(b, body...)
}

// dial connects, exchanges hellos (OpenFlow 1.5 is required: the agent's groups use OpenFlow
// 1.5 bucket ids and selection methods) and starts the reader and keepalive.
func (c *Conn) dial(ctx context.Context) (*session, error) {
	network, addr, ok := strings.Cut(c.Target, ":")
	if !ok || (network != "unix" && network != "tcp") {
		return nil, fmt.Errorf("unsupported OpenFlow target %q", c.Target)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	hello := message(of13.Type_Hello, 0, helloBitmap())
	if _, err := nc.Write(hello); err != nil {
		nc.Close()
		return nil, err
	}
	r := bufio.NewReaderSize(nc, 64<<10)
	typ, _, body, err := readMessage(r)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	if typ != of13.Type_Hello || !helloHas15(body) {
		nc.Close()
		return nil, fmt.Errorf("switch does not accept OpenFlow 1.5 (set the bridge's protocols to include OpenFlow15)")
	}
	_ = nc.SetDeadline(time.Time{})
	s := &session{nc: nc, pending: map[uint32]chan reply{}, done: make(chan struct{})}
	go s.readLoop(r)
	go c.keepalive(s)
	return s, nil
}

// helloBitmap is a hello body with a version bitmap of OpenFlow 1.5 only.
func helloBitmap() []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint16(b[0:], 1) // OFPHET_VERSIONBITMAP
	binary.BigEndian.PutUint16(b[2:], 8)
	binary.BigEndian.PutUint32(b[4:], 1<<ofp15Version)
	return b
}

// helloHas15 reports whether the switch's hello offers OpenFlow 1.5: its version bitmap if it
// sent one, else its header version.
func helloHas15(body []byte) bool {
	for len(body) >= 4 {
		t, n := binary.BigEndian.Uint16(body[0:]), int(binary.BigEndian.Uint16(body[2:]))
		if n < 4 || n > len(body) {
			break
		}
		if t == 1 && n >= 8 {
			return binary.BigEndian.Uint32(body[4:])&(1<<ofp15Version) != 0
		}
		body = body[(n+7)/8*8:]
	}
	return true // no bitmap: the switch accepted our version-6 header (it would answer an error)
}

func (c *Conn) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 10 * time.Second
}

// keepalive sends an echo request every EchoInterval and ends the session when one is not
// answered within Timeout.
func (c *Conn) keepalive(s *session) {
	every := c.EchoInterval
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		xid, ch := s.register()
		if s.write(message(of13.Type_EchoRequest, xid, nil)) != nil {
			return
		}
		select {
		case <-ch:
		case <-s.done:
		case <-time.After(c.timeout()):
			s.close(errors.New("echo request not answered"))
		}
		s.unregister(xid)
	}
}

// session returns the connected session, connecting if there is none or the last one failed.
func (c *Conn) session(ctx context.Context) (*session, error) {
	if c.closed {
		return nil, errors.New("connection closed")
	}
	if c.sess != nil {
		select {
		case <-c.sess.done:
			klog.FromContext(ctx).V(2).Info("OpenFlow connection lost, reconnecting", "target", c.Target, "err", c.sess.closeErr())
			c.sess = nil
		default:
			return c.sess, nil
		}
	}
	s, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.sess = s
	return s, nil
}

// wait returns the next message on ch, or an error when the session ends, ctx is done or
// Timeout passes.
func (c *Conn) wait(ctx context.Context, s *session, ch chan reply) (reply, error) {
	return c.waitFor(ctx, s, ch, c.timeout())
}

func (c *Conn) waitFor(ctx context.Context, s *session, ch chan reply, d time.Duration) (reply, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r, nil
	case <-s.done:
		return reply{}, fmt.Errorf("connection lost: %w", s.closeErr())
	case <-ctx.Done():
		return reply{}, ctx.Err()
	case <-t.C:
		return reply{}, errors.New("no reply from switch")
	}
}

// Bundle types and flags (OpenFlow 1.4+ ofp_bundle_ctrl_type, ofp_bundle_flags).
const (
	bundleOpenRequest    = 0
	bundleOpenReply      = 1
	bundleCommitRequest  = 4
	bundleCommitReply    = 5
	bundleDiscardRequest = 6
	bundleAtomicOrdered  = 3 // OFPBF_ATOMIC | OFPBF_ORDERED
	ofptBarrierRequest   = 20
	ofptBarrierReply     = 21
)

// bundleError is an error of one bundle: errs are the OpenFlow errors the switch sent, with the
// lines they answer.
func (c *Conn) bundleError(err error, errs []string) error {
	e := &Error{Cmd: []string{"openflow", "bundle", c.Target}, Err: err}
	if len(errs) > 0 {
		e.Stderr = strings.Join(errs, "\n")
	}
	return e
}

// apply sends msgs as one OpenFlow 1.5 bundle (ATOMIC|ORDERED): open, add every message, a
// barrier (so that an error answering any add arrives before we decide), then commit, or
// discard when any add was refused. Any OpenFlow error returns an *Error whose Stderr names it
// (OFPET_..., so Rejected is true) and leaves the bridge as it was; a connection failure returns
// an *Error that is not Rejected (after a lost commit reply the bundle may or may not be applied;
// the caller's plans are idempotent and are re-sent).
func (c *Conn) apply(ctx context.Context, msgs []ofMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.session(ctx)
	if err != nil {
		return c.bundleError(fmt.Errorf("connect: %w", err), nil)
	}
	errs, err := c.applyOn(ctx, s, msgs)
	if err != nil {
		var rej *rejectedError
		if !errors.As(err, &rej) {
			// The session's state is unknown (timeout, context): start a new one next time.
			s.close(err)
		}
		return c.bundleError(err, errs)
	}
	return nil
}

type rejectedError struct{ msg string }

func (r *rejectedError) Error() string { return r.msg }

func (c *Conn) applyOn(ctx context.Context, s *session, msgs []ofMessage) ([]string, error) {
	// The barrier and the commit of a large bundle (a cold start writes tens of thousands of
	// messages) take longer than one small exchange: 1 ms more per message.
	budget := c.timeout() + time.Duration(len(msgs))*time.Millisecond
	c.bundleID++
	id := c.bundleID
	var xids []uint32
	defer func() { s.unregister(xids...) }()
	ctrl := func(typ uint16) (uint32, chan reply, []byte) {
		xid, ch := s.register()
		xids = append(xids, xid)
		body, _ := (&of13.BundleControl{BundleID: id, Type: typ, Flags: bundleAtomicOrdered}).MarshalBinary()
		return xid, ch, message(ofpt15BundleControl, xid, body)
	}
	// Open, every add, then a barrier, written without waiting in between (the switch handles
	// them in order, so one round trip instead of two), in chunks of about 256 KiB.
	_, och, ob := ctrl(bundleOpenRequest)
	lo := s.reserveAdds(len(msgs))
	defer s.endAdds()
	size := len(ob) + 8 // the open and the barrier
	for _, m := range msgs {
		if size += 24 + len(m.body); size > 288<<10 {
			break // written in chunks: one chunk's room
		}
	}
	buf := append(make([]byte, 0, min(size, 288<<10)), ob...)
	for i, m := range msgs {
		buf = appendBundleAdd(buf, lo+uint32(i), id, bundleAtomicOrdered, m.typ, m.body)
		if len(buf) >= 256<<10 {
			if err := s.write(buf); err != nil {
				return nil, err
			}
			buf = buf[:0]
		}
	}
	bxid, bch := s.register()
	xids = append(xids, bxid)
	buf = append(buf, message(ofptBarrierRequest, bxid, nil)...)
	if err := s.write(buf); err != nil {
		return nil, err
	}
	if _, err := c.waitFor(ctx, s, bch, budget); err != nil {
		return nil, err
	}
	// The open's reply came before the barrier's.
	var r reply
	select {
	case r = <-och:
	default:
		return nil, errors.New("no reply to bundle open before the barrier's")
	}
	if r.typ == of13.Type_Error {
		// The adds written after the refused open are not refused with it: Open vSwitch
		// (3.1) creates a bundle for an add whose bundle id is not open, so they may sit in an
		// open bundle of this connection that a commit of the id would apply
		// (TestNativeOpenRefusedLeavesNoBundle). End the session, which drops every bundle of
		// the connection on the switch, rather than leave them there.
		s.close(errors.New("bundle open refused"))
		return []string{"Error " + formatOFError(r.body) + " for: bundle open"}, &rejectedError{"bundle open refused"}
	}
	if r.typ != ofpt15BundleControl || len(r.body) < 6 || binary.BigEndian.Uint16(r.body[4:]) != bundleOpenReply {
		return nil, fmt.Errorf("unexpected reply type %d to bundle open", r.typ)
	}
	if errs := addErrors(msgs, lo, s.addErrorsSoFar()); len(errs) > 0 {
		// Discard: nothing of the bundle is applied (closing the connection would too).
		_, dch, b := ctrl(bundleDiscardRequest)
		if err := s.write(b); err != nil {
			return errs, err
		}
		if _, err := c.wait(ctx, s, dch); err != nil {
			return errs, err
		}
		return errs, &rejectedError{"bundle message refused, bundle discarded"}
	}
	// Commit.
	_, ch, b := ctrl(bundleCommitRequest)
	if err := s.write(b); err != nil {
		return nil, err
	}
	var err error
	if r, err = c.waitFor(ctx, s, ch, budget); err != nil {
		return nil, err
	}
	if r.typ == of13.Type_Error {
		errs := addErrors(msgs, lo, s.addErrorsSoFar())
		errs = append(errs, "Error "+formatOFError(r.body)+" for: bundle commit")
		return errs, &rejectedError{"bundle commit failed, nothing applied"}
	}
	if r.typ != ofpt15BundleControl || len(r.body) < 6 || binary.BigEndian.Uint16(r.body[4:]) != bundleCommitReply {
		return nil, fmt.Errorf("unexpected reply type %d to bundle commit", r.typ)
	}
	return nil, nil
}

// addErrors renders the errors received for bundle-add messages (xids from lo) with the lines
// they answer.
func addErrors(msgs []ofMessage, lo uint32, got []xidReply) []string {
	var errs []string
	for _, r := range got {
		if i := int(r.xid - lo); i >= 0 && i < len(msgs) {
			errs = append(errs, "Error "+formatOFError(r.body)+" for: "+string(msgs[i].msg.AppendText(nil)))
		}
	}
	return errs
}

// ofErrorTypes names ofp_error_type values (OpenFlow 1.5 §7.5.4).
var ofErrorTypes = map[uint16]string{0: "OFPET_HELLO_FAILED", 1: "OFPET_BAD_REQUEST", 2: "OFPET_BAD_ACTION",
	3: "OFPET_BAD_INSTRUCTION", 4: "OFPET_BAD_MATCH", 5: "OFPET_FLOW_MOD_FAILED", 6: "OFPET_GROUP_MOD_FAILED",
	7: "OFPET_PORT_MOD_FAILED", 8: "OFPET_TABLE_MOD_FAILED", 9: "OFPET_QUEUE_OP_FAILED",
	10: "OFPET_SWITCH_CONFIG_FAILED", 11: "OFPET_ROLE_REQUEST_FAILED", 12: "OFPET_METER_MOD_FAILED",
	13: "OFPET_TABLE_FEATURES_FAILED", 14: "OFPET_BAD_PROPERTY", 15: "OFPET_ASYNC_CONFIG_FAILED",
	16: "OFPET_FLOW_MONITOR_FAILED", 17: "OFPET_BUNDLE_FAILED", 0xffff: "OFPET_EXPERIMENTER"}

// ofBundleCodes names ofp_bundle_failed_code values.
var ofBundleCodes = map[uint16]string{0: "OFPBFC_UNKNOWN", 1: "OFPBFC_EPERM", 2: "OFPBFC_BAD_ID",
	3: "OFPBFC_BUNDLE_EXIST", 4: "OFPBFC_BUNDLE_CLOSED", 5: "OFPBFC_OUT_OF_BUNDLES", 6: "OFPBFC_BAD_TYPE",
	7: "OFPBFC_BAD_FLAGS", 8: "OFPBFC_MSG_BAD_LEN", 9: "OFPBFC_MSG_BAD_XID", 10: "OFPBFC_MSG_UNSUP",
	11: "OFPBFC_MSG_CONFLICT", 12: "OFPBFC_MSG_TOO_MANY", 13: "OFPBFC_MSG_FAILED", 14: "OFPBFC_TIMEOUT",
	15: "OFPBFC_BUNDLE_IN_PROGRESS"}

// formatOFError renders an ofp_error_msg body: "OFPET_BAD_ACTION code 4" (experimenter errors:
// "OFPET_EXPERIMENTER 0x2320 code N").
func formatOFError(b []byte) string {
	if len(b) < 4 {
		return "OFPET_UNKNOWN (short error message)"
	}
	t, code := binary.BigEndian.Uint16(b[0:]), binary.BigEndian.Uint16(b[2:])
	name, ok := ofErrorTypes[t]
	if !ok {
		name = fmt.Sprintf("OFPET_TYPE_%d", t)
	}
	if t == 17 {
		if n, ok := ofBundleCodes[code]; ok {
			return n
		}
	}
	if t == 0xffff && len(b) >= 8 {
		return fmt.Sprintf("%s %#x code %d", name, binary.BigEndian.Uint32(b[4:]), code)
	}
	return fmt.Sprintf("%s code %d", name, code)
}
