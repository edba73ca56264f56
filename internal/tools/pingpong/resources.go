package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/metrics"
	"github.com/softrdma/softrdma/provider/shm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// toolObs are the observability flags every tool takes (--pcap FILE,
// --metrics ADDR); openToolDevice applies them to the device it opens.
var toolObs struct {
	pcap    string
	metrics string
	log     bool       // --log (or SOFTRDMA_LOG=1): the device's QP errors, retransmissions and drops on stderr
	files   []*os.File // closed by closeToolFiles, after the devices
}

// closeToolFiles closes the capture files once every device is closed
// (closing a device flushes its capture).
func closeToolFiles() {
	for _, f := range toolObs.files {
		f.Close()
	}
	toolObs.files = nil
}

// openToolDevice opens the device a tool's -d names, or with no -d the
// device SOFTRDMA_ADDR gives, or else the first RoCEv2 device listed (a
// real interface rather than loopback, as rdma-core prefers). A name
// starting with "shm" (shm0, the one the shm provider lists, or any other)
// opens a shared-memory device (provider/shm) instead: its peers are
// processes on this host, and its only GID, index 0, names it.
//
// Precedence: -d wins. SOFTRDMA_ADDR picks the address when -d is absent
// or names the device on that address (softrdma_<netdev>, or
// softrdma_<netdev>_<addr> for an interface's further addresses); when
// -d names another device, SOFTRDMA_ADDR is ignored with a note on
// stderr. The device softrdma_<netdev> is the interface's, with every
// address of it in the GID table (soft.Config.Interface); a device on a
// further address has that address only.
//
// Tools accept packets whose ICRC a UDP socket cannot verify, because
// their peers are usually Linux rxe, which sends non-zero IPv4
// identifications.
func openToolDevice(name string) (verbs.Context, error) {
	if isShmName(name) {
		return ctxOf(openShm(name))
	}
	cfg := soft.Config{Name: name, AcceptUnverifiedICRC: true}
	if a := os.Getenv("SOFTRDMA_ADDR"); a != "" {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("SOFTRDMA_ADDR=%q: %v", a, err)
		}
		envName := ""
		if ifi, err := soft.InterfaceOf(addr); err == nil {
			envName = soft.DeviceName(ifi, addr)
		}
		if name == "" || name == envName {
			return ctxOf(openObserved(deviceConfig(cfg, addr)))
		}
		fmt.Fprintf(os.Stderr, "note: -d %s wins over SOFTRDMA_ADDR=%s (device %s)\n", name, a, envName)
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
			return ctxOf(openObserved(cfg))
		}
		addr, _ := soft.DeviceAddr(d)
		cfg.Name, cfg.Addr = d.Name(), addr
		return ctxOf(openObserved(cfg))
	}
	if name == "" {
		return nil, fmt.Errorf("No IB devices found (set SOFTRDMA_ADDR to an IP address)")
	}
	return nil, fmt.Errorf("IB device %s not found", name)
}

// ctxOf returns a provider's device as a verbs.Context, and a nil
// interface (not a typed nil) with an error.
func ctxOf[D verbs.Context](d D, err error) (verbs.Context, error) {
	if err != nil {
		return nil, err
	}
	return d, nil
}

// isShmName reports whether -d name picks a shared-memory device.
func isShmName(name string) bool { return strings.HasPrefix(name, "shm") }

// openShm opens the shared-memory device name. It has no packets to
// capture and no counters to serve, so --pcap and --metrics are refused
// rather than ignored.
func openShm(name string) (*shm.Device, error) {
	switch {
	case toolObs.pcap != "":
		return nil, fmt.Errorf("--pcap: shared-memory device %s carries no packets", name)
	case toolObs.metrics != "":
		return nil, fmt.Errorf("--metrics: shared-memory device %s has no counters", name)
	}
	return shm.Open(shm.Config{Name: name})
}

// isShm reports whether ctx is a shared-memory device, whose peers are
// named by its GID index 0.
func isShm(ctx verbs.Context) bool {
	_, ok := ctx.(*shm.Device)
	return ok
}

// deviceConfig sets cfg to open the device for local address addr: the
// device of the interface that has addr, with every address of the
// interface in its GID table as rxe's (so -g picks IPv4 or IPv6), or, for
// an address that no interface has exactly (127.0.0.2: loopback answers
// all of 127.0.0.0/8), a device on addr alone.
func deviceConfig(cfg soft.Config, addr netip.Addr) soft.Config {
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

// openObserved opens a device with the --pcap capture and serves its
// counters on --metrics.
func openObserved(cfg soft.Config) (*soft.Device, error) {
	if toolObs.pcap != "" {
		f, err := os.Create(toolObs.pcap)
		if err != nil {
			return nil, fmt.Errorf("--pcap: %w", err)
		}
		toolObs.files = append(toolObs.files, f)
		cfg.Capture = f
	}
	if toolObs.log || os.Getenv("SOFTRDMA_LOG") == "1" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	d, err := soft.Open(cfg)
	if err != nil {
		return nil, err
	}
	if toolObs.metrics != "" {
		addr, _, err := metrics.Serve(context.Background(), toolObs.metrics, d)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("--metrics: %w", err)
		}
		fmt.Fprintf(os.Stderr, "metrics: serving http://%s/metrics\n", addr)
	}
	return d, nil
}

// resources are the verbs objects of a pingpong run.
type resources struct {
	dev     verbs.Context
	pd      verbs.PD
	cq      verbs.CQ
	qp      verbs.QP
	mr      verbs.MR
	buf     []byte
	sendOff int // UD sends from after the 40-byte GRH area
	recvLen int
}

func newResources(dev verbs.Context, typ verbs.QPType, size, rxDepth, sendDepth int, events bool) (*resources, error) {
	r := &resources{dev: dev}
	var err error
	if r.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	bufSize := size
	if typ == verbs.QPTypeUD {
		bufSize += 40
		r.sendOff = 40
	}
	if r.mr, err = r.pd.AllocMR(bufSize, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("Couldn't register MR: %w", err)
	}
	r.buf = r.mr.Bytes()
	var ch *verbs.CompChannel
	if events {
		ch = verbs.NewCompChannel(1)
	}
	if r.cq, err = dev.CreateCQ(rxDepth+sendDepth, ch); err != nil {
		return nil, fmt.Errorf("Couldn't create CQ: %w", err)
	}
	if r.qp, err = r.pd.CreateQP(&verbs.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq, QPType: typ,
		Cap: verbs.QPCap{MaxSendWR: uint32(sendDepth), MaxRecvWR: uint32(rxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("Couldn't create QP: %w", err)
	}
	r.recvLen = bufSize
	return r, nil
}

func (r *resources) close() {
	if r.qp != nil {
		if r.qp.Type() == verbs.QPTypeRC && r.qp.State() == verbs.QPStateRTS {
			r.linger(lingerQuiet, lingerMax)
		}
		r.qp.Destroy()
	}
	if r.cq != nil {
		r.cq.Destroy()
	}
	if r.mr != nil {
		r.mr.Dereg()
	}
	if r.pd != nil {
		r.pd.Dealloc()
	}
}

// An RC QP stays up after the last iteration until the peer has been
// quiet for lingerQuiet (at most lingerMax): if the ACK of the peer's last
// message was lost, the peer retransmits it and needs this QP to answer —
// rxe retries forever at retry_cnt 7, so without this a lost last ACK
// hangs the peer (ibv_rc_pingpong has the same race; it rarely loses).
const (
	lingerQuiet = 200 * time.Millisecond
	lingerMax   = 2 * time.Second
)

// linger waits until the device has received nothing for quiet, or max
// has passed. A shared-memory device lingers quiet (lingerShm).
func (r *resources) linger(quiet, max time.Duration) {
	dev, ok := r.dev.(interface{ Counter(string) (uint64, bool) })
	if !ok {
		lingerShm(r.dev, quiet)
		return
	}
	deadline := time.Now().Add(max)
	last, _ := dev.Counter("rcvd_pkts")
	since := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		n, _ := dev.Counter("rcvd_pkts")
		if n != last {
			last, since = n, time.Now()
			continue
		}
		if time.Since(since) >= quiet {
			return
		}
	}
}

// lingerShm keeps a shared-memory device's QPs up for d after a run:
// the peer's last SEND is acknowledged only when this process consumes it
// from the ring (a NIC acknowledges on arrival), which the device's
// progress goroutine does within milliseconds once the tool stops
// polling; a QP destroyed first fails that SEND at the peer with
// WCRetryExcErr. A pingpong's last messages can be ones this side no
// longer waits for (ibv_srq_pingpong's, one per QP).
func lingerShm(dev verbs.Context, d time.Duration) {
	if isShm(dev) {
		time.Sleep(d)
	}
}

// postRecvs posts up to n receives of the whole buffer, returning how many
// (pp_post_recv stops at the first failure; posting none is an error).
func (r *resources) postRecvs(n, size int) (int, error) {
	wr := verbs.RecvWR{WRID: recvWRID, SGList: []verbs.SGE{r.mr.SGE(0, r.recvLen)}}
	for i := 0; i < n; i++ {
		if err := r.qp.PostRecv(&wr); err != nil {
			if i == 0 {
				return 0, fmt.Errorf("Couldn't post receive: %w", err)
			}
			return i, nil
		}
	}
	return n, nil
}

// ppParams are pingpong.c's QP attributes (pp_init_ctx, pp_connect_ctx):
// cm's defaults except no remote access, the -m MTU, -l SL, -g GID index
// and hop limit 1.
func ppParams(f *ppFlags) *cm.Params {
	p := cm.DefaultParams()
	p.Port = uint8(f.ibPort)
	p.Access = 0
	p.PathMTU = verbs.MTUFromBytes(f.mtu)
	p.SL = uint8(f.sl)
	p.SGIDIndex = uint8(max(f.gidx, 0))
	p.HopLimit = 1
	return &p
}

// initRC moves a new RC or UC QP to INIT, as pingpong.c does right after
// creating it, so receives can be posted before the exchange.
func (r *resources) initRC(f *ppFlags) error {
	if err := cm.Init(r.qp, ppParams(f)); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	return nil
}

// connectRC moves an RC or UC QP from INIT to RTS with pingpong.c's
// attributes. Like the softrdma pingpong before cm, it leaves the DLID 0
// (rxe ignores it).
func (r *resources) connectRC(myPSN, remQPN, remPSN uint32, remGID verbs.GID, f *ppFlags) error {
	p := ppParams(f)
	if err := cm.ReadyToReceive(r.qp, cm.Endpoint{QPN: remQPN, PSN: remPSN, GID: remGID}, p); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	if err := cm.ReadyToSend(r.qp, cm.Endpoint{PSN: myPSN}, p); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}
