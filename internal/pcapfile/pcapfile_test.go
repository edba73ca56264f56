package pcapfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

const captureDir = "../../testdata/rxe-pcaps"

func TestRoCEv2Captures(t *testing.T) {
	for _, tt := range []struct {
		file string
		n    int
	}{
		{"atomic_lat.pcap", 40}, {"rc_pingpong.pcap", 100}, {"read_bw.pcap", 100},
		{"send_bw.pcap", 100}, {"ud_pingpong.pcap", 20},
	} {
		ds, err := RoCEv2(filepath.Join(captureDir, tt.file))
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != tt.n {
			t.Errorf("%s: %d RoCEv2 datagrams, want %d", tt.file, len(ds), tt.n)
		}
		for _, d := range ds {
			if len(d.IP.Header) != 20 || !d.IP.Src.Is4() || !d.IP.DF || d.IP.ID == 0 || len(d.Header) != 8 ||
				d.DstPort != RoCEv2Port || len(d.Payload) < 16 || d.Frame < 1 {
				t.Fatalf("%s frame %d: %+v", tt.file, d.Frame, d)
			}
		}
	}
}

func TestTCP(t *testing.T) {
	segs, err := TCP(filepath.Join(captureDir, "rc_pingpong.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	var syn, payload int
	for _, s := range segs {
		if s.SYN {
			syn++
		}
		if s.DstPort == 18515 && len(s.Payload) > 0 {
			payload++
		}
	}
	if syn != 2 || payload == 0 {
		t.Errorf("%d TCP segments: %d SYN, %d with payload to 18515", len(segs), syn, payload)
	}
}

// TestPcapngAndTruncation writes the frames of a classic capture as pcapng,
// reads them back, and rejects a frame cut by the snap length.
func TestPcapngAndTruncation(t *testing.T) {
	want, err := RoCEv2(filepath.Join(captureDir, "ud_pingpong.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	frame := ethernetFrame(want[0])
	dir := t.TempDir()
	write := func(name string, cut int) string {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		w, err := pcapgo.NewNgWriter(f, layers.LinkTypeEthernet)
		if err != nil {
			t.Fatal(err)
		}
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(frame) - cut, Length: len(frame), InterfaceIndex: 0}
		if err := w.WritePacket(ci, frame[:len(frame)-cut]); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return path
	}
	got, err := RoCEv2(write("whole.pcapng", 0))
	if err != nil || len(got) != 1 || string(got[0].Payload) != string(want[0].Payload) || got[0].IP.ID != want[0].IP.ID {
		t.Fatalf("pcapng: %v, %+v", err, got)
	}
	if _, err := RoCEv2(write("cut.pcapng", 10)); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated frame: err = %v", err)
	}
}

// A RoCEv2 datagram from a source port gopacket knows for another
// protocol (44818: EtherNet/IP), whose decoder fails on the BTH and marks
// the packet truncated, is whole all the same.
func TestSourcePortOfAnotherProtocol(t *testing.T) {
	want, err := RoCEv2(filepath.Join(captureDir, "ud_pingpong.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	d := want[0]
	d.Header = append([]byte(nil), d.Header...)
	d.Header[0], d.Header[1] = 44818>>8, 44818&0xff // UDP source port; the checksum is not checked
	frame := ethernetFrame(d)
	if p := gopacket.NewPacket(frame, layers.LinkTypeEthernet, gopacket.Default); !p.Metadata().Truncated {
		t.Log("gopacket no longer marks this packet truncated: the test shows nothing then")
	}
	path := filepath.Join(t.TempDir(), "port44818.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(frame), Length: len(frame)}, frame); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := RoCEv2(path)
	if err != nil || len(got) != 1 || string(got[0].Payload) != string(d.Payload) {
		t.Fatalf("RoCEv2: %v, %d datagrams", err, len(got))
	}
}

// ethernetFrame rebuilds an Ethernet frame around a captured datagram.
func ethernetFrame(d Datagram) []byte {
	b := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00}
	b = append(b, d.IP.Header...)
	b = append(b, d.Header...)
	return append(b, d.Payload...)
}
