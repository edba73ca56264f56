// This file is the Linux transport: batches move with sendmmsg and
// recvmmsg, with UDP GSO and GRO to loopback peers.
//
// The sockets stay out of Go's network poller: with a spare P, the runtime
// parks a thread in epoll_wait, and every datagram arriving on a socket it
// watches would wake that thread, thousands of times a second, to find
// nothing to run while the device's poller receives the datagram itself.
// Blocking waits use ppoll on the socket and an eventfd that Close signals.

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/wire"
)

// sender is one sending socket.
type sender struct {
	fd    int
	port  uint16
	v6    bool
	src   netip.Addr // the address it is bound to
	scope uint32     // interface index of a link-local src, for link-local peers
}

// home is one local address: its receiving socket, bound to the port, and
// its sending sockets senders[first : first+n].
type home struct {
	addr  netip.Addr
	fd    int
	v6    bool
	first int
	n     int
}

// Transport is a transport.Transport over UDP sockets: a receiving socket
// on each local address (Config.Addr first, then Config.Addrs) and sending
// sockets on each. Send and Recv are safe for concurrent use; each
// serialises its callers.
type Transport struct {
	fd    int // the receiving socket of the first address, bound to local
	evfd  int // eventfd, signalled by Close to end blocking waits
	fdMu  sync.RWMutex
	local netip.AddrPort
	homes []home
	addrs []netip.Addr // LocalAddrs
	v6    bool
	mtu   int
	batch int

	gso     bool
	tclass  uint8 // the sockets' TClass (Config.TClass)
	senders []sender
	// sends are the scratch of Send, one per concurrent sender: a
	// device's receive loop sending ACKs and a program's thread posting
	// do not wait for each other's system call (sendState).
	sends [sendStates]sendState
	// steerMu guards steering, the cache of unsharedPeer.
	steerMu sync.Mutex
	// fullAfter, if positive, makes every socket report a full buffer to
	// TrySend after taking that many messages in a call (tests: loopback
	// frees its buffers as it sends, so a real full buffer is hard to get).
	fullAfter int
	// peerShared is Config.PeerShared; steering caches its answers per
	// loopback peer, timed from epoch (steering_linux.go).
	peerShared func(netip.AddrPort) (bool, error)
	steering   map[netip.AddrPort]peerSteering
	epoch      time.Time

	recvMu  sync.Mutex
	rbuf    batchBuf
	rhome   int      // the home whose socket the pending batch came from
	rnext   int      // the home whose socket the next recvmmsg tries first
	rprep   int      // receive headers the last recvmmsg filled, to restore
	rbig    [][]byte // receive buffers, one per message slot
	rlen    []int    // datagram length per slot
	rgso    []int    // GRO segment size per slot (0: one packet)
	rtclass []uint8  // traffic class byte per slot (IP_TOS / IPV6_TCLASS)
	rtrunc  []bool
	pendMsg int // next slot to hand out
	pendEnd int // slots filled by the last recvmmsg
	pendOff int // offset of the next packet in slot pendMsg

	// share is the transport's membership of its addresses' shared
	// groups (nil: bound alone); shareErr says why sharing is off.
	share    Share
	shareErr error

	closed  atomic.Bool
	stats   counters
	unreach atomic.Pointer[func(netip.AddrPort, error)] // OnUnreachable
}

// mmsghdr is struct mmsghdr of sendmmsg(2)/recvmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// sendState is what one Send call works in: its system call arrays and
// the batch regrouped by sending socket. UDP sockets take concurrent
// sendmmsg calls, and a QP's packets are sent under the QP's lock, so two
// sends need nothing else in common. With one state the second sender
// waited for the first's system call: the C library's program thread,
// posting while the device's receive loop sent an ACK, parked, and a
// parked goroutine of a C thread (locked to its thread) is woken by a
// hand-off between OS threads, two context switches: 40 of every 100
// messages of ib_send_lat -e over the library (gdb on runtime.gopark).
type sendState struct {
	mu      sync.Mutex
	sbuf    batchBuf
	grp     []transport.Datagram // the batch regrouped by sending socket
	grpIdx  []uint8
	grpFrom []int // grp[i] is the caller's datagram grpFrom[i]
}

// sendStates is how many Send calls proceed at once; more wait for the
// first state.
const sendStates = 2

// lockSend returns a free send state, locked; if none is free, it waits
// for the first.
func (t *Transport) lockSend() *sendState {
	for i := range t.sends {
		if t.sends[i].mu.TryLock() {
			return &t.sends[i]
		}
	}
	t.sends[0].mu.Lock()
	return &t.sends[0]
}

// batchBuf holds the system call arrays of one direction, allocated once.
type batchBuf struct {
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	addr4 []unix.RawSockaddrInet4
	addr6 []unix.RawSockaddrInet6
	ctrl  []byte // one control-message slot of ctrlSlot bytes per message
	segs  []int  // packets in each message (GSO)
}

// ctrlSlot fits two control messages of up to an int each: on send a
// UDP_SEGMENT (uint16) and an IP_TOS (int) or IPV6_TCLASS (int), on
// receive a UDP_GRO (int) and an IP_TOS (byte) or IPV6_TCLASS (int).
var ctrlSlot = 2 * unix.CmsgSpace(4)

func newBatchBuf(n int) batchBuf {
	return batchBuf{
		hdrs:  make([]mmsghdr, n),
		iovs:  make([]unix.Iovec, 3*n), // a gathered packet takes three
		addr4: make([]unix.RawSockaddrInet4, n),
		addr6: make([]unix.RawSockaddrInet6, n),
		ctrl:  make([]byte, n*ctrlSlot),
		segs:  make([]int, n),
	}
}

// GSO limits: the kernel takes at most 64 segments per send (UDP_MAX_SEGMENTS)
// and a datagram's payload must fit the 16-bit UDP length.
const (
	maxSegments = 64
	maxGSOBytes = 65000
	// bigBuf is the size of a receive buffer: a whole GRO-coalesced
	// datagram fits.
	bigBuf = 65536
)

// Listen opens the transport on cfg.Addr and cfg.Addrs.
func Listen(cfg Config) (*Transport, error) {
	addrs, err := cfg.localAddrs()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	addr := netip.AddrPortFrom(addrs[0], cfg.Port)
	t := &Transport{fd: -1, evfd: -1, local: addr, v6: addr.Addr().Is6(), batch: cfg.BatchSize, mtu: linkMTU(addr.Addr()), tclass: cfg.TClass}
	if t.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, fmt.Errorf("udp.Listen: eventfd: %w", err)
	}
	switch {
	case cfg.Exclusive:
		t.shareErr = errors.New("udp.Config.Exclusive is set")
	case cfg.Share == nil:
		t.shareErr = errors.New("udp.Config.Share is not set")
	default:
		aps := make([]netip.AddrPort, len(addrs))
		for i, a := range addrs {
			aps[i] = netip.AddrPortFrom(a, cfg.Port)
		}
		if t.share, t.shareErr = cfg.Share(aps); t.shareErr != nil {
			t.share = nil
		}
	}
	for _, a := range addrs {
		if err := t.addHome(a, cfg); err != nil {
			t.closeFDs()
			return nil, err
		}
	}
	if t.share != nil {
		fds := make([]int, len(t.homes))
		for i, h := range t.homes {
			fds[i] = h.fd
		}
		if err := t.share.Join(fds); err != nil {
			t.closeFDs()
			return nil, fmt.Errorf("udp.Listen: %w", err)
		}
	}
	t.fd = t.homes[0].fd
	t.addrs = addrs
	t.peerShared, t.epoch = cfg.PeerShared, time.Now()
	for i := range t.sends {
		t.sends[i].sbuf = newBatchBuf(cfg.BatchSize)
	}
	t.rbuf = newBatchBuf(cfg.BatchSize)
	t.rbig = make([][]byte, cfg.BatchSize)
	for i := range t.rbig {
		t.rbig[i] = make([]byte, bigBuf)
	}
	t.rlen = make([]int, cfg.BatchSize)
	t.rgso = make([]int, cfg.BatchSize)
	t.rtclass = make([]uint8, cfg.BatchSize)
	t.rtrunc = make([]bool, cfg.BatchSize)
	for i := range cfg.BatchSize {
		t.prepRecv(i)
	}
	if !cfg.DisableGSO {
		// Receiving coalesced datagrams needs UDP_GRO; without it the
		// kernel splits them again before delivery.
		//
		// A shared socket takes GRO on loopback only: a NIC's GRO merges
		// the datagrams of one 5-tuple, which on a shared address may be
		// meant for several processes' QPs and would all go to the one
		// the first names. Loopback merges nothing; GSO datagrams come
		// whole from their sender, one QP's each (Send).
		t.gso = true
		for _, h := range t.homes {
			if t.share != nil && !h.addr.IsLoopback() {
				continue
			}
			t.gso = t.gso && unix.SetsockoptInt(h.fd, unix.SOL_UDP, unix.UDP_GRO, 1) == nil
		}
	}
	return t, nil
}

// addHome binds the receiving socket of local address a and opens its
// sending sockets.
func (t *Transport) addHome(a netip.Addr, cfg Config) error {
	addr := netip.AddrPortFrom(a, cfg.Port)
	fd, _, err := openSocket(addr, t.share != nil)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			if t.share != nil {
				return fmt.Errorf("udp.Listen: %v is in use by a socket that does not share it (Linux rxe, or a softrdma device that could not share); use another address", addr)
			}
			return fmt.Errorf("udp.Listen: %v is in use: another softrdma device or Linux rxe is bound there and this process cannot share it (%v); use another address", addr, t.shareErr)
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return fmt.Errorf("udp.Listen: %v: no interface has this address", addr)
		}
		return fmt.Errorf("udp.Listen: %v: %w", addr, err)
	}
	v6 := a.Is6()
	h := home{addr: a.WithZone(""), fd: fd, v6: v6, first: len(t.senders)}
	t.homes = append(t.homes, h)
	if serr := setSockopts(fd, v6, cfg.SocketBuffer); serr != nil {
		return fmt.Errorf("udp.Listen: setting Don't Fragment: %w", serr)
	}
	if serr := setTClass(fd, v6, cfg.TClass, true); serr != nil {
		return fmt.Errorf("udp.Listen: %v: %w", addr, serr)
	}
	scope := zoneIndex(a)
	if cfg.SourcePorts < 0 {
		t.senders = append(t.senders, sender{fd: fd, port: addr.Port(), v6: v6, src: h.addr, scope: scope})
	} else {
		for i := 0; i < cfg.SourcePorts; i++ {
			sfd, port, err := openSocket(netip.AddrPortFrom(a, 0), false)
			if err == nil {
				t.senders = append(t.senders, sender{fd: sfd, port: port, v6: v6, src: h.addr, scope: scope})
				err = setSockopts(sfd, v6, cfg.SocketBuffer)
				if err == nil {
					err = setTClass(sfd, v6, cfg.TClass, false)
				}
			}
			if err != nil {
				return fmt.Errorf("udp.Listen: opening sending socket %d on %v: %w", i, a, err)
			}
		}
	}
	t.homes[len(t.homes)-1].n = len(t.senders) - h.first
	return nil
}

// zoneIndex returns the interface index of a's zone (0: none).
func zoneIndex(a netip.Addr) uint32 {
	if z := a.Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			return uint32(ifi.Index)
		}
	}
	return 0
}

// openSocket opens a non-blocking UDP socket bound to addr (port 0: an
// ephemeral port) and returns it with its port; shared sets SO_REUSEPORT
// first. It is not registered with Go's network poller.
//
// A link-local IPv6 address is bound even while it is tentative
// (IPV6_FREEBIND): an interface that has just come up holds its
// link-local address tentative for a second or two (duplicate address
// detection), and the device on it must open meanwhile.
func openSocket(addr netip.AddrPort, shared bool) (int, uint16, error) {
	af := unix.AF_INET
	if addr.Addr().Is6() {
		af = unix.AF_INET6
	}
	fd, err := unix.Socket(af, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, 0, err
	}
	if shared {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			unix.Close(fd)
			return -1, 0, err
		}
	}
	var sa unix.Sockaddr
	if af == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			unix.Close(fd)
			return -1, 0, err
		}
		if addr.Addr().IsLinkLocalUnicast() {
			unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1)
		}
		sa = &unix.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16(), ZoneId: zoneIndex(addr.Addr())}
	} else {
		sa = &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	var port int
	switch a := got.(type) {
	case *unix.SockaddrInet4:
		port = a.Port
	case *unix.SockaddrInet6:
		port = a.Port
	}
	return fd, uint16(port), nil
}

// setSockopts sets Don't Fragment and the buffer sizes. DF on an
// unconnected socket makes Linux send IP ID 0, the value the ICRC is
// computed for. An IPv6 socket also takes datagrams with UDP checksum 0:
// Linux rxe sends RoCEv2 over IPv6 with checksum 0 (the ICRC protects
// the packet; RFC 6936 allows it for tunnels), which the kernel drops
// unless the socket accepts them, as rxe's own socket does.
func setSockopts(fd int, v6 bool, bufSize int) error {
	err := setDontFragment(fd, v6)
	if err == nil {
		err = setRecvErr(fd, v6) // recverr_linux.go
	}
	if v6 && err == nil {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1)
	}
	for _, opt := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[0], bufSize) != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt[1], bufSize)
		}
	}
	return err
}

// setTClass sets the traffic class byte (DSCP and ECN field) a socket
// sends with and, on a receiving socket (recv), asks for every datagram's
// byte in a control message. Linux keeps the ECN bits a UDP socket sets
// (it clears them only for TCP).
func setTClass(fd int, v6 bool, tclass uint8, recv bool) error {
	level, opt, ropt := unix.IPPROTO_IP, unix.IP_TOS, unix.IP_RECVTOS
	if v6 {
		level, opt, ropt = unix.IPPROTO_IPV6, unix.IPV6_TCLASS, unix.IPV6_RECVTCLASS
	}
	if err := unix.SetsockoptInt(fd, level, opt, int(tclass)); err != nil {
		return fmt.Errorf("setting the traffic class: %w", err)
	}
	if recv {
		if err := unix.SetsockoptInt(fd, level, ropt, 1); err != nil {
			return fmt.Errorf("asking for received traffic classes: %w", err)
		}
	}
	return nil
}

// setDontFragment sets Don't Fragment on a UDP socket (path MTU
// discovery "do"), which on an unconnected socket makes Linux send IP ID 0.
func setDontFragment(fd int, v6 bool) error {
	if v6 {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
}

// LocalAddr returns the first bound address (Config.Addr) and the port.
func (t *Transport) LocalAddr() netip.AddrPort { return t.local }

// LocalAddrs returns every address the transport sends from and receives
// on (transport.MultiHomed): Config.Addr, then Config.Addrs, unmapped and
// without zones. The caller must not modify the slice.
func (t *Transport) LocalAddrs() []netip.Addr { return t.addrs }

// LinkMTU returns the MTU of the interface under the bound address.
func (t *Transport) LinkMTU() int { return t.mtu }

// BatchSize returns the batch size.
func (t *Transport) BatchSize() int { return t.batch }

// Stats returns the counters.
func (t *Transport) Stats() Stats {
	return t.stats.snapshot()
}

// Close closes the sockets. It ends blocking Recv, Wait and Send calls
// (through the eventfd) and waits until no call uses the sockets before
// closing them, so a descriptor is never used after it could be reused.
func (t *Transport) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	var one [8]byte
	one[0] = 1 // native endian 1 on little-endian machines; any non-zero count wakes
	unix.Write(t.evfd, one[:])
	t.fdMu.Lock()
	defer t.fdMu.Unlock()
	return t.closeFDs()
}

// closeFDs closes every descriptor the transport opened.
func (t *Transport) closeFDs() error {
	var err error
	for i, h := range t.homes {
		if e := unix.Close(h.fd); i == 0 {
			err = e
		}
	}
	for _, s := range t.senders {
		if !t.isHomeFD(s.fd) {
			unix.Close(s.fd)
		}
	}
	if t.evfd >= 0 {
		unix.Close(t.evfd)
	}
	if t.share != nil {
		t.share.Close()
	}
	return err
}

// Slot returns the transport's slot among the devices that share its
// addresses, and whether it shares them (Config.Share). A device on a
// shared transport numbers its QPs slot<<(24-SlotBits) | n and its
// connection-manager IDs slot<<(32-SlotBits) | n.
func (t *Transport) Slot() (uint32, bool) {
	if t.share == nil {
		return 0, false
	}
	return t.share.Slot(), true
}

// ClaimService steers connection requests for serviceID (an rdma_cm
// service ID: port space and port) on the transport's addresses to this
// process; it fails if a live process on them claimed it first. It does
// nothing on an unshared transport. Each claim is undone by one
// ReleaseService, and all by Close.
func (t *Transport) ClaimService(serviceID uint64) error {
	if t.share == nil {
		return nil
	}
	return t.share.ClaimService(serviceID)
}

// ReleaseService undoes one ClaimService.
func (t *Transport) ReleaseService(serviceID uint64) {
	if t.share != nil {
		t.share.ReleaseService(serviceID)
	}
}

// isHomeFD says whether fd is a receiving socket.
func (t *Transport) isHomeFD(fd int) bool {
	for _, h := range t.homes {
		if h.fd == fd {
			return true
		}
	}
	return false
}

// waitRecv blocks until a receiving socket has a datagram or the
// transport is closed. Precondition: fdMu read-locked.
//
// It polls the sending sockets too, for errors only (POLLERR needs no
// event bit): an ICMP error for a datagram they sent waits on their
// error queue, which drainErrors reads, and the wait goes on.
func (t *Transport) waitRecv() error {
	var arr [2*maxHomes + 8]unix.PollFd
	for {
		if t.closed.Load() {
			return transport.ErrClosed
		}
		fds := arr[:0]
		for _, h := range t.homes {
			fds = append(fds, unix.PollFd{Fd: int32(h.fd), Events: unix.POLLIN})
		}
		fds = append(fds, unix.PollFd{Fd: int32(t.evfd), Events: unix.POLLIN})
		for _, s := range t.senders {
			if !t.isHomeFD(s.fd) {
				fds = append(fds, unix.PollFd{Fd: int32(s.fd)})
			}
		}
		_, err := unix.Ppoll(fds, nil, nil)
		if t.closed.Load() {
			return transport.ErrClosed
		}
		if err != nil && err != unix.EINTR {
			return err
		}
		for _, f := range fds[len(t.homes)+1:] {
			if f.Revents&unix.POLLERR != 0 {
				t.drainErrors(int(f.Fd))
			}
		}
		ready := false
		for _, f := range fds[:len(t.homes)] {
			if f.Revents&unix.POLLERR != 0 && f.Revents&unix.POLLIN == 0 {
				t.drainErrors(int(f.Fd))
				continue
			}
			ready = ready || f.Revents != 0
		}
		if ready {
			return nil
		}
	}
}

// waitFD blocks until fd is ready for events (unix.POLLIN or POLLOUT) or
// the transport is closed. Precondition: fdMu read-locked.
func (t *Transport) waitFD(fd int, events int16) error {
	for {
		if t.closed.Load() {
			return transport.ErrClosed
		}
		fds := [2]unix.PollFd{{Fd: int32(fd), Events: events}, {Fd: int32(t.evfd), Events: unix.POLLIN}}
		_, err := unix.Ppoll(fds[:], nil, nil)
		if t.closed.Load() {
			return transport.ErrClosed
		}
		if err == nil && fds[0].Revents != 0 {
			return nil
		}
		if err != nil && err != unix.EINTR {
			return err
		}
	}
}

func (t *Transport) ipInfo(peer netip.AddrPort, local netip.Addr) wire.IPInfo {
	return wire.IPInfo{Src: peer.Addr().Unmap(), Dst: local, SrcPort: peer.Port(), DstPort: t.local.Port(), DF: true}
}

// homeOf returns the index of the home whose address is a packet's source
// (Datagram.Local; zero means the first), or -1.
func (t *Transport) homeOf(local netip.Addr) int {
	if !local.IsValid() {
		return 0
	}
	if local.Is4In6() {
		local = local.Unmap()
	}
	for i := range t.homes {
		if t.homes[i].addr == local {
			return i
		}
	}
	if local.Zone() != "" {
		return t.homeOf(local.WithZone(""))
	}
	return -1
}

// Gathers reports that Send takes packets with a separate payload
// (transport.Gatherer): they go out as sendmmsg iovecs, without a copy.
func (t *Transport) Gathers() bool { return true }

// Coalesces reports whether Send sends runs of equal-sized packets to
// peer as one GSO datagram (transport.Coalescer): to loopback peers, when
// the kernel supports UDP GSO.
func (t *Transport) Coalesces(peer netip.AddrPort) bool {
	return t.gso && peer.Addr().Unmap().IsLoopback()
}

// senderFor picks the sending socket of a packet: one of its source
// address's, by its flow. The packets' sources were checked by
// checkSources.
//
// To a loopback peer every flow leaves from the address's first socket:
// loopback has no ECMP or RSS for the source ports to spread over, and one
// socket lets the packets of many QPs (a held doorbell batch, the ACKs of
// one receive batch) leave in one sendmmsg, often one GSO datagram, where
// eight sockets took eight calls.
func (t *Transport) senderFor(p *transport.Datagram) int {
	first, n := 0, len(t.senders)
	if len(t.homes) > 1 {
		h := &t.homes[t.homeOf(p.Local)]
		first, n = h.first, h.n
	}
	if p.Peer.Addr().Unmap().IsLoopback() {
		return first
	}
	return first + flowSender(p.Flow, n)
}

// checkSources checks that every packet's source address is one of the
// transport's.
func (t *Transport) checkSources(pkts []transport.Datagram) error {
	if len(t.homes) == 1 {
		for i := range pkts {
			if l := pkts[i].Local; l.IsValid() && l.Unmap().WithZone("") != t.homes[0].addr {
				return fmt.Errorf("udp: packet %d: source address %v is not the transport's (%v)", i, l, t.homes[0].addr)
			}
		}
		return nil
	}
	for i := range pkts {
		if t.homeOf(pkts[i].Local) < 0 {
			return fmt.Errorf("udp: packet %d: source address %v is not one of the transport's %v", i, pkts[i].Local, t.addrs)
		}
	}
	return nil
}

// Send sends pkts in batches of at most BatchSize packets with sendmmsg,
// runs of a QP's equal-sized packets to a loopback peer as one GSO message.
// When a socket's buffer is full it waits for room.
func (t *Transport) Send(pkts []transport.Datagram) (int, error) {
	return t.send(pkts, true)
}

// TrySend is Send that never waits for buffer space (transport.TrySender):
// when a sending socket's buffer is full, the rest of that socket's
// datagrams stay unsent (Sent false) and the other sockets' still go.
func (t *Transport) TrySend(pkts []transport.Datagram) (int, error) {
	for i := range pkts {
		pkts[i].Sent = false
	}
	return t.send(pkts, false)
}

func (t *Transport) send(orig []transport.Datagram, block bool) (int, error) {
	t.fdMu.RLock()
	defer t.fdMu.RUnlock()
	if t.closed.Load() {
		return 0, transport.ErrClosed
	}
	if err := t.checkSources(orig); err != nil {
		return 0, err
	}
	st := t.lockSend()
	defer st.mu.Unlock()
	pkts, regrouped := t.groupBySender(st, orig)
	base := 0 // index in the grouped order of pkts[0]
	total := 0
	for len(pkts) > 0 {
		// A run of packets of one flow goes out in one call.
		si := t.senderFor(&pkts[0])
		s := &t.senders[si]
		b := &st.sbuf
		nmsg, npkt := 0, 0
		niov := 0
		for npkt < len(pkts) && npkt < t.batch && t.senderFor(&pkts[npkt]) == si {
			first := &pkts[npkt]
			seg := first.Len()
			k := 1
			if t.gso && first.Peer.Addr().Unmap().IsLoopback() {
				size := seg
				anyQP := t.unsharedPeer(first.Peer)
				for npkt+k < len(pkts) && npkt+k < t.batch && k < maxSegments {
					q := &pkts[npkt+k]
					ql := q.Len()
					if q.Peer != first.Peer || ql > seg || size+ql > maxGSOBytes || t.senderFor(q) != si || !sameSteering(first, q, anyQP) || q.TClass != first.TClass {
						break
					}
					size += ql
					k++
					if ql < seg {
						break // only the last segment may be shorter
					}
				}
			}
			iov0 := niov
			for j := npkt; j < npkt+k; j++ {
				p := &pkts[j]
				ip := wire.IPInfo{Src: s.src, Dst: p.Peer.Addr().Unmap(), SrcPort: s.port, DstPort: p.Peer.Port(), DF: true}
				if len(p.Payload) == 0 {
					if len(p.Buf) < wire.BTHLen+wire.ICRCLen {
						return total, fmt.Errorf("udp: packet %d of %d bytes is shorter than a BTH and an ICRC", j, len(p.Buf))
					}
					wire.PutICRC(p.Buf, &ip)
					b.iovs[niov].Base = &p.Buf[0]
					b.iovs[niov].SetLen(len(p.Buf))
					niov++
					continue
				}
				// Gather: headers, the payload where it lies, pad and ICRC.
				if p.Split < wire.BTHLen || len(p.Buf)-p.Split < wire.ICRCLen {
					return total, fmt.Errorf("udp: packet %d: %d bytes of headers and %d of trailer cannot hold a BTH and an ICRC", j, p.Split, len(p.Buf)-p.Split)
				}
				head, tail := p.Buf[:p.Split], p.Buf[p.Split:]
				wire.PutICRCv(head, p.Payload, tail, &ip)
				b.iovs[niov].Base = &head[0]
				b.iovs[niov].SetLen(len(head))
				b.iovs[niov+1].Base = &p.Payload[0]
				b.iovs[niov+1].SetLen(len(p.Payload))
				b.iovs[niov+2].Base = &tail[0]
				b.iovs[niov+2].SetLen(len(tail))
				niov += 3
			}
			h := &b.hdrs[nmsg].hdr
			h.Iov = &b.iovs[iov0]
			h.SetIovlen(niov - iov0)
			t.setName(b, nmsg, s, first.Peer)
			if n := putSendCtrl(b.ctrl[nmsg*ctrlSlot:(nmsg+1)*ctrlSlot], k, seg, first.TClass, t.tclass, s.v6); n > 0 {
				h.Control = &b.ctrl[nmsg*ctrlSlot]
				h.SetControllen(n)
			} else {
				h.Control = nil
				h.SetControllen(0)
			}
			b.segs[nmsg] = k
			nmsg++
			npkt += k
		}
		sent, err := t.sendBatch(st, s, nmsg, block)
		t.stats.sendMsgs.Add(uint64(sent))
		if err != nil {
			return total, err
		}
		if block {
			t.stats.sent.Add(uint64(npkt))
			total += npkt
			pkts, base = pkts[npkt:], base+npkt
			continue
		}
		// Mark the datagrams of the messages that went.
		j := 0
		for m := 0; m < sent; m++ {
			for range b.segs[m] {
				i := base + j
				if regrouped {
					i = st.grpFrom[i]
				}
				orig[i].Sent = true
				j++
			}
		}
		t.stats.sent.Add(uint64(j))
		total += j
		if sent < nmsg {
			// This socket is full: skip the rest of its datagrams.
			for npkt < len(pkts) && t.senderFor(&pkts[npkt]) == si {
				npkt++
			}
		}
		pkts, base = pkts[npkt:], base+npkt
	}
	return total, nil
}

// groupBySender returns pkts with the packets of each sending socket
// together, each flow's packets in their order: a batch that mixes many
// QPs (the ACKs of one receive batch) then leaves in one sendmmsg per
// socket rather than one per run. Precondition: st locked.
//
// regrouped says that the result is a reordered copy, whose datagram i is
// pkts[st.grpFrom[i]].
func (t *Transport) groupBySender(st *sendState, pkts []transport.Datagram) (_ []transport.Datagram, regrouped bool) {
	if len(t.senders) < 2 || len(pkts) < 2 {
		return pkts, false
	}
	st.grpIdx = st.grpIdx[:0]
	mixed := false
	for i := range pkts {
		s := uint8(t.senderFor(&pkts[i]))
		st.grpIdx = append(st.grpIdx, s)
		if s != st.grpIdx[0] {
			mixed = true
		}
	}
	if !mixed {
		return pkts, false
	}
	st.grp, st.grpFrom = st.grp[:0], st.grpFrom[:0]
	for s := range t.senders {
		for i := range pkts {
			if int(st.grpIdx[i]) == s {
				st.grp = append(st.grp, pkts[i])
				st.grpFrom = append(st.grpFrom, i)
			}
		}
	}
	return st.grp, true
}

// setName points message i's address at peer, in the family of sending
// socket s (a link-local peer is on s's link).
func (t *Transport) setName(b *batchBuf, i int, s *sender, peer netip.AddrPort) {
	h := &b.hdrs[i].hdr
	if s.v6 {
		sa := &b.addr6[i]
		sa.Family = unix.AF_INET6
		sa.Addr = peer.Addr().As16()
		sa.Scope_id = 0
		if peer.Addr().IsLinkLocalUnicast() {
			sa.Scope_id = s.scope
		}
		putPort(&sa.Port, peer.Port())
		h.Name = (*byte)(unsafe.Pointer(sa))
		h.Namelen = unix.SizeofSockaddrInet6
		return
	}
	sa := &b.addr4[i]
	sa.Family = unix.AF_INET
	sa.Addr = peer.Addr().Unmap().As4()
	putPort(&sa.Port, peer.Port())
	h.Name = (*byte)(unsafe.Pointer(sa))
	h.Namelen = unix.SizeofSockaddrInet4
}

// sendBatch sends the first n prepared messages and returns how many went.
// A message the kernel refuses (an unreachable peer, a too-large packet)
// is dropped and counted, as a network would drop it. When the socket's
// buffer is full it waits for room if block, else it returns at once.
// Precondition: st locked, fdMu read-locked.
func (t *Transport) sendBatch(st *sendState, s *sender, n int, block bool) (int, error) {
	off := 0
	for off < n {
		t.stats.sendCalls.Add(1)
		hdrs := st.sbuf.hdrs[off:]
		// A raw system call: the socket is non-blocking, so it never
		// sleeps (EAGAIN sends us to waitFD), and without the runtime's
		// entersyscall the goroutine keeps its P. With it, a sendmmsg that
		// copies megabytes lets sysmon hand the P to another thread, and
		// the poller hops between threads on every long call.
		want := n - off
		if !block && t.fullAfter > 0 {
			if off >= t.fullAfter {
				return off, nil
			}
			want = min(want, t.fullAfter-off)
		}
		r, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(want), 0, 0, 0)
		switch {
		case errno == unix.EAGAIN || errno == unix.ENOBUFS:
			// The socket buffer is full: wait until it drains.
			if !block {
				return off, nil
			}
			if err := t.waitFD(s.fd, unix.POLLOUT); err != nil {
				return off, transport.ErrClosed
			}
		case errno == unix.EINTR:
		case icmpErrno(errno) && t.drainErrors(s.fd) > 0:
			// An ICMP error for an earlier datagram, reported as the
			// socket's pending error: this message did not go. Again.
		case errno != 0:
			// The message at off failed: skip it.
			t.stats.sendErrors.Add(1)
			off++
		default:
			off += int(r)
		}
	}
	return n, nil
}

func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

func getPort(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// Recv receives a batch with recvmmsg, blocking (in ppoll)
// until at least one datagram is there.
func (t *Transport) Recv(pkts []transport.Datagram) (int, error) {
	return t.recv(pkts, true)
}

// TryRecv receives what is waiting, without blocking; see transport.Poller.
// It returns 0 at once if another goroutine is receiving. With several
// addresses (Config.Addrs) each call looks at one address's socket, in
// turn, so it may return 0 while a packet waits on another address: the
// following calls reach it (Wait returns at once meanwhile).
func (t *Transport) TryRecv(pkts []transport.Datagram) (int, error) {
	if !t.recvMu.TryLock() {
		return 0, nil
	}
	defer t.recvMu.Unlock()
	return t.recvLocked(pkts, false)
}

// Wait blocks (in ppoll) until a datagram is waiting, without
// receiving it and without holding the receive lock. Like any blocking
// system call it holds its thread; the Go runtime hands the thread's P to
// other goroutines once the call has lasted a scheduler tick (with
// GOMAXPROCS=1 that tick is their wait).
func (t *Transport) Wait() error {
	t.fdMu.RLock()
	defer t.fdMu.RUnlock()
	if err := t.waitRecv(); err != nil {
		return transport.ErrClosed
	}
	return nil
}

func (t *Transport) recv(pkts []transport.Datagram, block bool) (int, error) {
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	return t.recvLocked(pkts, block)
}

func (t *Transport) recvLocked(pkts []transport.Datagram, block bool) (int, error) {
	t.fdMu.RLock()
	defer t.fdMu.RUnlock()
	if t.closed.Load() {
		return 0, transport.ErrClosed
	}
	if len(pkts) == 0 {
		return 0, nil
	}
	if t.pendMsg < t.pendEnd {
		return t.drain(pkts), nil
	}
	b := &t.rbuf
	n := t.batch
	// recvmmsg rewrites the name and control lengths and the flags of
	// the headers it fills; restore those of the last batch.
	for i := 0; i < t.rprep; i++ {
		t.prepRecv(i)
	}
	t.rprep = 0
	var got int
	tries := 0 // receiving sockets found empty in a row
	for {
		// Raw, as in sendBatch: the socket is non-blocking. With several
		// addresses, the sockets take turns, one per call of TryRecv: a
		// busy poller on an idle device then costs one system call per
		// poll however many addresses the device has, and a packet on
		// another address waits at most that many polls.
		hi := t.rnext
		r, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, uintptr(t.homes[hi].fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(n), 0, 0, 0)
		if len(t.homes) > 1 {
			t.rnext = (hi + 1) % len(t.homes)
		}
		if errno == 0 {
			got = int(r)
			t.rhome = hi
			break
		}
		switch {
		case errno == unix.EAGAIN && !block:
			return 0, nil
		case errno == unix.EAGAIN && tries+1 < len(t.homes):
			tries++
		case errno == unix.EAGAIN:
			tries = 0
			if err := t.waitRecv(); err != nil {
				return 0, err
			}
		case errno == unix.EINTR:
		case icmpErrno(errno):
			// An ICMP error for a datagram this socket sent: read the
			// error queue and receive again.
			t.drainErrors(t.homes[hi].fd)
		default:
			if t.closed.Load() {
				return 0, transport.ErrClosed
			}
			return 0, errno
		}
	}
	t.rprep = got
	t.stats.recvCalls.Add(1)
	for i := 0; i < got; i++ {
		mh := &b.hdrs[i]
		t.rlen[i] = int(mh.len)
		t.rtrunc[i] = mh.hdr.Flags&unix.MSG_TRUNC != 0
		t.rgso[i], t.rtclass[i] = parseRecvCtrl(b.ctrl[i*ctrlSlot : i*ctrlSlot+min(int(mh.hdr.Controllen), ctrlSlot)])
	}
	t.pendMsg, t.pendEnd, t.pendOff = 0, got, 0
	return t.drain(pkts), nil
}

// prepRecv points receive header i at its buffer, address and control
// slot.
func (t *Transport) prepRecv(i int) {
	b := &t.rbuf
	b.iovs[i].Base = &t.rbig[i][0]
	b.iovs[i].SetLen(bigBuf)
	h := &b.hdrs[i].hdr
	h.Iov = &b.iovs[i]
	h.SetIovlen(1)
	h.Flags = 0
	h.Control = &b.ctrl[i*ctrlSlot]
	h.SetControllen(ctrlSlot)
	// Room for either family: the sockets of several homes share the
	// headers.
	h.Name = (*byte)(unsafe.Pointer(&b.addr6[i]))
	h.Namelen = unix.SizeofSockaddrInet6
}

// drain hands out received packets, splitting GRO-coalesced datagrams at
// their segment size.
func (t *Transport) drain(pkts []transport.Datagram) int {
	b := &t.rbuf
	hm := &t.homes[t.rhome]
	local := hm.addr
	k := 0
	for k < len(pkts) && t.pendMsg < t.pendEnd {
		i := t.pendMsg
		end := t.rlen[i]
		seg := end - t.pendOff
		if g := t.rgso[i]; g > 0 && g < seg {
			seg = g
		}
		data := t.rbig[i][t.pendOff : t.pendOff+seg]
		t.pendOff += seg
		if t.pendOff >= end {
			t.pendMsg++
			t.pendOff = 0
		}
		p := &pkts[k]
		k++
		// Hand out the packet where it landed: no copy. It stays valid
		// until the next Recv or TryRecv (see transport.Transport.Recv).
		p.Buf = data
		n := len(data)
		if hm.v6 {
			sa := &b.addr6[i]
			p.Peer = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), getPort(sa.Port))
		} else {
			sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&b.addr6[i]))
			p.Peer = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), getPort(sa.Port))
		}
		p.Local = local
		p.Flow = 0
		p.TClass = t.rtclass[i]
		t.stats.received.Add(1)
		switch {
		case t.rtrunc[i] || n < len(data) || n < wire.BTHLen+wire.ICRCLen:
			t.stats.truncated.Add(1)
			p.ICRC = transport.ICRCBad
		default:
			ip := t.ipInfo(p.Peer, local)
			switch {
			case wire.CheckICRC(p.Buf, &ip):
				p.ICRC = transport.ICRCOK
			case hm.v6:
				t.stats.icrcBad.Add(1)
				p.ICRC = transport.ICRCBad
			default:
				t.stats.icrcUnverified.Add(1)
				p.ICRC = transport.ICRCUnverified
			}
		}
	}
	return k
}
