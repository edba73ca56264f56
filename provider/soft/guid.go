package soft

// Stable device identity: node GUIDs and names that do not change from run
// to run and differ between devices, as rxe's do.

import (
	"encoding/binary"
	"hash/fnv"
	"net"
	"net/netip"
	"strings"
)

// NodeGUID is the node (and system image) GUID of a device on interface
// ifi bound to addr.
//
// An interface with a 48-bit MAC gets rxe's GUID: the MAC's modified
// EUI-64 (rxe_init_device_param and rxe_register_device call
// addrconf_addr_eui48: ff:fe inserted in the middle, the universal/local
// bit flipped), so 52:54:00:77:00:02 gives 5054:00ff:fe77:0002, the GUID
// ibv_devinfo shows for rxe0 on that interface.
//
// An interface without one (loopback, tun) gets the modified EUI-64 of a
// made-up, locally administered MAC 02:xx:xx:xx:xx:xx whose last five
// bytes are the first five of the FNV-1a 64 hash of "<interface>/<addr>":
// stable across runs and hosts, and different for two devices on
// loopback (127.0.0.1 and 127.0.0.2).
func NodeGUID(ifi *net.Interface, addr netip.Addr) uint64 {
	mac := ifi.HardwareAddr
	if len(mac) != 6 {
		h := fnv.New64a()
		h.Write([]byte(ifi.Name + "/" + addr.Unmap().String()))
		var sum [8]byte
		binary.BigEndian.PutUint64(sum[:], h.Sum64())
		mac = net.HardwareAddr{0x02, sum[0], sum[1], sum[2], sum[3], sum[4]}
	}
	return eui48to64(mac)
}

// eui48to64 is the kernel's addrconf_addr_eui48.
func eui48to64(mac net.HardwareAddr) uint64 {
	var eui [8]byte
	copy(eui[0:3], mac[0:3])
	eui[3], eui[4] = 0xFF, 0xFE
	copy(eui[5:8], mac[3:6])
	eui[0] ^= 2
	return binary.BigEndian.Uint64(eui[:])
}

// linkLocalFromGUID is the link-local GID fe80::<guid>, for interfaces
// whose MAC gives none.
func linkLocalFromGUID(guid uint64) netip.Addr {
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(b[8:], guid)
	return netip.AddrFrom16(b)
}

// DeviceName is the default name of a device on interface netdev bound to
// addr: "softrdma_<netdev>" for the interface's first address (the device
// the provider lists), "softrdma_<netdev>_<addr>" with the address's dots
// and colons as underscores otherwise (softrdma_lo_127_0_0_2), so that two
// devices on one interface never share a name.
func DeviceName(netdev string, addr netip.Addr) string {
	name := "softrdma_" + netdev
	if ifi, err := net.InterfaceByName(netdev); err == nil {
		if first, ok := firstAddr(*ifi); ok && first.Unmap() == addr.Unmap() {
			return name
		}
	}
	return name + "_" + strings.NewReplacer(".", "_", ":", "_").Replace(addr.Unmap().String())
}
