package main

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolSetTxCsum is ETHTOOL_STXCSUM of linux/ethtool.h: set the device's transmit checksum
// offload (the legacy command behind `ethtool -K DEV tx off`).
const ethtoolSetTxCsum = 0x17

// ethtoolValue is struct ethtool_value of linux/ethtool.h.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqData is struct ifreq with ifr_data (linux/if.h): the name, then a pointer in the union.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// txChecksumOff turns off transmit checksum offload of the device ifName in the current network
// namespace (SIOCETHTOOL ETHTOOL_STXCSUM 0): the kernel then completes every checksum itself.
func txChecksumOff(ifName string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tx checksum offload of %s: socket: %w", ifName, err)
	}
	defer unix.Close(fd)
	v := ethtoolValue{cmd: ethtoolSetTxCsum, data: 0}
	var req ifreqData
	copy(req.name[:unix.IFNAMSIZ-1], ifName)
	req.data = unsafe.Pointer(&v)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return fmt.Errorf("tx checksum offload of %s off (SIOCETHTOOL): %w", ifName, errno)
	}
	return nil
}
