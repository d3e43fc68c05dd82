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

// UnsolicitedNA returns the 86-byte Ethernet frame of an unsolicited Neighbor Advertisement
// (RFC 4861 section 7.2.6) that announces IPv6 address ip at mac: Ethernet destination
// 33:33:00:00:00:01 (all-nodes), source mac, type 0x86dd; IPv6 source ip, destination ff02::1,
// hop limit 255, next header 58; ICMPv6 type 136 code 0, flags Override only (not Solicited, not
// Router), target ip, and the Target Link-Layer Address option (type 2, length 1, mac); the
// ICMPv6 checksum over the pseudo-header (RFC 4443 2.3). Neighbours that have an entry for ip
// (the router that was talking to the previous gateway) replace its MAC with mac. It returns an
// error unless ip is a (non-IPv4-mapped) IPv6 address and mac is 6 bytes.
func UnsolicitedNA(ip netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	if !ip.Is6() || ip.Is4In6() || len(mac) != 6 {
		return nil, fmt.Errorf("unsolicited neighbor advertisement: want an IPv6 address and a 6-byte MAC, got %s %s", ip, mac)
	}
	src := ip.As16()
	dst := netip.MustParseAddr("ff02::1").As16()
	icmp := make([]byte, 0, 32)
	icmp = append(icmp, 136, 0, 0, 0)  // type, code, checksum (below)
	icmp = append(icmp, 0x20, 0, 0, 0) // R=0 S=0 O=1, reserved
	icmp = append(icmp, src[:]...)     // target
	icmp = append(icmp, 2, 1)          // Target Link-Layer Address, 8 bytes
	icmp = append(icmp, mac...)
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
	}
	add(src[:])
	add(dst[:])
	sum += uint32(len(icmp)) + 58 // upper-layer length, next header
	add(icmp)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	icmp[2], icmp[3] = byte(c>>8), byte(c)
	f := make([]byte, 0, 14+40+len(icmp))
	f = append(f, 0x33, 0x33, 0, 0, 0, 1)
	f = append(f, mac...)
	f = append(f, 0x86, 0xdd)
	f = append(f, 0x60, 0, 0, 0)                       // version 6, traffic class 0, flow label 0
	f = append(f, byte(len(icmp)>>8), byte(len(icmp))) // payload length
	f = append(f, 58, 255)                             // ICMPv6, hop limit 255 (RFC 4861 7.1.2)
	f = append(f, src[:]...)
	f = append(f, dst[:]...)
	return append(f, icmp...), nil
}

// AnnounceIP announces ip at mac out of ofport (the uplink) of this bridge: a gratuitous ARP
// (GratuitousARP) for an IPv4 address, an unsolicited Neighbor Advertisement (UnsolicitedNA)
// for an IPv6 one; one OpenFlow packet-out (`ovs-ofctl -O OpenFlow15 packet-out TARGET
// "in_port=controller packet=HEX actions=output:N"`, ovs-ofctl(8) "packet-out"). It needs no
// capability on the host (the agent never configures the address on an interface). Errors are
// *Error with ovs-ofctl's stderr, or the frame error of GratuitousARP / UnsolicitedNA.
func (o *OpenFlow) AnnounceIP(ctx context.Context, ip netip.Addr, mac net.HardwareAddr, ofport int) error {
	frame, err := AnnounceFrame(ip, mac)
	if err != nil {
		return err
	}
	if ofport <= 0 {
		return fmt.Errorf("announcing %s: no uplink ofport", ip)
	}
	msg := "in_port=controller packet=" + hex.EncodeToString(frame) + " actions=output:" + strconv.Itoa(ofport)
	return run(ctx, o.ofctl("--no-names", "packet-out", o.Target, msg), nil, nil)
}

// AnnounceFrame is the frame AnnounceIP sends for ip: GratuitousARP for IPv4, UnsolicitedNA for
// IPv6.
func AnnounceFrame(ip netip.Addr, mac net.HardwareAddr) ([]byte, error) {
	if ip.Is6() && !ip.Is4In6() {
		return UnsolicitedNA(ip, mac)
	}
	return GratuitousARP(ip, mac)
}
