// Package device opens the devices softrdma's tools run on, the same way
// in every tool: from a -d name or the SOFTRDMA_* environment (Env), with
// the observability flags every tool takes (--pcap FILE, --metrics ADDR,
// --log) applied to the device it opens.
package device

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/softrdma/softrdma/metrics"
	"github.com/softrdma/softrdma/provider/shm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/transport/capture"
	"github.com/softrdma/softrdma/verbs"
)

// Opener opens the devices of one run of a tool. Set the observability
// fields from the tool's flags before the first Open, and Close the
// Opener after the devices. Open is safe for concurrent use.
type Opener struct {
	Env Env
	// Pcap (--pcap FILE) captures the device's RoCEv2 packets as pcapng.
	Pcap string
	// Metrics (--metrics ADDR) serves the device's counters for
	// Prometheus on ADDR/metrics until the run's context ends.
	Metrics string
	// Log (--log) logs the device's QP errors, retransmissions, RNR waits
	// and drops on Stderr (rate-limited).
	Log bool
	// ProcessAddrs opens RoCEv2 devices whose MR addresses are process
	// addresses (soft.Config.ProcessAddrs), as the C library needs.
	ProcessAddrs bool
	// StepAsideCheck, if set, is the RoCEv2 devices'
	// soft.Config.StepAsideCheck (the C library's programs may wait for
	// packets without polling).
	StepAsideCheck time.Duration

	ctx    context.Context
	stderr io.Writer

	mu    sync.Mutex
	files []*os.File     // capture files: Close closes them, after the devices
	softs []*soft.Device // with Env.Counters: Close writes their counters
}

// NewOpener returns an Opener for a run that ends with ctx, reading the
// environment (LoadEnv) and writing notes to stderr.
func NewOpener(ctx context.Context, stderr io.Writer) (*Opener, error) {
	env, err := LoadEnv()
	if err != nil {
		return nil, err
	}
	return &Opener{Env: env, ctx: ctx, stderr: stderr}, nil
}

// Close closes the capture files once every device is closed (closing a
// device flushes its capture) and, with SOFTRDMA_COUNTERS, writes the
// devices' final counters.
func (o *Opener) Close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range o.files {
		f.Close()
	}
	o.files = nil
	if o.Env.Counters != "" && len(o.softs) > 0 {
		if err := writeCounters(o.Env.Counters, o.softs); err != nil {
			fmt.Fprintf(o.stderr, " Warning: SOFTRDMA_COUNTERS: %v\n", err)
		}
	}
	o.softs = nil
}

// writeCounters writes each device's counters to path: a "device NAME"
// line, then "name value" lines.
func writeCounters(path string, devs []*soft.Device) error {
	var b strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&b, "device %s\n", d.Name())
		for _, c := range d.Counters() {
			fmt.Fprintf(&b, "%s %d\n", c.Name, c.Value)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Open opens the device a tool's -d names, or with no -d the device
// SOFTRDMA_ADDR gives, or else the first RoCEv2 device listed (a real
// interface rather than loopback, as rdma-core prefers). A name starting
// with "shm" (shm0, the one the shm provider lists, or any other) opens a
// shared-memory device (provider/shm) instead: its peers are processes on
// this host, and its only GID, index 0, names it.
//
// Precedence: -d wins. SOFTRDMA_ADDR picks the address when -d is absent
// or names the device on that address (softrdma_<netdev>, or
// softrdma_<netdev>_<addr> for an interface's further addresses); when
// -d names another device, SOFTRDMA_ADDR is ignored with a note on
// stderr. The device softrdma_<netdev> is the interface's, with every
// address of it in the GID table (soft.Config.Interface); a device on a
// further address has that address only.
//
// A name the kernel lists (rxe0, mlx5_0) opens that kernel RDMA device
// through provider/ibverbs, in a build with the tag ibverbs.
//
// Tools accept packets whose ICRC a UDP socket cannot verify, because
// their peers are usually Linux rxe, which sends non-zero IPv4
// identifications.
func (o *Opener) Open(name string) (verbs.Context, error) {
	if IsShmName(name) {
		return ctxOf(o.openShm(name))
	}
	if c, ok, err := o.openKernel(name); ok {
		return c, err
	}
	cfg := soft.Config{Name: name, AcceptUnverifiedICRC: true}
	if a := o.Env.Addr; a != "" {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("SOFTRDMA_ADDR=%q: %v", a, err)
		}
		envName := ""
		if ifi, err := soft.InterfaceOf(addr); err == nil {
			envName = soft.DeviceName(ifi, addr)
		}
		if name == "" || name == envName {
			return ctxOf(o.OpenSoft(Config(cfg, addr)))
		}
		fmt.Fprintf(o.stderr, "note: -d %s wins over SOFTRDMA_ADDR=%s (device %s)\n", name, a, envName)
	}
	devs, err := verbs.Devices()
	if err != nil {
		return nil, err
	}
	var roce []verbs.Device // the soft provider's: a tool without -d picks one
	for _, d := range devs {
		if _, ok := soft.DeviceAddr(d); ok {
			roce = append(roce, d)
		}
	}
	for _, d := range roce {
		if name != "" && d.Name() != name {
			continue
		}
		if name == "" && d.Name() == "softrdma_lo" && len(roce) > 1 {
			continue // like rdma-core, prefer a real network device
		}
		if netdev, ok := soft.DeviceInterface(d); ok {
			cfg.Name, cfg.Interface = d.Name(), netdev
			return ctxOf(o.OpenSoft(cfg))
		}
		addr, _ := soft.DeviceAddr(d)
		cfg.Name, cfg.Addr = d.Name(), addr
		return ctxOf(o.OpenSoft(cfg))
	}
	if name == "" {
		return nil, fmt.Errorf("No IB devices found (set SOFTRDMA_ADDR to an IP address)")
	}
	return nil, fmt.Errorf("IB device %s not found%s", name, kernelHint())
}

// OpenCM opens the device of a librdmacm-style tool: the shared-memory
// device SOFTRDMA_DEVICE names (shm0, shm1, ...; these tools' flags have
// no -d), else the softrdma device for a local address: SOFTRDMA_ADDR,
// else local, else the address the routing table uses towards remote.
func (o *Opener) OpenCM(local, remote string) (verbs.Context, error) {
	if name := o.Env.Device; name != "" {
		if !IsShmName(name) {
			return nil, fmt.Errorf("SOFTRDMA_DEVICE=%q: only shared-memory devices (shm0, ...) are chosen by name here; RoCEv2 devices by address (SOFTRDMA_ADDR, -a, -I, -b)", name)
		}
		return ctxOf(o.openShm(name))
	}
	a := o.Env.Addr
	if a == "" {
		a = local
	}
	if a == "" && remote != "" {
		ip, err := ResolveIP(remote)
		if err != nil {
			return nil, err
		}
		c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: ip.AsSlice(), Port: 9})
		if err != nil {
			return nil, err
		}
		a = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap().String()
		c.Close()
	}
	if a == "" {
		return nil, fmt.Errorf("no local address: give -a (server), -I (client) or set SOFTRDMA_ADDR")
	}
	addr, err := ResolveIP(a)
	if err != nil {
		return nil, err
	}
	if c, ok, err := o.openKernelAddr(addr); ok {
		return c, err // kernelcm.go
	}
	return ctxOf(o.OpenSoft(Config(soft.Config{AcceptUnverifiedICRC: true}, addr)))
}

// ctxOf returns a provider's device as a verbs.Context, and a nil
// interface (not a typed nil) with an error.
func ctxOf[D verbs.Context](d D, err error) (verbs.Context, error) {
	if err != nil {
		return nil, err
	}
	return d, nil
}

// IsShmName reports whether -d name picks a shared-memory device.
func IsShmName(name string) bool { return strings.HasPrefix(name, "shm") }

// openShm opens the shared-memory device name. It has no packets to
// capture and no counters to serve, so --pcap and --metrics are refused
// rather than ignored.
func (o *Opener) openShm(name string) (*shm.Device, error) {
	switch {
	case o.Pcap != "":
		return nil, fmt.Errorf("--pcap: shared-memory device %s carries no packets", name)
	case o.Metrics != "":
		return nil, fmt.Errorf("--metrics: shared-memory device %s has no counters", name)
	}
	return shm.Open(shm.Config{Name: name})
}

// IsShm reports whether ctx is a shared-memory device, whose peers are
// named by its GID index 0.
func IsShm(ctx verbs.Context) bool {
	_, ok := ctx.(*shm.Device)
	return ok
}

// Config sets cfg to open the device for local address addr: the
// device of the interface that has addr, with every address of the
// interface in its GID table as rxe's (so -g picks IPv4 or IPv6), or, for
// an address that no interface has exactly (127.0.0.2: loopback answers
// all of 127.0.0.0/8), a device on addr alone.
func Config(cfg soft.Config, addr netip.Addr) soft.Config {
	if netdev, err := soft.InterfaceOf(addr); err == nil {
		if ifi, err := net.InterfaceByName(netdev); err == nil {
			ads, _ := ifi.Addrs()
			for _, ad := range ads {
				if p, err := netip.ParsePrefix(ad.String()); err == nil && p.Addr().Unmap() == addr.Unmap() {
					if cfg.Name == "" {
						cfg.Name = "softrdma_" + netdev
					}
					cfg.Interface = netdev
					return cfg
				}
			}
		}
	}
	cfg.Addr = addr
	return cfg
}

// OpenSoft opens a softrdma device with cfg, tuned by the environment
// (Env.Tune), with the --pcap capture, the --log logger, and its counters
// served on --metrics.
func (o *Opener) OpenSoft(cfg soft.Config) (*soft.Device, error) {
	o.Env.Tune(&cfg)
	cfg.ProcessAddrs = cfg.ProcessAddrs || o.ProcessAddrs
	if cfg.StepAsideCheck == 0 {
		cfg.StepAsideCheck = o.StepAsideCheck
	}
	if o.Pcap != "" {
		f, err := os.Create(o.Pcap)
		if err != nil {
			return nil, fmt.Errorf("--pcap: %w", err)
		}
		o.mu.Lock()
		o.files = append(o.files, f)
		o.mu.Unlock()
		cfg.Tap = capture.Tap(f)
	}
	if o.Log || o.Env.Log {
		cfg.Logger = slog.New(slog.NewTextHandler(o.stderr, nil))
	}
	d, err := soft.Open(cfg)
	if err != nil {
		return nil, err
	}
	if o.Env.Counters != "" {
		o.mu.Lock()
		o.softs = append(o.softs, d)
		o.mu.Unlock()
	}
	if o.Metrics != "" {
		addr, _, err := metrics.Serve(o.ctx, o.Metrics, d)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("--metrics: %w", err)
		}
		fmt.Fprintf(o.stderr, "metrics: serving http://%s/metrics\n", addr)
	}
	return d, nil
}

// LocalAddr is the address a tool's listener binds on dev: a softrdma
// device's IP; on a shared-memory device, whose listeners are found by
// port on the host, the unspecified address (the listener reports its
// GID).
func LocalAddr(dev verbs.Context) netip.Addr {
	if d, ok := dev.(*soft.Device); ok {
		return d.LocalAddr()
	}
	return netip.IPv4Unspecified()
}

// ResolveIP parses host as an IP address or looks it up, as the rdma-core
// tools' getaddrinfo does.
func ResolveIP(host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed - invalid hostname or IP address %q", host)
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

// OpenCMServer opens the device a librdmacm-style server listens on: the
// one SOFTRDMA_DEVICE, SOFTRDMA_ADDR or the bind address names. With none
// of them (or an unspecified bind address) it returns nil: the server
// listens on every device of the host, as rdma_cm binds a listener on the
// unspecified address to every RDMA device.
func (o *Opener) OpenCMServer(bind string) (verbs.Context, error) {
	if a, err := netip.ParseAddr(bind); err == nil && a.IsUnspecified() {
		bind = ""
	}
	if bind == "" && o.Env.Device == "" && o.Env.Addr == "" {
		return nil, nil
	}
	return o.OpenCM(bind, "")
}

// ListenAddr is the address a server's listener binds: dev's (see
// LocalAddr), or with no device the unspecified address, which listens
// on every device.
func ListenAddr(dev verbs.Context, port int) string {
	if dev == nil {
		return netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port)).String()
	}
	return netip.AddrPortFrom(LocalAddr(dev), uint16(port)).String()
}

// Close closes dev if there is one.
func Close(dev verbs.Context) {
	if dev != nil {
		dev.Close()
	}
}
