package nvmeof

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// rawHost is a hostile host: an RC connection to a target's queue over
// which it sends whatever capsules it likes.
type rawHost struct {
	conn *cm.Conn
	out  verbs.MR // capsules to send
	in   verbs.MR // completions received
}

func dialRaw(t testing.TB, dev verbs.Context, addr string, qid uint16) *rawHost {
	req := CMRequest{QID: qid, HRQSize: 32, HSQSize: 31}
	pd, _ := req.AppendBinary(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := cm.Dial(ctx, "rdma", addr, &cm.Options{Context: dev, PrivateData: pd,
		Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	h := &rawHost{conn: conn}
	if h.out, err = conn.PD.AllocMR(CommandSize+16384, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if h.in, err = conn.PD.AllocMR(32*CompletionSize, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	for i := range 32 {
		conn.QP.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{h.in.SGE(i*CompletionSize, CompletionSize)}})
	}
	return h
}

// send sends capsule and waits for one completion (or the connection's
// end): it reports whether the queue is still usable.
func (h *rawHost) send(capsule []byte) (Completion, bool) {
	n := copy(h.out.Bytes(), capsule)
	if err := h.conn.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{h.out.SGE(0, n)}}); err != nil {
		return nil, false
	}
	wc := make([]verbs.WC, 4)
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if k, _ := h.conn.SendCQ.Poll(wc); k > 0 && wc[0].Status != verbs.WCSuccess {
			return nil, false
		}
		if k, _ := h.conn.RecvCQ.Poll(wc[:1]); k > 0 {
			if wc[0].Status != verbs.WCSuccess {
				return nil, false
			}
			i := int(wc[0].WRID)
			c := append(Completion(nil), h.in.Bytes()[i*CompletionSize:][:CompletionSize]...)
			h.conn.QP.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{h.in.SGE(i*CompletionSize, CompletionSize)}})
			return c, true
		}
		select {
		case <-h.conn.Done():
			return nil, false
		case <-time.After(200 * time.Microsecond):
		}
	}
	return nil, false
}

func (h *rawHost) close() {
	h.conn.QP.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState)
	h.out.Dereg()
	h.in.Dereg()
	h.conn.Close()
}

// connectCapsule is an admin Connect with its data in the capsule.
func connectCapsule(sub string) []byte { return queueConnectCapsule(sub, 0, 0xffff) }

func queueConnectCapsule(sub string, qid, cntlid uint16) []byte {
	b := make([]byte, CommandSize+connectDataLen)
	c := Command(b)
	c.setHeader(OpcodeFabrics, 1, 0)
	c[4] = fabricsConnect
	binary.LittleEndian.PutUint16(c[42:], qid)
	binary.LittleEndian.PutUint16(c[44:], 31)
	c.SGL().SetInCapsule(0, connectDataLen)
	d := connectData{CNTLID: cntlid, SubNQN: sub, HostNQN: "nqn.2026-11.dev.softrdma:hostile"}
	d.encode(b[CommandSize:])
	return b
}

type hostileFabric struct {
	tdev, hdev verbs.Context
	addr       string
	t          *Target
	store      *MemoryStore
}

func newHostileFabric(tb testing.TB, n byte) *hostileFabric {
	ta, ha := netip.AddrFrom4([4]byte{127, 0, 89, 2 * n}), netip.AddrFrom4([4]byte{127, 0, 89, 2*n + 1})
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: ta.AsSlice()})
	if err != nil {
		tb.Fatal(err)
	}
	port := uint16(probe.LocalAddr().(*net.UDPAddr).Port)
	probe.Close()
	f := &hostileFabric{addr: netip.AddrPortFrom(ta, 4420).String(), store: NewMemoryStore(1 << 20)}
	if f.tdev, err = soft.Open(soft.Config{Addr: ta, Port: port}); err != nil {
		tb.Fatal(err)
	}
	if f.hdev, err = soft.Open(soft.Config{Addr: ha, Port: port}); err != nil {
		tb.Fatal(err)
	}
	f.t, err = NewTarget(TargetConfig{Subsystems: []*Subsystem{{NQN: "nqn.2026-11.dev.softrdma:h", Namespaces: []*Namespace{{ID: 1, Store: f.store}}}}})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := cm.Listen("rdma", f.addr, &cm.Options{Context: f.tdev})
	if err != nil {
		tb.Fatal(err)
	}
	go f.t.Serve(context.Background(), ln)
	return f
}

func (f *hostileFabric) close() {
	f.t.Close()
	f.t.Wait()
	cm.Detach(f.hdev)
	cm.Detach(f.tdev)
	f.hdev.Close()
	f.tdev.Close()
}

// TestHostileCapsules: capsules a host should never send get NVMe
// statuses or a disconnect, never a crash, and the target serves the next
// host.
func TestHostileCapsules(t *testing.T) {
	f := newHostileFabric(t, 1)
	defer f.close()
	h := dialRaw(t, f.hdev, f.addr, 0)
	defer h.close()
	if c, ok := h.send(connectCapsule("nqn.2026-11.dev.softrdma:h")); !ok || c.Status() != StatusSuccess {
		t.Fatalf("connect: %v %v", c, ok)
	}
	identify := func(mut func(Command)) []byte {
		b := make([]byte, CommandSize)
		c := Command(b)
		c.setHeader(AdminIdentify, 7, 0)
		c.setCDW(10, cnsController)
		c.SGL().SetKeyed(0x1000, 4096, 0x1234, false)
		mut(c)
		return b
	}
	for _, tc := range []struct {
		name    string
		capsule []byte
		want    Status
	}{
		{"PRP data pointer", identify(func(c Command) { c[1] = 0 }), StatusInvalidField},
		{"SGL of an unknown type", identify(func(c Command) { c[24+15] = 0x20 }), StatusSGLInvalidType},
		{"in-capsule data past the capsule", identify(func(c Command) { c.SGL().SetInCapsule(100, 4096) }), StatusSGLInvalidOffset},
		{"unknown CNS", identify(func(c Command) { c.setCDW(10, 0x55) }), StatusInvalidField},
		{"log page larger than a transfer", func() []byte {
			b := identify(func(c Command) { c[0] = AdminGetLogPage; c.setCDW(10, LogSMART|0xffff<<16); c.setCDW(11, 0xffff) })
			return b
		}(), StatusInvalidField},
		{"property at a strange offset", func() []byte {
			b := make([]byte, CommandSize)
			c := Command(b)
			c.setHeader(OpcodeFabrics, 3, 0)
			c[4] = fabricsPropertyGet
			binary.LittleEndian.PutUint32(c[44:], 0x1234)
			return b
		}(), StatusInvalidField},
		{"second connect", connectCapsule("nqn.2026-11.dev.softrdma:h"), StatusCmdSeqError},
	} {
		c, ok := h.send(tc.capsule)
		if !ok {
			t.Fatalf("%s: the target dropped the queue", tc.name)
		}
		if c.Status().Code() != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, c.Status(), tc.want)
		}
	}
	// A capsule shorter than a command ends the queue, as Linux's target
	// does; the next host is served.
	if _, ok := h.send([]byte{1, 2, 3}); ok {
		t.Error("a 3-byte capsule got a completion")
	}
	if f.t.Stats.BadCapsules.Load() == 0 {
		t.Error("no bad capsule counted")
	}
	h2 := dialRaw(t, f.hdev, f.addr, 0)
	defer h2.close()
	if c, ok := h2.send(connectCapsule("nqn.2026-11.dev.softrdma:h")); !ok || c.Status() != StatusSuccess {
		t.Fatalf("the next host: %v %v", c, ok)
	}
}

// FuzzTargetCapsule sends arbitrary capsules to an I/O queue of a live
// target, after a valid Connect: it must answer or disconnect, never
// crash, and never write outside the namespace.
func FuzzTargetCapsule(f *testing.F) {
	rw := func(op uint8, lba uint64, nlb uint16, sgl func(SGLDescriptor)) []byte {
		b := make([]byte, CommandSize+4096)
		c := Command(b)
		c.setHeader(op, 9, 1)
		binary.LittleEndian.PutUint64(c[40:], lba)
		c.setCDW(12, uint32(nlb))
		sgl(c.SGL())
		return b
	}
	f.Add(rw(IOWrite, 0, 0, func(d SGLDescriptor) { d.SetInCapsule(0, 4096) }))
	f.Add(rw(IOWrite, 255, 0, func(d SGLDescriptor) { d.SetInCapsule(0, 4096) }))
	f.Add(rw(IOWrite, 256, 0, func(d SGLDescriptor) { d.SetInCapsule(0, 4096) }))
	f.Add(rw(IORead, 1, 3, func(d SGLDescriptor) { d.SetKeyed(0, 16384, 1, true) }))
	f.Add(rw(IODSM, 0, 0, func(d SGLDescriptor) { d.SetInCapsule(0, 16) }))
	f.Add(rw(IOWriteZeroes, 250, 10, func(d SGLDescriptor) {}))
	var fab *hostileFabric
	var admin, h *rawHost
	var cntlid uint16
	f.Cleanup(func() {
		if h != nil {
			h.close()
		}
		if admin != nil {
			admin.close()
		}
		if fab != nil {
			fab.close()
		}
	})
	const nqn = "nqn.2026-11.dev.softrdma:h"
	f.Fuzz(func(t *testing.T, capsule []byte) {
		if fab == nil {
			fab = newHostileFabric(t, 2)
		}
		if admin == nil {
			admin = dialRaw(t, fab.hdev, fab.addr, 0)
			c, ok := admin.send(connectCapsule(nqn))
			if !ok || c.Status() != StatusSuccess {
				t.Fatalf("connect: %v %v", c, ok)
			}
			cntlid = uint16(c.Result())
			b := make([]byte, CommandSize)
			cmd := Command(b)
			cmd.setHeader(OpcodeFabrics, 2, 0)
			cmd[4] = fabricsPropertySet
			binary.LittleEndian.PutUint32(cmd[44:], propCC)
			binary.LittleEndian.PutUint64(cmd[48:], 1|6<<16|4<<20)
			if c, ok := admin.send(b); !ok || c.Status() != StatusSuccess {
				t.Fatalf("enable: %v %v", c, ok)
			}
		}
		if h == nil {
			h = connectIOQueue(t, fab, queueConnectCapsule(nqn, 1, cntlid))
		}
		if len(capsule) > CommandSize+8192 {
			capsule = capsule[:CommandSize+8192]
		}
		if _, ok := h.send(capsule); !ok {
			h.close()
			h = nil
		}
		if fab.store.Size() != 1<<20 {
			t.Fatal("the store changed size")
		}
	})
}

// connectIOQueue connects I/O queue 1 on a new connection. The target
// frees the slot of a queue whose host went away only once it sees the
// disconnect, so until then a new Connect for the same queue is refused
// as busy: that is retried, on a new connection, for a few seconds.
func connectIOQueue(t *testing.T, fab *hostileFabric, capsule []byte) *rawHost {
	deadline := time.Now().Add(10 * time.Second)
	for {
		h := dialRaw(t, fab.hdev, fab.addr, 1)
		c, ok := h.send(capsule)
		if ok && c.Status() == StatusSuccess {
			return h
		}
		h.close()
		if !ok || c.Status()&^StatusDNR != StatusConnectCtrlBusy || time.Now().After(deadline) {
			t.Fatalf("I/O queue connect: %v %v", c, ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
