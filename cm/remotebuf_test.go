package cm_test

import (
	"bytes"
	"testing"

	"github.com/softrdma/softrdma/cm"
)

// FuzzRemoteBuffer: any bytes either parse into a buffer whose binary
// form is those bytes again, or are refused; nothing panics.
func FuzzRemoteBuffer(f *testing.F) {
	seed, _ := cm.RemoteBuffer{Addr: 0x7f00_0000_1000, RKey: 0x1234, Length: 4096}.MarshalBinary()
	f.Add(seed)
	f.Add(append(seed, "trailing private data"...))
	f.Add(make([]byte, cm.RemoteBufferLen))
	f.Add(bytes.Repeat([]byte{0xff}, cm.RemoteBufferLen))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, rest, err := cm.ParseRemoteBuffer(data)
		if err != nil {
			if len(data) >= cm.RemoteBufferLen && b != (cm.RemoteBuffer{}) {
				t.Fatalf("error %v with a buffer %v", err, b)
			}
			return
		}
		if b.Addr+b.Length < b.Addr {
			t.Fatalf("%v wraps around", b)
		}
		out, err := b.AppendBinary(nil)
		if err != nil || !bytes.Equal(out, data[:cm.RemoteBufferLen]) || !bytes.Equal(rest, data[cm.RemoteBufferLen:]) {
			t.Fatalf("round trip of %x: %x, rest %x, %v", data, out, rest, err)
		}
		var u cm.RemoteBuffer
		err = u.UnmarshalBinary(data)
		if (len(data) == cm.RemoteBufferLen) != (err == nil) || (err == nil && u != b) {
			t.Fatalf("UnmarshalBinary(%x) = %v, %v; ParseRemoteBuffer gave %v", data, u, err, b)
		}
		if s, err := b.Slice(1, b.Length); err == nil && b.Length != 0 {
			t.Fatalf("Slice(1, %d) of %v gave %v", b.Length, b, s)
		}
	})
}

func TestRemoteBufferSlice(t *testing.T) {
	b := cm.RemoteBuffer{Addr: 1000, RKey: 7, Length: 100}
	for _, tt := range []struct {
		off, n uint64
		ok     bool
	}{{0, 100, true}, {10, 90, true}, {100, 0, true}, {10, 91, false}, {101, 0, false}, {1, ^uint64(0), false}} {
		s, err := b.Slice(tt.off, tt.n)
		if (err == nil) != tt.ok {
			t.Errorf("Slice(%d, %d): %v, %v", tt.off, tt.n, s, err)
		}
		if err == nil && (s.Addr != 1000+tt.off || s.Length != tt.n || s.RKey != 7) {
			t.Errorf("Slice(%d, %d) = %v", tt.off, tt.n, s)
		}
	}
}

func TestRemoteBufferAppendAllocs(t *testing.T) {
	b := cm.RemoteBuffer{Addr: 1, RKey: 2, Length: 3}
	dst := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() {
		dst, _ = b.AppendBinary(dst[:0])
		cm.ParseRemoteBuffer(dst)
	}); n != 0 {
		t.Errorf("%v allocations per AppendBinary and ParseRemoteBuffer", n)
	}
}
