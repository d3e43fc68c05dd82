package ofctl

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// GratuitousARP returns the 60-byte Ethernet frame of a gratuitous ARP request (RFC 5227
// section 3, "ARP Announcement") that announces ip at mac: broadcast destination, source mac,
// ARP operation 1, sender and target protocol address both ip, target hardware address zero,
// padded to the 60-byte Ethernet minimum. Receivers that already have a neighbour entry for ip
// (the router that was talking to the previous gateway) replace its MAC with mac. It returns an
// error unless ip is IPv4 and mac is 6 bytes.
func GratuitousARP(ip netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	if !ip.Is4() || len(mac) != 6 {
		return nil, fmt.Errorf("gratuitous ARP: want an IPv4 address and a 6-byte MAC, got %s %s", ip, mac)
	}
	a := ip.As4()
	f := make([]byte, 0, 60)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	f = append(f, mac...)
	f = append(f, 0x08, 0x06)             // ARP
	f = append(f, 0x00, 0x01, 0x08, 0x00) // Ethernet, IPv4
	f = append(f, 6, 4, 0x00, 0x01)       // hlen, plen, request
	f = append(f, mac...)
	f = append(f, a[:]...)
	f = append(f, 0, 0, 0, 0, 0, 0)
	f = append(f, a[:]...)
	for len(f) < 60 {
		f = append(f, 0)
	}
	return f, nil
}

// AnnounceIP sends a gratuitous ARP for ip at mac out of ofport (the uplink) of this bridge:
// one OpenFlow packet-out (`ovs-ofctl -O OpenFlow15 packet-out TARGET "in_port=controller
// packet=HEX actions=output:N"`, ovs-ofctl(8) "packet-out"). It needs no capability on the
// host (the agent never configures the address on an interface). Errors are *Error with
// ovs-ofctl's stderr, or the frame error of GratuitousARP.
func (o *OpenFlow) AnnounceIP(ctx context.Context, ip netip.Addr, mac net.HardwareAddr, ofport int) error {
	frame, err := GratuitousARP(ip, mac)
	if err != nil {
		return err
	}
	if ofport <= 0 {
		return fmt.Errorf("gratuitous ARP for %s: no uplink ofport", ip)
	}
	msg := "in_port=controller packet=" + hex.EncodeToString(frame) + " actions=output:" + strconv.Itoa(ofport)
	return run(ctx, o.ofctl("--no-names", "packet-out", o.Target, msg), nil, nil)
}
