package shm

// The connection manager's path over shared memory: a QP1 (verbs.GSI) and
// a host-wide directory of rdma_cm services (verbs.ServiceDirectory), so
// that package cm's agent and its MAD state machine run unchanged:
//
//	cm.Dial(ctx, "rdma", "127.0.0.1:7471", &cm.Options{Context: dev})
//	  LookupService ─ connect @softrdma-shm-svc-<uid>-<service ID> ─► the
//	                  listener's device answers its id (SO_PEERCRED checked
//	                  both ways) ─► the peer's GID fd73:686d:<uid>:<id>
//	  SendMAD(GID, QP1) ─ a UD message to QP 1 over the devices' socket ─►
//	                  deliverMAD ─► the peer's MAD handler (cm's agent)
//	  REQ → REP → RTU as on a wire; the QPs then meet as any shm RC QPs do.
//
// A listener binds its service ID as an abstract Unix socket (or a file
// in Config.Dir) named by the uid and the service ID: the kernel lets one
// socket hold a name, so one process of a user listens on a port at a
// time, and frees the name when the process dies. The abstract namespace
// has no permissions: any user can bind the name of another user's
// service first. A lookup therefore accepts an answer only from a
// process of the uid the name carries (SO_PEERCRED), and BindService
// says who holds its name; Config.Dir, a directory only the user can
// write, keeps names private.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/verbs"
)

// gsiQPN is QP1, the General Services Interface: MADs go to it.
const gsiQPN = 1

// SendMAD sends mad from QP1 to QP dstQP of the device whose GID is dst
// (verbs.GSI), as one datagram over the devices' socket: dropped, like a
// lost packet, if the socket is full. A device that no longer exists is
// verbs.ErrUnreachable.
func (d *Device) SendMAD(port uint8, dst verbs.GID, dstQP uint32, qkey uint32, mad []byte) error {
	const op = "SendMAD"
	if port != 1 {
		return verbs.Errorf(op, verbs.ErrNotFound, "port %d: shm devices have one port, number 1", port)
	}
	if len(mad) > maxInline {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "a MAD of %d bytes exceeds the MTU %d", len(mad), maxInline)
	}
	peer, ok := peerOf(dst)
	if !ok {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "%v is not a shm device's GID (fd73:686d::/32)", dst)
	}
	c, err := d.connTo(peer, op)
	if err != nil {
		return err
	}
	m := ctrl{typ: mUD, a: gsiQPN, b: dstQP, c: qkey}
	if err := c.send(&m, mad, -1, true); err != nil {
		return verbs.Errorf(op, verbs.ErrInvalidState, "MAD to %v dropped: %v", dst, err)
	}
	return nil
}

// HandleMADs sets the function that receives the MADs arriving at QP1
// (verbs.GSI); nil drops them. h runs on a connection's reader goroutine:
// it must not block.
func (d *Device) HandleMADs(port uint8, h func(src verbs.MADSource, mad []byte)) error {
	if port != 1 {
		return verbs.Errorf("HandleMADs", verbs.ErrNotFound, "port %d: shm devices have one port, number 1", port)
	}
	if h == nil {
		d.madHandler.Store(nil)
	} else {
		d.madHandler.Store(&h)
	}
	return nil
}

// deliverMAD hands a datagram for QP1 to the MAD handler. The source GID
// is the one the peer's credentials and HELLO proved, not one it claims.
func (d *Device) deliverMAD(c *conn, m *ctrl, payload []byte) {
	h := d.madHandler.Load()
	if h == nil || m.c != verbs.GSIQKey {
		return
	}
	(*h)(verbs.MADSource{GID: gidOf(c.peerUID, c.peerID), QPN: m.a & 0xFFFFFF, PKey: 0xFFFF}, payload)
}

// serviceName is the socket that holds serviceID for uid's processes.
func (d *Device) serviceName(uid uint32, serviceID uint64) string {
	if d.cfg.Dir != "" {
		return filepath.Join(d.cfg.Dir, fmt.Sprintf("svc-%d-%016x.sock", uid, serviceID))
	}
	return fmt.Sprintf("@softrdma-shm-svc-%d-%016x", uid, serviceID)
}

// BindService makes this device the one that serviceID reaches on this
// host for processes of this user (and of users whose devices allow
// this one's uid), until release or Close (verbs.ServiceDirectory). It
// fails with verbs.ErrInUse while another device holds it.
func (d *Device) BindService(port uint8, serviceID uint64) (release func(), err error) {
	const op = "BindService"
	if port != 1 {
		return nil, verbs.Errorf(op, verbs.ErrNotFound, "port %d: shm devices have one port, number 1", port)
	}
	name := d.serviceName(d.uid, serviceID)
	addr := &net.UnixAddr{Name: name, Net: "unixpacket"}
	ln, err := net.ListenUnix("unixpacket", addr)
	if err != nil && d.cfg.Dir != "" && errors.Is(err, syscall.EADDRINUSE) && staleSocket(name) {
		// A process killed while it listened left its socket file.
		os.Remove(name)
		ln, err = net.ListenUnix("unixpacket", addr)
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		if cred, cerr := holderOf(name); cerr == nil && cred.Uid != d.uid {
			d.ctr.serviceSquatted.Add(1)
			return nil, verbs.Errorf(op, verbs.ErrInUse, "service %#x: its name %s is held by pid %d of uid %d, not of uid %d: another user took it (any user can bind any name in the abstract socket namespace); set Config.Dir to a directory only uid %d can write to keep service names private", serviceID, name, cred.Pid, cred.Uid, d.uid, d.uid)
		}
		return nil, verbs.Errorf(op, verbs.ErrInUse, "service %#x: another shm device of uid %d on this host listens on it (%s)", serviceID, d.uid, name)
	}
	if err != nil {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "service %#x: listen on %s: %v", serviceID, name, err)
	}
	ln.SetUnlinkOnClose(d.cfg.Dir != "")
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		ln.Close()
		return nil, verbs.Errorf(op, verbs.ErrDestroyed, "device %s is closed", d.name)
	}
	d.services[ln] = true
	d.wg.Add(1)
	d.mu.Unlock()
	go d.serveLookups(ln)
	return sync.OnceFunc(func() {
		d.mu.Lock()
		delete(d.services, ln)
		d.mu.Unlock()
		ln.Close()
	}), nil
}

// holderOf returns the credentials of the process listening on name.
func holderOf(name string) (*unix.Ucred, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return peerCred(c)
}

// staleSocket says whether nobody listens on the socket file name.
func staleSocket(name string) bool {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// serveLookups answers each connection to a bound service with this
// device's id, if the asker's uid may reach this device, and closes it.
func (d *Device) serveLookups(ln *net.UnixListener) {
	defer d.wg.Done()
	for {
		uc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		if cred, err := peerCred(uc); err == nil && d.uidAllowed(cred.Uid) {
			var b [ctrlHdr]byte
			(&ctrl{typ: mHello, x: d.id}).encode(b[:])
			uc.SetWriteDeadline(time.Now().Add(time.Second))
			uc.Write(b[:])
		}
		uc.Close()
	}
}

func peerCred(uc *net.UnixConn) (*unix.Ucred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

// LookupService returns the GID of the device a dialer of serviceID at
// addr reaches (verbs.ServiceDirectory): addr is a shm GID (that device,
// if it still exists), or an address of this host — loopback, unspecified
// or an interface's — for which the device that bound serviceID answers:
// one of this user's, else one of a user in Config.AllowUIDs.
func (d *Device) LookupService(port uint8, addr netip.Addr, serviceID uint64) (verbs.GID, error) {
	const op = "LookupService"
	if port != 1 {
		return verbs.GID{}, verbs.Errorf(op, verbs.ErrNotFound, "port %d: shm devices have one port, number 1", port)
	}
	if g := verbs.GIDFromAddr(addr); addr.Is6() {
		if peer, ok := peerOf(g); ok {
			if _, err := d.connTo(peer, op); err != nil {
				return verbs.GID{}, err
			}
			return g, nil
		}
	}
	if !isHostAddr(addr) {
		return verbs.GID{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "%v is not an address of this host: shm devices reach processes on this host only (dial a loopback address, or the peer device's GID)", addr)
	}
	var refusal error
	for _, uid := range append([]uint32{d.uid}, d.cfg.AllowUIDs...) {
		g, err := d.askService(uid, serviceID)
		if err == nil {
			if _, err := d.connTo(peerOfGID(g), op); err != nil {
				return verbs.GID{}, err
			}
			return g, nil
		}
		if !errors.Is(err, verbs.ErrNotFound) && refusal == nil {
			refusal = err
		}
	}
	if refusal != nil {
		return verbs.GID{}, refusal
	}
	return verbs.GID{}, verbs.Errorf(op, verbs.ErrNotFound, "no shm device on this host listens on service %#x (port %d)", serviceID, uint16(serviceID))
}

func peerOfGID(g verbs.GID) uint64 {
	id, _ := peerOf(g)
	return id
}

// askService asks the device that holds uid's socket for serviceID which
// device it is. Nobody listening is verbs.ErrNotFound.
func (d *Device) askService(uid uint32, serviceID uint64) (verbs.GID, error) {
	const op = "LookupService"
	name := d.serviceName(uid, serviceID)
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		return verbs.GID{}, verbs.Errorf(op, verbs.ErrNotFound, "%s: %v", name, err)
	}
	defer uc.Close()
	cred, err := peerCred(uc)
	if err != nil {
		return verbs.GID{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "%s: SO_PEERCRED: %v", name, err)
	}
	if cred.Uid != uid {
		// The name is uid's; any user can bind an abstract name, and a
		// user this device allows must not pose as another.
		d.ctr.serviceSquatted.Add(1)
		return verbs.GID{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "%s names uid %d's service but is held by pid %d of uid %d: refused (set Config.Dir to a directory only trusted users can write to keep service names private)", name, uid, cred.Pid, cred.Uid)
	}
	if !d.uidAllowed(cred.Uid) {
		return verbs.GID{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "%s is held by pid %d of uid %d, which device %s does not trust (Config.AllowUIDs)", name, cred.Pid, cred.Uid, d.name)
	}
	var b [ctrlSmall]byte
	uc.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := uc.Read(b[:])
	if err != nil {
		return verbs.GID{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "%s: no answer from pid %d (is its uid allowed by its device?): %v", name, cred.Pid, err)
	}
	m, ok := decodeCtrl(b[:n])
	if !ok || m.typ != mHello || n != ctrlHdr || m.x == 0 {
		return verbs.GID{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "%s: a bad answer from pid %d", name, cred.Pid)
	}
	return gidOf(cred.Uid, m.x), nil
}

// isHostAddr says whether a names this host: loopback, unspecified, or
// an address of one of its interfaces.
func isHostAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ad := range addrs {
		if p, err := netip.ParsePrefix(ad.String()); err == nil && p.Addr().Unmap() == a {
			return true
		}
	}
	return false
}

var (
	_ verbs.GSI              = (*Device)(nil)
	_ verbs.ServiceDirectory = (*Device)(nil)
)
