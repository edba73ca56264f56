package wire

import (
	"bytes"
	"net/netip"
	"path/filepath"
	"testing"
)

// cmCaptureDir holds rdma_cm traffic between two Linux 6.1 rxe VMs
// (rping, a rejected rping, ucmatose, udaddy; see its README.md).
const cmCaptureDir = "../testdata/cm-pcaps"

// captureMADs returns the MADs (UD SENDs to QP1) of a capture.
func captureMADs(tb testing.TB, name string) []MAD {
	tb.Helper()
	var out []MAD
	for _, cp := range readCapture(tb, filepath.Join(cmCaptureDir, name)) {
		var p Packet
		if err := Parse(cp.pkt, &p); err != nil {
			tb.Fatalf("frame %d: %v", cp.frame, err)
		}
		if p.BTH.DestQP() != 1 {
			continue
		}
		if p.DETH.QKey() != 0x80010000 || p.DETH.SrcQP() != 1 {
			tb.Errorf("frame %d: Q_Key %#x from QP %d", cp.frame, p.DETH.QKey(), p.DETH.SrcQP())
		}
		if len(p.Payload) != MADLen {
			tb.Fatalf("frame %d: MAD of %d bytes", cp.frame, len(p.Payload))
		}
		out = append(out, MAD(p.Payload))
	}
	return out
}

// reencodeCM parses the CM attribute of m and encodes it again.
func reencodeCM(t *testing.T, m MAD) []byte {
	codec, ok := cmCodecs[CMAttr(m.AttrID())]
	if !ok {
		t.Fatalf("attribute %v has no codec", CMAttr(m.AttrID()))
	}
	_, _, out, err := codec(m.Data())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCMCaptureRoundTrip: every CM MAD Linux sent decodes and encodes back
// to the same bytes (Linux leaves reserved bits zero).
func TestCMCaptureRoundTrip(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(cmCaptureDir, "*.pcap"))
	if len(files) == 0 {
		t.Fatal("no captures")
	}
	n := 0
	for _, f := range files {
		for _, m := range captureMADs(t, filepath.Base(f)) {
			n++
			h := m.Fields()
			var back [MADHeaderLen]byte
			MAD(back[:]).Encode(&h)
			if !bytes.Equal(back[:], m[:MADHeaderLen]) {
				t.Errorf("%s: header % x → % x", f, m[:MADHeaderLen], back)
			}
			if h.MgmtClass != MgmtClassCM || h.ClassVersion != CMClassVersion || h.Method != MADMethodSend {
				t.Errorf("%s: header %+v", f, h)
			}
			if out := reencodeCM(t, m); !bytes.Equal(out, m.Data()) {
				t.Errorf("%s: %v re-encoded differs:\n% x\n% x", f, CMAttr(h.AttrID), m.Data(), out)
			}
		}
	}
	if n < 12 {
		t.Errorf("only %d CM MADs in the captures", n)
	}
}

// TestRpingCapture checks the fields of rping's exchange that softrdma's
// cm must reproduce: rdma_cm's REQ over RoCE, the REP, RTU, DREQ, DREP.
func TestRpingCapture(t *testing.T) {
	ms := captureMADs(t, "rping.pcap")
	var attrs []CMAttr
	for _, m := range ms {
		attrs = append(attrs, CMAttr(m.AttrID()))
	}
	want := []CMAttr{CMReqAttr, CMRepAttr, CMRTUAttr, CMDReqAttr, CMDRepAttr}
	if len(attrs) != len(want) {
		t.Fatalf("exchange %v, want %v", attrs, want)
	}
	for i := range want {
		if attrs[i] != want[i] {
			t.Fatalf("exchange %v, want %v", attrs, want)
		}
	}
	req, _ := ParseCMReq(ms[0].Data())
	rep, _ := ParseCMRep(ms[1].Data())
	rtu, _ := ParseCMRTU(ms[2].Data())
	dreq, _ := ParseCMDReq(ms[3].Data())
	drep, _ := ParseCMDRep(ms[4].Data())
	// The kernel's transaction ID: the agent number, then the comm ID as
	// it lies in memory (big-endian bytes read little-endian).
	if tid := ms[0].TransactionID(); uint32(tid) != swap32(req.LocalCommID) {
		t.Errorf("REQ TID %#x, comm ID %#x", tid, req.LocalCommID)
	}
	if ms[1].TransactionID() != ms[0].TransactionID() || ms[2].TransactionID() != ms[0].TransactionID() {
		t.Errorf("REP/RTU TIDs %#x %#x, REQ %#x", ms[1].TransactionID(), ms[2].TransactionID(), ms[0].TransactionID())
	}
	if req.ServiceID != 0x0106<<16|7174 {
		t.Errorf("service ID %#x: want RDMA_PS_TCP, port 7174", req.ServiceID)
	}
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"REQ remote CM response timeout", uint64(req.RemoteCMTimeout), 20},
		{"REQ local CM response timeout", uint64(req.LocalCMTimeout), 20},
		{"REQ max CM retries", uint64(req.MaxCMRetries), 15},
		{"REQ retry count", uint64(req.RetryCount), 7},
		{"REQ RNR retry", uint64(req.RNRRetryCount), 7},
		{"REQ path MTU", uint64(req.PathMTU), 3},
		{"REQ P_Key", uint64(req.PKey), 0xffff},
		{"REQ responder resources", uint64(req.ResponderResources), 1},
		{"REQ initiator depth", uint64(req.InitiatorDepth), 1},
		{"REQ local LID", uint64(req.Primary.LocalLID), 0xffff},
		{"REQ remote LID", uint64(req.Primary.RemoteLID), 0xffff},
		{"REQ hop limit", uint64(req.Primary.HopLimit), 64},
		{"REQ local ACK timeout", uint64(req.Primary.LocalACKTimeout), 19},
		{"REQ transport", uint64(req.Transport), uint64(CMTransportRC)},
		{"REP target ACK delay", uint64(rep.TargetACKDelay), 15},
		{"REP RNR retry", uint64(rep.RNRRetryCount), 7},
		{"REP remote comm ID", uint64(rep.RemoteCommID), uint64(req.LocalCommID)},
		{"RTU comm IDs", uint64(rtu.LocalCommID)<<32 | uint64(rtu.RemoteCommID), uint64(req.LocalCommID)<<32 | uint64(rep.LocalCommID)},
		{"DREQ remote QPN", uint64(dreq.RemoteQPN), uint64(rep.LocalQPN)},
		{"DREP comm IDs", uint64(drep.LocalCommID)<<32 | uint64(drep.RemoteCommID), uint64(rep.LocalCommID)<<32 | uint64(req.LocalCommID)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if netip.AddrFrom16(req.Primary.LocalGID).Unmap() != netip.MustParseAddr("10.77.0.3") ||
		netip.AddrFrom16(req.Primary.RemoteGID).Unmap() != netip.MustParseAddr("10.77.0.2") {
		t.Errorf("REQ GIDs %x %x", req.Primary.LocalGID, req.Primary.RemoteGID)
	}
	// Whose PSN is whose: Linux's passive side sends from the REQ's
	// starting PSN and the active side from the REP's (each side's
	// starting PSN is the one it expects to receive).
	firstPSN := map[netip.Addr]PSN{}
	for _, cp := range readCapture(t, filepath.Join(cmCaptureDir, "rping.pcap")) {
		var p Packet
		if Parse(cp.pkt, &p) == nil && p.BTH.DestQP() != 1 && p.Info.AETHOff == 0 { // requests only
			if _, seen := firstPSN[cp.ip.Src]; !seen {
				firstPSN[cp.ip.Src] = p.BTH.PSN()
			}
		}
	}
	if got := firstPSN[netip.MustParseAddr("10.77.0.3")]; uint32(got) != rep.StartingPSN {
		t.Errorf("the client's first PSN %#x, REP's starting PSN %#x", uint32(got), rep.StartingPSN)
	}
	if got := firstPSN[netip.MustParseAddr("10.77.0.2")]; uint32(got) != req.StartingPSN {
		t.Errorf("the server's first PSN %#x, REQ's starting PSN %#x", uint32(got), req.StartingPSN)
	}
	h, ok := ParseCMAHeader(req.PrivateData[:])
	if !ok || h.Src != netip.MustParseAddr("10.77.0.3") || h.Dst != netip.MustParseAddr("10.77.0.2") || h.Version != 0 {
		t.Errorf("rdma_cm header %+v %v", h, ok)
	}
}

func TestRejectAndSIDRCaptures(t *testing.T) {
	ms := captureMADs(t, "rping_rej.pcap")
	if len(ms) != 2 || CMAttr(ms[1].AttrID()) != CMRejAttr {
		t.Fatalf("rping to a port nobody listens on: %d MADs", len(ms))
	}
	req, _ := ParseCMReq(ms[0].Data())
	rej, _ := ParseCMRej(ms[1].Data())
	if rej.Reason != RejInvalidServiceID || rej.MessageRejected != CMMsgREQ || rej.RemoteCommID != req.LocalCommID || rej.LocalCommID != 0 {
		t.Errorf("REJ %+v", rej)
	}
	if ms[1].TransactionID() != ms[0].TransactionID() {
		t.Errorf("REJ TID %#x, REQ %#x", ms[1].TransactionID(), ms[0].TransactionID())
	}
	ms = captureMADs(t, "udaddy.pcap")
	if len(ms) != 2 {
		t.Fatalf("udaddy: %d MADs", len(ms))
	}
	sreq, _ := ParseCMSIDRReq(ms[0].Data())
	srep, _ := ParseCMSIDRRep(ms[1].Data())
	if sreq.ServiceID != 0x0111<<16|7174 || sreq.PKey != 0xffff {
		t.Errorf("SIDR_REQ %+v", sreq)
	}
	if srep.Status != SIDRSuccess || srep.QKey != 0x01234567 || srep.RequestID != sreq.RequestID || srep.ServiceID != sreq.ServiceID {
		t.Errorf("SIDR_REP status %d qkey %#x id %#x sid %#x", srep.Status, srep.QKey, srep.RequestID, srep.ServiceID)
	}
	if h, ok := ParseCMAHeader(sreq.PrivateData[:]); !ok || h.Dst != netip.MustParseAddr("10.77.0.2") {
		t.Errorf("SIDR_REQ rdma_cm header %+v", h)
	}
}

func swap32(v uint32) uint32 { return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24 }
