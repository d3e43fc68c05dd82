package ofctl

import (
	"context"

	of13 "github.com/contiv/libOpenflow/openflow13"
)

// DropConnection closes c's socket under it, as a switch restart or a broken socket would, and
// waits until the reader has noticed.
func (c *Conn) DropConnection() bool {
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s == nil {
		return false
	}
	_ = s.nc.Close()
	<-s.done
	return true
}

// BundleControlRaw sends one bundle control message (typ: 0 open, 4 commit) for bundle id on
// c's current session and returns the reply's OpenFlow type (1 for an error), as a switch
// sees a second user of the connection.
func (c *Conn) BundleControlRaw(ctx context.Context, id uint32, typ uint16) (uint8, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, err := c.session(ctx)
	if err != nil {
		return 0, err
	}
	xid, ch := s.register()
	defer s.unregister(xid)
	body, _ := (&of13.BundleControl{BundleID: id, Type: typ, Flags: bundleAtomicOrdered}).MarshalBinary()
	if err := s.write(message(ofpt15BundleControl, xid, body)); err != nil {
		return 0, err
	}
	r, err := c.wait(ctx, s, ch)
	return r.typ, err
}

// NextBundleID is the id the next bundle will have.
func (c *Conn) NextBundleID() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bundleID + 1
}
