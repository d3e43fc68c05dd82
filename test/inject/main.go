// Command inject sends hand-made Geneve packets (RFC 8926) for the lab's attack tests: an IPv4/UDP
// or IPv6/UDP outer header from any source address (a raw socket with IP_HDRINCL, or an AF_INET6
// IPPROTO_RAW socket, which includes the header too, so the source may be spoofed), a Geneve
// header with the given VNI, and an inner Ethernet/IPv4 or Ethernet/IPv6 TCP or UDP packet (the
// family of --dst picks the outer one, the family of --inner-dst the inner one; --inner-src must
// be of the same family).
//
//	inject --dst 192.0.2.11 --vni 2 --inner-src 198.51.100.10:40000 --inner-dst 10.244.1.5:8080 [--src 192.0.2.13] [--proto tcp|udp] [--flags syn|ack] [--count N]
//
// With --plain it sends the inner packet itself, without Geneve (to an entry point), and with
// --random-src CIDR each packet gets a random source address in CIDR (a spoofed SYN flood):
//
//	inject --plain --inner-dst 192.0.2.11:30100 --random-src 10.99.0.0/16 --count 3000
//
// It runs inside a lab network namespace (ip netns exec) and needs CAP_NET_RAW.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "inject:", err)
		os.Exit(1)
	}
}

func run() error {
	src := flag.String("src", "", "outer source, the family of --dst (default: the address the route to --dst uses)")
	dst := flag.String("dst", "", "outer destination (a node), IPv4 or IPv6")
	dport := flag.Int("dport", 6081, "outer UDP destination port (Geneve)")
	vni := flag.Uint("vni", 1, "Geneve VNI")
	proto := flag.String("proto", "tcp", "inner protocol: tcp or udp")
	flags := flag.String("flags", "syn", "inner TCP flags: syn or ack")
	innerSrc := flag.String("inner-src", "", "inner source ip:port")
	innerDst := flag.String("inner-dst", "", "inner destination ip:port")
	count := flag.Int("count", 1, "packets to send")
	plain := flag.Bool("plain", false, "send the inner packet without Geneve (--dst, --src, --vni unused)")
	randomSrc := flag.String("random-src", "", "with --plain: a random inner source address in this CIDR per packet (and a random source port)")
	pps := flag.Int("pps", 0, "packets per second (0: as fast as possible)")
	innerEthDst := flag.String("inner-eth-dst", "0a:58:00:00:00:01", "inner Ethernet destination (an egress gateway reads its egress IP from it: 0a:5e:<IPv4>, 0a:5f:<IPv6's last 32 bits>)")
	flag.Parse()
	if *plain {
		return sendPlain(*innerSrc, *innerDst, *randomSrc, *proto, *flags, *count, *pps)
	}

	d, err := netip.ParseAddr(*dst)
	if err != nil {
		return fmt.Errorf("--dst %q: not an IP address", *dst)
	}
	d = d.Unmap()
	var s netip.Addr
	if *src == "" {
		udpNet := "udp4"
		if d.Is6() {
			udpNet = "udp6"
		}
		c, err := net.Dial(udpNet, netip.AddrPortFrom(d, uint16(*dport)).String())
		if err != nil {
			return fmt.Errorf("route to %s: %w", d, err)
		}
		s = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
		c.Close()
	} else if s, err = netip.ParseAddr(*src); err != nil || s.Unmap().Is4() != d.Is4() {
		return fmt.Errorf("--src %q: not an address of the family of --dst %s", *src, d)
	}
	s = s.Unmap()
	is, err := netip.ParseAddrPort(*innerSrc)
	if err != nil {
		return fmt.Errorf("--inner-src: %w", err)
	}
	id, err := netip.ParseAddrPort(*innerDst)
	if err != nil {
		return fmt.Errorf("--inner-dst: %w", err)
	}
	if is.Addr().Is4() != id.Addr().Is4() {
		return fmt.Errorf("--inner-src %s and --inner-dst %s: two families", is, id)
	}
	var inner []byte
	switch *proto {
	case "tcp":
		f := byte(0x02) // SYN
		if *flags == "ack" {
			f = 0x10
		}
		inner = ipHeader(is.Addr(), id.Addr(), syscall.IPPROTO_TCP, tcp(is, id, f))
	case "udp":
		inner = ipHeader(is.Addr(), id.Addr(), syscall.IPPROTO_UDP, udp(is, id, []byte("inject\n"), true))
	default:
		return fmt.Errorf("--proto %q: tcp or udp", *proto)
	}
	// Inner Ethernet: br-int routes by IP and rewrites both MACs (an egress gateway matches the
	// destination, --inner-eth-dst).
	ethType := []byte{0x08, 0x00}
	if id.Addr().Is6() {
		ethType = []byte{0x86, 0xdd}
	}
	mac, err := net.ParseMAC(*innerEthDst)
	if err != nil || len(mac) != 6 {
		return fmt.Errorf("--inner-eth-dst %q: not an Ethernet address", *innerEthDst)
	}
	eth := append(append(append(slices.Clone([]byte(mac)), 0x02, 0xba, 0xd0, 0, 0, 1), ethType...), inner...)
	// Geneve header (RFC 8926 section 3.4): version 0, no options, protocol type 0x6558
	// (Transparent Ethernet Bridging), 24-bit VNI.
	gnv := make([]byte, 8)
	binary.BigEndian.PutUint16(gnv[2:], 0x6558)
	binary.BigEndian.PutUint32(gnv[4:], uint32(*vni)<<8)
	payload := append(gnv, eth...)
	// The UDP checksum is mandatory over IPv6 (RFC 8200 section 8.1), optional over IPv4.
	outer := ipHeader(s, d, syscall.IPPROTO_UDP,
		udp(netip.AddrPortFrom(s, 50000), netip.AddrPortFrom(d, uint16(*dport)), payload, d.Is6()))

	fd, to, err := rawSocket(d)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var errs []error
	for i := 0; i < *count; i++ {
		if err := syscall.Sendto(fd, outer, 0, to); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	fmt.Printf("sent %d Geneve packet(s) %s -> %s:%d vni %d, inner %s %s -> %s\n", *count, s, d, *dport, *vni, *proto, is, id)
	return nil
}

// sendPlain sends count TCP or UDP packets to dst (ip:port) over a raw socket, from src (ip:port)
// or, with randomSrc, from a random address of that CIDR and a random port each.
func sendPlain(src, dst, randomSrc, proto, flags string, count, pps int) error {
	d, err := netip.ParseAddrPort(dst)
	if err != nil {
		return fmt.Errorf("--inner-dst: %w", err)
	}
	var pfx netip.Prefix
	var s netip.AddrPort
	if randomSrc != "" {
		if pfx, err = netip.ParsePrefix(randomSrc); err != nil || !pfx.Addr().Is4() || !d.Addr().Is4() {
			return fmt.Errorf("--random-src %q: not an IPv4 CIDR (and --inner-dst IPv4)", randomSrc)
		}
	} else if s, err = netip.ParseAddrPort(src); err != nil || s.Addr().Is4() != d.Addr().Is4() {
		return fmt.Errorf("--inner-src %q: not an address of the family of --inner-dst (%v)", src, err)
	}
	f := byte(0x02)
	if flags == "ack" {
		f = 0x10
	}
	fd, to, err := rawSocket(d.Addr())
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	sent := 0
	start := time.Now()
	for i := 0; i < count; i++ {
		if pps > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(pps))))
		}
		if pfx.IsValid() {
			base := binary.BigEndian.Uint32(pfx.Masked().Addr().AsSlice())
			host := rand.Uint32() & (uint32(1)<<(32-pfx.Bits()) - 1)
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], base|host)
			s = netip.AddrPortFrom(netip.AddrFrom4(b), uint16(1024+rand.IntN(60000)))
		}
		var pkt []byte
		if proto == "udp" {
			pkt = ipHeader(s.Addr(), d.Addr(), syscall.IPPROTO_UDP, udp(s, d, []byte("inject\n"), true))
		} else {
			pkt = ipHeader(s.Addr(), d.Addr(), syscall.IPPROTO_TCP, tcp(s, d, f))
		}
		if err := syscall.Sendto(fd, pkt, 0, to); err != nil {
			return fmt.Errorf("send %d: %w", i, err)
		}
		sent++
	}
	fmt.Printf("sent %d %s packet(s) to %s\n", sent, proto, d)
	return nil
}

// rawSocket opens a raw socket that sends whole IP packets of dst's family (IPv4: IPPROTO_RAW
// implies IP_HDRINCL; IPv6: an IPPROTO_RAW socket includes the header as well) and dst's sockaddr.
func rawSocket(dst netip.Addr) (int, syscall.Sockaddr, error) {
	if dst.Is4() {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
		if err != nil {
			return -1, nil, fmt.Errorf("raw socket: %w", err)
		}
		return fd, &syscall.SockaddrInet4{Addr: dst.As4()}, nil
	}
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
	if err != nil {
		return -1, nil, fmt.Errorf("raw IPv6 socket: %w", err)
	}
	return fd, &syscall.SockaddrInet6{Addr: dst.As16()}, nil
}

// ipHeader returns payload behind an IPv4 or an IPv6 header, by the family of src and dst.
func ipHeader(src, dst netip.Addr, proto int, payload []byte) []byte {
	if dst.Is4() {
		return ipv4(src, dst, proto, payload)
	}
	return ipv6(src, dst, proto, payload)
}

// ipv6 returns an IPv6 header (no extension headers, hop limit 64, flow label 0) followed by
// payload.
func ipv6(src, dst netip.Addr, proto int, payload []byte) []byte {
	h := make([]byte, 40, 40+len(payload))
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6] = byte(proto)
	h[7] = 64
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, payload...)
}

// ipv4 returns an IPv4 header (no options, TTL 64, checksum) followed by payload.
func ipv4(src, dst netip.Addr, proto int, payload []byte) []byte {
	h := make([]byte, 20, 20+len(payload))
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	h[8] = 64
	h[9] = byte(proto)
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
	return append(h, payload...)
}

// tcp returns a 20-byte TCP header with the given flags and a valid checksum.
func tcp(src, dst netip.AddrPort, flags byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], src.Port())
	binary.BigEndian.PutUint16(h[2:], dst.Port())
	binary.BigEndian.PutUint32(h[4:], 0x1000)
	if flags&0x10 != 0 {
		binary.BigEndian.PutUint32(h[8:], 0x2000)
	}
	h[12] = 5 << 4
	h[13] = flags
	binary.BigEndian.PutUint16(h[14:], 65535)
	binary.BigEndian.PutUint16(h[16:], checksum(h, pseudo(src.Addr(), dst.Addr(), syscall.IPPROTO_TCP, len(h))))
	return h
}

// udp returns a UDP header and payload; with sum the checksum is computed, else it is 0 (allowed
// over IPv4, and what tunnel endpoints usually send).
func udp(src, dst netip.AddrPort, payload []byte, sum bool) []byte {
	b := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], src.Port())
	binary.BigEndian.PutUint16(b[2:], dst.Port())
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
	copy(b[8:], payload)
	if sum {
		c := checksum(b, pseudo(src.Addr(), dst.Addr(), syscall.IPPROTO_UDP, len(b)))
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(b[6:], c)
	}
	return b
}

// pseudo is the sum of the IPv4 (RFC 793) or IPv6 (RFC 8200 section 8.1) pseudo-header of a
// TCP or UDP checksum, by the family of src and dst.
func pseudo(src, dst netip.Addr, proto, length int) uint32 {
	s, d := src.AsSlice(), dst.AsSlice()
	var sum uint32
	for i := 0; i+1 < len(s); i += 2 {
		sum += uint32(s[i])<<8 | uint32(s[i+1])
		sum += uint32(d[i])<<8 | uint32(d[i+1])
	}
	return sum + uint32(proto) + uint32(length)
}

// checksum is the Internet checksum (RFC 1071) of b, starting from sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
