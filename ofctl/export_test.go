package ofctl

// Translate reports why lines would not go through the native encoder (nil: they would).
func Translate(lines []string) error {
	_, err := translate(lines)
	return err
}

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

// PreparedPending is how many encodings made by Prepare wait for their Bundle call.
func (o *OpenFlow) PreparedPending() int {
	o.prepMu.Lock()
	defer o.prepMu.Unlock()
	return len(o.prepared)
}
