package ofctl

import (
	"encoding/hex"
	"net"
	"net/netip"
	"testing"
)

func TestGratuitousARP(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:c0:00:02:0d")
	f, err := GratuitousARP(netip.MustParseAddr("192.0.2.50"), mac)
	if err != nil {
		t.Fatal(err)
	}
	want := "ffffffffffff" + "0200c000020d" + "0806" + "00010800" + "06040001" +
		"0200c000020d" + "c0000232" + "000000000000" + "c0000232"
	got := hex.EncodeToString(f)
	if len(f) != 60 || got[:len(want)] != want {
		t.Fatalf("frame %s (%d bytes), want prefix %s and 60 bytes", got, len(f), want)
	}
	if _, err := GratuitousARP(netip.MustParseAddr("2001:db8::1"), mac); err == nil {
		t.Fatal("IPv6 accepted")
	}
}

// The unsolicited Neighbor Advertisement decoded field by field (RFC 4861 4.4, 4.6.1, 7.2.6;
// RFC 8200 3; RFC 4443 2.3): all-nodes destinations, hop limit 255, ICMPv6 type 136 code 0,
// Override set and Solicited/Router clear, target = the egress IP, the TLL option with the MAC,
// and a checksum that sums to 0xffff over the pseudo-header and the message.
func TestUnsolicitedNA(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:c0:00:02:0d")
	ip := netip.MustParseAddr("2001:db8::50")
	f, err := UnsolicitedNA(ip, mac)
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != 86 {
		t.Fatalf("frame of %d bytes, want 86: %x", len(f), f)
	}
	be16 := func(b []byte) uint16 { return uint16(b[0])<<8 | uint16(b[1]) }
	eth, ip6, icmp := f[:14], f[14:54], f[54:]
	if net.HardwareAddr(eth[0:6]).String() != "33:33:00:00:00:01" || net.HardwareAddr(eth[6:12]).String() != mac.String() || be16(eth[12:]) != 0x86dd {
		t.Fatalf("Ethernet header %x", eth)
	}
	src, _ := netip.AddrFromSlice(ip6[8:24])
	dst, _ := netip.AddrFromSlice(ip6[24:40])
	if ip6[0]>>4 != 6 || be16(ip6[4:6]) != uint16(len(icmp)) || ip6[6] != 58 || ip6[7] != 255 || src != ip || dst != netip.MustParseAddr("ff02::1") {
		t.Fatalf("IPv6 header %x (src %s dst %s)", ip6, src, dst)
	}
	if icmp[0] != 136 || icmp[1] != 0 {
		t.Fatalf("ICMPv6 type %d code %d, want 136 0", icmp[0], icmp[1])
	}
	if flags := icmp[4]; flags&0x20 == 0 || flags&0xc0 != 0 {
		t.Fatalf("flags %#x: want Override only", flags)
	}
	target, _ := netip.AddrFromSlice(icmp[8:24])
	if target != ip {
		t.Fatalf("target %s, want %s", target, ip)
	}
	if opt := icmp[24:]; len(opt) != 8 || opt[0] != 2 || opt[1] != 1 || net.HardwareAddr(opt[2:8]).String() != mac.String() {
		t.Fatalf("TLL option %x", opt)
	}
	var sum uint32
	for _, b := range [][]byte{ip6[8:40], {0, 0, 0, byte(len(icmp)), 0, 0, 0, 58}, icmp} {
		for i := 0; i < len(b); i += 2 {
			sum += uint32(be16(b[i:]))
		}
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff || be16(icmp[2:4]) == 0 {
		t.Fatalf("ICMPv6 checksum %#04x does not verify (sum %#x)", be16(icmp[2:4]), sum)
	}
	for _, bad := range []string{"192.0.2.50", "::ffff:192.0.2.50"} {
		if _, err := UnsolicitedNA(netip.MustParseAddr(bad), mac); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
	if g, _ := AnnounceFrame(ip, mac); hex.EncodeToString(g) != hex.EncodeToString(f) {
		t.Fatal("AnnounceFrame of an IPv6 address is not the NA")
	}
	if g, _ := AnnounceFrame(netip.MustParseAddr("192.0.2.50"), mac); len(g) != 60 || g[12] != 0x08 || g[13] != 0x06 {
		t.Fatal("AnnounceFrame of an IPv4 address is not the gratuitous ARP")
	}
}
