package verbs

import "testing"

func TestWROpcodeWCOpcode(t *testing.T) {
	want := map[WROpcode]WCOpcode{
		WRRDMAWrite:         WCRDMAWrite,
		WRRDMAWriteWithImm:  WCRDMAWrite,
		WRSend:              WCSend,
		WRSendWithImm:       WCSend,
		WRSendWithInv:       WCSend,
		WRRDMARead:          WCRDMARead,
		WRAtomicCmpAndSwp:   WCCompSwap,
		WRAtomicFetchAndAdd: WCFetchAdd,
	}
	for op, wc := range want {
		if got := op.WCOpcode(); got != wc {
			t.Errorf("%v.WCOpcode() = %v, want %v", op, got, wc)
		}
	}
}
