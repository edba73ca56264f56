// Package wire owns the RoCEv2 wire format: the InfiniBand transport headers
// carried in a UDP datagram to port 4791 (IBTA vol 1 chapter 9 and the RoCEv2
// annex A17), the opcode table that says which headers follow each opcode and
// what kind of packet it is, 24-bit packet sequence number arithmetic, the
// invariant CRC, and the timer encodings that travel in QP attributes. (The
// path MTU enumeration is verbs.MTU, the public API's, and nowhere else.)
//
// Headers are views in the style of gVisor's header package: a header type
// is a byte slice (type BTH []byte) with one getter and one setter per field,
// plus a Fields struct and an Encode method that writes the whole header.
// Views do no length checks of their own; Parse checks the length of the
// whole packet once, and an encoder sizes its buffer with HeaderLen. Every
// accessor, Parse and the ICRC functions are allocation-free.
//
// A RoCEv2 UDP payload is laid out as
//
//	BTH | extension headers (by opcode) | payload | pad (0-3) | ICRC (4, little-endian)
//
// The package imports only the standard library. Nothing in it holds state
// beyond read-only tables, so everything is safe for concurrent use; a view
// is as safe as the bytes it aliases.
package wire
