package shm

import "testing"

// FuzzCtrl: any control message decodes without panicking, and a decoded
// one re-encodes to the same header.
func FuzzCtrl(f *testing.F) {
	var b [ctrlHdr]byte
	(&ctrl{typ: mGrantReq, reqID: 1, a: 2, b: 3, c: 4, d: 5, x: 6, y: 7}).encode(b[:])
	f.Add(b[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		m, ok := decodeCtrl(data)
		if !ok {
			return
		}
		var out [ctrlHdr]byte
		m.encode(out[:])
		m2, ok2 := decodeCtrl(out[:])
		if !ok2 || m2 != m {
			t.Fatalf("%+v re-decoded as %+v", m, m2)
		}
	})
}
