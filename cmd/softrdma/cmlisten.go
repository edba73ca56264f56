package main

import (
	"net/netip"
	"os"

	"github.com/softrdma/softrdma/verbs"
)

// openCMServerDevice opens the device a librdmacm-style server listens
// on: the one SOFTRDMA_DEVICE, SOFTRDMA_ADDR or the bind address names.
// With none of them (or an unspecified bind address) it returns nil: the
// server listens on every device of the host, as rdma_cm binds a
// listener on the unspecified address to every RDMA device.
func openCMServerDevice(bind string) (verbs.Context, error) {
	if a, err := netip.ParseAddr(bind); err == nil && a.IsUnspecified() {
		bind = ""
	}
	if bind == "" && os.Getenv("SOFTRDMA_DEVICE") == "" && os.Getenv("SOFTRDMA_ADDR") == "" {
		return nil, nil
	}
	return openCMDevice(bind, "")
}

// cmListenAddr is the address a server's listener binds: dev's (see
// cmLocalAddr), or with no device the unspecified address, which listens
// on every device.
func cmListenAddr(dev verbs.Context, port int) string {
	if dev == nil {
		return netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port)).String()
	}
	return netip.AddrPortFrom(cmLocalAddr(dev), uint16(port)).String()
}

// closeDevice closes dev if there is one.
func closeDevice(dev verbs.Context) {
	if dev != nil {
		dev.Close()
	}
}
