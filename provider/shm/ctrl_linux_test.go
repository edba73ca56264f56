package shm

import "testing"

// FuzzCtrl: any control message decodes without panicking, and a decoded
// one re-encodes to the same header.
func FuzzCtrl(f *testing.F) {
	var b [ctrlHdr]byte
	(&ctrl{typ: mGrantReq, reqID: 1, a: 2, b: 3, c: 4, d: 5, x: 6, y: 7}).encode(b[:])
	f.Add(b[:])
	(&ctrl{typ: mCopyWrite, reqID: 2, a: 2, b: 3, c: 4, e: 32768, x: 1 << 40, y: 65536}).encode(b[:])
	f.Add(b[:])
	(&ctrl{typ: mCopyResp, reqID: 3, d: grantCopy, x: 9}).encode(b[:])
	f.Add(b[:])
	(&ctrl{typ: mUD, a: gsiQPN, b: gsiQPN, c: 0x80010000}).encode(b[:]) // a MAD for cm
	f.Add(b[:])
	(&ctrl{typ: mHello, x: 0x1234}).encode(b[:]) // also a service lookup's answer
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
