package roce

// Authenticated and encrypted packets (verbs.Securer), a softrdma
// extension of RoCEv2 in the spirit of sRDMA (USENIX ATC 2020): a QP whose
// peer agreed appends a trailer to every packet it sends, between the pad
// and the ICRC:
//
//	BTH | extension headers | payload | pad | seq (8) | tag (16) | ICRC
//
// seq counts the QP's packets in one direction from 1 (retransmissions
// get new numbers); tag is AES-GCM's over the headers (with the BTH's
// FECN/BECN byte masked, as the ICRC masks it), the seq and — in auth mode
// — the payload; in encrypt mode the payload and pad are the ciphertext.
// Each direction has its own key, derived from the shared secret, and the
// nonce is the seq, so no key ever sees a nonce twice. The receiver checks
// the tag before it looks at anything else in the packet and keeps a
// 64-packet window of seqs it has seen: forged, modified and replayed
// packets are dropped and counted (drop_auth, drop_replay).

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// secTrailerLen is the trailer's size: seq and tag.
const secTrailerLen = 8 + 16

// secCtx is a QP's packet protection. Used under the QP's lock.
type secCtx struct {
	mode     verbs.SecurityMode
	send     cipher.AEAD
	recv     cipher.AEAD
	sendSeq  uint64
	recvTop  uint64 // highest seq accepted
	recvSeen uint64 // bit i: recvTop-i was accepted
	aad      [wire.BTHLen + wire.RETHLen + wire.ImmDtLen + 8 + 32]byte
	nonceBuf [12]byte
	scratch  []byte // sealing output: payload + tag
}

// deriveKey is HMAC-SHA256(secret, label): one key per direction.
func deriveKey(secret [32]byte, label string) []byte {
	m := hmac.New(sha256.New, secret[:])
	m.Write([]byte("softrdma packet key v1: " + label))
	return m.Sum(nil)
}

func newSecCtx(s verbs.Security) (*secCtx, error) {
	out, in := "initiator to responder", "responder to initiator"
	if !s.Initiator {
		out, in = in, out
	}
	mk := func(label string) (cipher.AEAD, error) {
		b, err := aes.NewCipher(deriveKey(s.Secret, label))
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(b)
	}
	send, err := mk(out)
	if err != nil {
		return nil, err
	}
	recv, err := mk(in)
	if err != nil {
		return nil, err
	}
	return &secCtx{mode: s.Mode, send: send, recv: recv, scratch: make([]byte, 0, MaxPacketSize+16)}, nil
}

// Secure turns packet protection on (verbs.Securer). Both ends must call
// it with the same secret and opposite Initiator, in INIT or RTR.
func (qp *QP) Secure(s verbs.Security) error {
	const op = "SecureQP"
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.typ != verbs.QPTypeRC && qp.typ != verbs.QPTypeUC {
		return verbs.Errorf(op, verbs.ErrNotSupported, "packet protection is for RC and UC QPs; this one is %v", qp.typ)
	}
	if st := qp.stateLocked(); st != verbs.QPStateInit && st != verbs.QPStateRTR {
		return verbs.Errorf(op, verbs.ErrInvalidState, "QP %d is in %v: protect it in INIT or RTR, before any packet flows", qp.qpn, st)
	}
	if s.Mode != verbs.SecurityAuth && s.Mode != verbs.SecurityEncrypt {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "mode %v: use SecurityAuth or SecurityEncrypt", s.Mode)
	}
	c, err := newSecCtx(s)
	if err != nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "%v", err)
	}
	qp.sec = c
	qp.refreshViewsLocked()
	return nil
}

// nonce is the 96-bit GCM nonce of seq, in c's buffer (a local array
// would escape through the AEAD interface: one allocation a packet).
func (c *secCtx) nonce(seq uint64) []byte {
	binary.BigEndian.PutUint64(c.nonceBuf[4:], seq)
	return c.nonceBuf[:]
}

// aadFor copies the headers of b (hdrLen bytes, the BTH's byte 4 masked)
// and seq into c.aad.
func (c *secCtx) aadFor(b []byte, hdrLen int, seq []byte) []byte {
	a := c.aad[:0]
	a = append(a, b[:hdrLen]...)
	a[4] = 0xFF
	return append(a, seq...)
}

// seal fills the trailer of the finished packet b (headers, payload, pad,
// trailer, ICRC), encrypting the payload in encrypt mode.
func (c *secCtx) seal(b []byte) {
	info := wire.BTH(b).Opcode().Info()
	hdr := info.Length
	end := len(b) - wire.ICRCLen - secTrailerLen // end of the pad
	c.sendSeq++
	seqb := b[end : end+8]
	binary.BigEndian.PutUint64(seqb, c.sendSeq)
	n := c.nonce(c.sendSeq)
	tag := b[end+8 : end+secTrailerLen]
	if c.mode == verbs.SecurityEncrypt {
		out := c.send.Seal(c.scratch[:0], n, b[hdr:end], c.aadFor(b, hdr, seqb))
		copy(b[hdr:end], out[:end-hdr])
		copy(tag, out[end-hdr:])
		return
	}
	// Auth: the tag covers headers, payload, pad and seq as associated
	// data (the BTH's byte 4 masked).
	a := append(c.scratch[:0], b[:end+8]...)
	a[4] = 0xFF
	out := c.send.Seal(a[len(a):len(a)], n, nil, a)
	copy(tag, out)
}

// open checks and removes the trailer of a received packet b, decrypting
// the payload in encrypt mode, and returns the packet as RoCEv2 without
// the trailer (its ICRC moved up). It reports false for a packet that
// fails the check (drop_auth) or was seen before (drop_replay).
func (c *secCtx) open(b []byte, counters *Counters) ([]byte, bool) {
	if len(b) < wire.BTHLen+secTrailerLen+wire.ICRCLen {
		counters.DropAuth.Add(1)
		return nil, false
	}
	info := wire.BTH(b).Opcode().Info()
	hdr := info.Length
	end := len(b) - wire.ICRCLen - secTrailerLen
	if !info.Valid() || end < hdr {
		counters.DropAuth.Add(1)
		return nil, false
	}
	seqb := b[end : end+8]
	seq := binary.BigEndian.Uint64(seqb)
	if !c.fresh(seq) {
		counters.DropReplay.Add(1)
		return nil, false
	}
	n := c.nonce(seq)
	tag := b[end+8 : end+secTrailerLen]
	if c.mode == verbs.SecurityEncrypt {
		ct := append(append(c.scratch[:0], b[hdr:end]...), tag...)
		pt, err := c.recv.Open(ct[:0], n, ct, c.aadFor(b, hdr, seqb))
		if err != nil {
			counters.DropAuth.Add(1)
			return nil, false
		}
		copy(b[hdr:end], pt)
	} else {
		a := append(c.scratch[:0], b[:end+8]...)
		a[4] = 0xFF
		if _, err := c.recv.Open(nil, n, tag, a); err != nil {
			counters.DropAuth.Add(1)
			return nil, false
		}
	}
	c.accept(seq)
	copy(b[end:], b[len(b)-wire.ICRCLen:])
	return b[:end+wire.ICRCLen], true
}

// fresh reports whether seq is new: above the window, or inside it and
// not seen.
func (c *secCtx) fresh(seq uint64) bool {
	switch {
	case seq == 0:
		return false
	case seq > c.recvTop:
		return true
	case c.recvTop-seq >= 64:
		return false
	}
	return c.recvSeen&(1<<(c.recvTop-seq)) == 0
}

// accept records seq as seen.
func (c *secCtx) accept(seq uint64) {
	if seq > c.recvTop {
		shift := seq - c.recvTop
		if shift >= 64 {
			c.recvSeen = 0
		} else {
			c.recvSeen <<= shift
		}
		c.recvTop = seq
	}
	c.recvSeen |= 1 << (c.recvTop - seq)
}
