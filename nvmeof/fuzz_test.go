package nvmeof

import (
	"bytes"
	"testing"
)

// FuzzParsers: the host's parsers of what a target sends never panic, and
// what they accept re-encodes to the same fields.
func FuzzParsers(f *testing.F) {
	ci := ControllerInfo{Serial: "s", Model: "m", Firmware: "f", CNTLID: 3, Version: 0x10300, MDTS: 5, MaxCmd: 128, NN: 1, KAS: 10,
		SGLS: sglsSupported | sglsKeyed | sglsOffset, SubNQN: "nqn.x", IOCCSZ: 516, IORCSZ: 1, ControllerType: ctrlTypeIO}
	b := make([]byte, identifyDataBytes)
	ci.encode(b)
	f.Add(b)
	ni := NamespaceInfo{Blocks: 100, BlockSize: 4096}
	b = make([]byte, identifyDataBytes)
	ni.encode(b)
	f.Add(b)
	f.Add(make([]byte, discoveryHeaderLen+discoveryEntryLen))
	f.Add([]byte{0, 0, 1, 0, 32, 0, 31, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if c, err := parseControllerInfo(b); err == nil {
			out := make([]byte, identifyDataBytes)
			c.encode(out)
			c2, err := parseControllerInfo(out)
			if err != nil || c2.CNTLID != c.CNTLID || c2.SGLS != c.SGLS || c2.IOCCSZ != c.IOCCSZ || c2.SubNQN != c.SubNQN {
				t.Fatalf("controller info does not round-trip: %+v / %+v (%v)", c, c2, err)
			}
		}
		if n, err := parseNamespaceInfo(b); err == nil {
			out := make([]byte, identifyDataBytes)
			n.encode(out)
			if n2, err := parseNamespaceInfo(out); err != nil || n2 != n {
				t.Fatalf("namespace info does not round-trip: %+v / %+v (%v)", n, n2, err)
			}
		}
		if _, entries, err := parseDiscoveryLog(b); err == nil && len(entries) > (len(b)-discoveryHeaderLen)/discoveryEntryLen {
			t.Fatalf("%d entries from %d bytes", len(entries), len(b))
		}
		var r CMRequest
		if r.UnmarshalBinary(b) == nil {
			enc, _ := r.AppendBinary(nil)
			if !bytes.Equal(enc[:10], b[:10]) {
				t.Fatalf("CM request does not round-trip")
			}
		}
		if len(b) >= CommandSize {
			c := Command(b)
			_ = c.SGL().Length()
			_ = c.SGL().Key()
		}
	})
}
