package rdmanet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzRx drives the receive half with what a hostile peer controls (the
// immediates it sends and the byte counts it claims) mixed with reads and
// credit grants, and checks that the accounting never lets a message
// exceed its credits or the granted ring, and that reads stay inside the
// ring.
func FuzzRx(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 100, 1, 0, 0, 0, 50, 2, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1})
	f.Add(binary.BigEndian.AppendUint32([]byte{3}, msgSet(5, 7)))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const size = 1024
		r := newRx(size, 16)
		ring := make([]byte, size)
		buf := make([]byte, size+10)
		for len(ops) >= 5 {
			op, arg := ops[0], binary.BigEndian.Uint32(ops[1:5])
			ops = ops[5:]
			switch op % 4 {
			case 0: // a data message of arg bytes
				before := r
				err := r.onData(arg % (2 * size))
				if err != nil {
					if !errors.Is(err, errProtocol) {
						t.Fatalf("onData: %v", err)
					}
					if r.count != before.count || r.queued != before.queued {
						t.Fatal("a refused message changed the state")
					}
					return // the connection closes
				}
			case 1: // a Read
				n := r.read(buf[:int(arg%uint32(len(buf)))], ring)
				if n < 0 || n > len(buf) {
					t.Fatalf("read %d", n)
				}
			case 2:
				if r.needCredits() {
					r.grant()
				}
			case 3: // any immediate, as the Conn classifies it
				if msgOp(arg) == opData {
					r.onData(msgData(arg) % (2 * size))
				}
			}
			if r.count > int(r.credits) || r.queued > r.granted || r.granted > r.size ||
				r.readOff >= r.size || r.freeOff >= r.size || uint64(r.granted)+uint64(r.bytesAvail) > uint64(r.size) {
				t.Fatalf("invariant broken: %+v", r)
			}
		}
	})
}

func TestConnDataLayout(t *testing.T) {
	// struct rs_conn_data as a little-endian x86 rsocket sends it:
	// version 1, flags IOMAP, credits 384 (be16), 3 reserved, iomap 0,
	// target_sgl {addr, key, length} and data_buf, all big-endian.
	want := []byte{
		1, 2, 0x01, 0x80, 0, 0, 0, 0,
		0, 0, 0x7f, 0xaa, 0xbb, 0xcc, 0xdd, 0x00, 0, 0, 0x12, 0x34, 0, 0, 0, 2,
		0, 0, 0x7f, 0xaa, 0xbb, 0xcc, 0xe0, 0x00, 0, 0, 0x56, 0x78, 0, 1, 0, 0,
	}
	cd := connData{Version: 1, Flags: connFlagIOMap, Credits: 384,
		TargetSGL: sge{Addr: 0x7faabbccdd00, Key: 0x1234, Length: 2},
		DataBuf:   sge{Addr: 0x7faabbcce000, Key: 0x5678, Length: 65536}}
	got := make([]byte, connDataLen)
	cd.encode(got)
	if !bytes.Equal(got, want) {
		t.Fatalf("encode:\n got %x\nwant %x", got, want)
	}
	back, err := decodeConnData(want)
	if err != nil || back != cd {
		t.Fatalf("decode: %+v, %v", back, err)
	}
	if msgSet(opSGL, 384+17) != 0x80000191 || msgSet(opCtrl, ctrlShutdown) != 0xe0000002 {
		t.Errorf("immediates: %#x %#x", msgSet(opSGL, 401), msgSet(opCtrl, ctrlShutdown))
	}
}
