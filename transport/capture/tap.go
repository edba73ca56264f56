package capture

import (
	"io"

	"github.com/softrdma/softrdma/transport"
)

// Tap returns a function that wraps a transport so that every packet it
// sends and receives is written to w as pcapng: the shape of
// provider/soft's Config.Tap, so that
//
//	soft.Open(soft.Config{Addr: a, Tap: capture.Tap(f)})
//
// captures a device without the provider importing this package (and
// gopacket with it). The pcapng header is written when the device opens;
// closing the device flushes the capture, and the caller closes w.
func Tap(w io.Writer) func(transport.Transport) (transport.Transport, error) {
	return func(inner transport.Transport) (transport.Transport, error) {
		cw, err := NewWriter(w)
		if err != nil {
			return nil, err
		}
		return Wrap(inner, cw), nil
	}
}
