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
