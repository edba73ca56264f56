package cm

// Negotiating protected packets (Options.Security; verbs.Securer): a
// softrdma extension carried in the connection's private data, so plain
// rdma_cm peers never see it unless asked. The dialer puts a block at the
// start of its REQ's private data (after rdma_cm's header):
//
//	"sRDM" | version 1 | mode | X25519 public key (32 bytes) [| tag (16)]
//
// A softrdma listener that finds it answers with the same block in its
// REP, with its own public key and the mode it settled on (the stronger of
// what the dialer asks and what the listener requires). Both derive the
// QPs' shared secret from the X25519 exchange (SHA-256 over the shared
// key and both public keys) and protect their QP before it leaves INIT:
// every packet then carries a MAC and a sequence number, and with
// SecurityEncrypt its payload is encrypted. A dialer whose peer does not
// answer with the block (rxe, or a listener that does not speak it) gets
// ErrNoSecurity: asking for protection means requiring it.
//
// Without more, the keys are ephemeral and nothing says whose they are:
// the exchange is secure against an eavesdropper, not against an attacker
// who rewrites the CM exchange itself (a man in the middle runs one
// exchange with each side and relays). Options.SecurityPSK binds the
// exchange to a key both applications hold: the mode byte's top bit
// (secBound) says so, and the block ends with a tag, HMAC-SHA256 under the
// PSK truncated to 16 bytes, over the REQ's block (in the REQ) or over
// both blocks (in the REP). A listener checks the REQ's tag, the dialer
// the REP's, and the PSK goes into the secret too: an attacker without it
// can neither answer in place of either side nor learn the secret, and a
// rewritten exchange fails at connect time (ErrSecurityMismatch) instead
// of leaving two QPs that cannot understand each other.

import (
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/softrdma/softrdma/verbs"
)

// ErrNoSecurity is returned by Dial when Options.Security asked for
// protected packets and the peer did not agree.
var ErrNoSecurity = errors.New("cm: the peer did not agree to protect packets (it is not softrdma, or does not offer it)")

// ErrSecurityMismatch is returned by Dial and ConnRequest.Accept when the
// peer's key exchange is not bound to the same pre-shared key
// (Options.SecurityPSK) as ours: the peer holds another key or none, or
// someone rewrote the exchange on the way.
var ErrSecurityMismatch = errors.New("cm: the peer's key exchange is not bound to our pre-shared key (another key, none, or a man in the middle)")

const (
	secMagic    = "sRDM"
	secVersion  = 1
	secBlockLen = 4 + 1 + 1 + 32
	secTagLen   = 16
	// secBound, in the mode byte, says a tag follows the public key.
	secBound = 0x80
	// MinSecurityPSK is the shortest Options.SecurityPSK accepted.
	MinSecurityPSK = 16
)

// secOffer is one side's half of the exchange.
type secOffer struct {
	mode verbs.SecurityMode
	priv *ecdh.PrivateKey
	pub  []byte // ours
	psk  []byte // nil: unbound
}

func newSecOffer(mode verbs.SecurityMode, psk []byte) (*secOffer, error) {
	if psk != nil && len(psk) < MinSecurityPSK {
		return nil, fmt.Errorf("cm: a %d-byte SecurityPSK; use at least %d random bytes", len(psk), MinSecurityPSK)
	}
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cm: generating a key: %w", err)
	}
	return &secOffer{mode: mode, priv: k, pub: k.PublicKey().Bytes(), psk: psk}, nil
}

// blockLen is the length of a block with or without a PSK's tag.
func blockLen(psk []byte) int {
	if psk != nil {
		return secBlockLen + secTagLen
	}
	return secBlockLen
}

// block is the private-data block announcing o, without its tag.
func (o *secOffer) block() []byte {
	m := byte(o.mode)
	if o.psk != nil {
		m |= secBound
	}
	b := append([]byte(secMagic), secVersion, m)
	return append(b, o.pub...)
}

// reqBlock is the block of a REQ: block, and with a PSK its tag.
func (o *secOffer) reqBlock() []byte {
	b := o.block()
	if o.psk == nil {
		return b
	}
	return append(b, pskTag(o.psk, "REQ", b)...)
}

// repBlock is the block of a REP answering the REQ block req (as
// received, tag included).
func (o *secOffer) repBlock(req []byte) []byte {
	b := o.block()
	if o.psk == nil {
		return b
	}
	return append(b, pskTag(o.psk, "REP", req, b)...)
}

// pskTag is HMAC-SHA256 under psk of the label and the blocks, truncated.
func pskTag(psk []byte, label string, blocks ...[]byte) []byte {
	m := hmac.New(sha256.New, psk)
	m.Write([]byte("softrdma cm key exchange v1 " + label))
	for _, b := range blocks {
		m.Write(b)
	}
	return m.Sum(nil)[:secTagLen]
}

// secBlock is a parsed block.
type secBlock struct {
	mode  verbs.SecurityMode
	pub   []byte
	bound bool   // a tag follows
	raw   []byte // the block as received, tag included
}

// parseSecBlock reads a block at the start of private data p, and
// returns the private data after it.
func parseSecBlock(p []byte) (b secBlock, rest []byte, ok bool) {
	if len(p) < secBlockLen || string(p[:4]) != secMagic || p[4] != secVersion {
		return secBlock{}, p, false
	}
	b.bound = p[5]&secBound != 0
	b.mode = verbs.SecurityMode(p[5] &^ secBound)
	if b.mode != verbs.SecurityAuth && b.mode != verbs.SecurityEncrypt {
		return secBlock{}, p, false
	}
	n := secBlockLen
	if b.bound {
		n += secTagLen
		if len(p) < n {
			return secBlock{}, p, false
		}
	}
	b.pub, b.raw = p[6:secBlockLen], p[:n]
	return b, p[n:], true
}

// checkTag checks the tag of a received block b under our PSK: label
// "REQ" (over b itself) or "REP" (over the REQ block req, then b). Both
// sides must agree on binding: a bound block to an unbound side fails too.
func (o *secOffer) checkTag(b secBlock, label string, req []byte) error {
	switch {
	case o.psk == nil && !b.bound:
		return nil
	case o.psk == nil:
		return fmt.Errorf("%w: the peer binds its exchange to a pre-shared key and we have none", ErrSecurityMismatch)
	case !b.bound:
		return fmt.Errorf("%w: the peer's exchange is not bound to a pre-shared key", ErrSecurityMismatch)
	}
	body, tag := b.raw[:secBlockLen], b.raw[secBlockLen:]
	var want []byte
	if label == "REQ" {
		want = pskTag(o.psk, label, body)
	} else {
		want = pskTag(o.psk, label, req, body)
	}
	if !hmac.Equal(tag, want) {
		return fmt.Errorf("%w: the %s's tag does not check", ErrSecurityMismatch, label)
	}
	return nil
}

// secret derives the QPs' shared secret from our key and the peer's
// public key; initiatorPub and responderPub bind it to this exchange.
func (o *secOffer) secret(peerPub, initiatorPub, responderPub []byte) ([32]byte, error) {
	pk, err := ecdh.X25519().NewPublicKey(peerPub)
	if err != nil {
		return [32]byte{}, fmt.Errorf("cm: the peer's key: %w", err)
	}
	shared, err := o.priv.ECDH(pk)
	if err != nil {
		return [32]byte{}, fmt.Errorf("cm: key exchange: %w", err)
	}
	h := sha256.New()
	h.Write([]byte("softrdma cm secret v1"))
	h.Write(shared)
	h.Write(initiatorPub)
	h.Write(responderPub)
	if o.psk != nil {
		h.Write([]byte("psk"))
		h.Write(o.psk)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s, nil
}

// secure protects qp with the secret.
func secure(qp verbs.QP, mode verbs.SecurityMode, secret [32]byte, initiator bool) error {
	sq, ok := qp.(verbs.Securer)
	if !ok {
		return fmt.Errorf("cm: this provider's QPs cannot protect packets: %w", verbs.ErrNotSupported)
	}
	return sq.Secure(verbs.Security{Mode: mode, Secret: secret, Initiator: initiator})
}

// KeyExchange is the exchange Dial and Accept carry in the private data,
// for QPs brought up by other means (perftest's TCP exchange, an
// application's own): each side sends Offer to the other, then calls
// Secure with the offer it received. Like Dial's, the exchange protects
// against an eavesdropper of the channel that carries the offers, not
// against one who can rewrite them. A KeyExchange is used once, by one
// goroutine.
type KeyExchange struct {
	o *secOffer
}

// NewKeyExchange starts an exchange asking for mode (SecurityAuth or
// SecurityEncrypt) with a fresh X25519 key.
func NewKeyExchange(mode verbs.SecurityMode) (*KeyExchange, error) {
	if mode != verbs.SecurityAuth && mode != verbs.SecurityEncrypt {
		return nil, fmt.Errorf("cm: security mode %v: use SecurityAuth or SecurityEncrypt", mode)
	}
	o, err := newSecOffer(mode, nil)
	if err != nil {
		return nil, err
	}
	return &KeyExchange{o: o}, nil
}

// Offer is this side's half, OfferLen bytes, to send to the peer.
func (k *KeyExchange) Offer() []byte { return k.o.block() }

// OfferLen is the length of an Offer.
const OfferLen = secBlockLen

// Secure derives the shared secret from the peer's offer and protects
// qps (in INIT or RTR) with it: the stronger of the two sides' modes,
// which it returns. Exactly one side passes initiator; the peer must pass
// its QPs in the same order. Each QP gets a secret of its own (so no two
// QPs' keys meet the same packet sequence numbers).
func (k *KeyExchange) Secure(peerOffer []byte, initiator bool, qps ...verbs.QP) (verbs.SecurityMode, error) {
	b, _, ok := parseSecBlock(peerOffer)
	if !ok || b.bound || len(peerOffer) != secBlockLen {
		return 0, fmt.Errorf("cm: the peer's offer (%d bytes) is not a softrdma key exchange block: %w", len(peerOffer), ErrNoSecurity)
	}
	mode, pub := max(b.mode, k.o.mode), b.pub
	ipub, rpub := k.o.pub, pub
	if !initiator {
		ipub, rpub = pub, k.o.pub
	}
	secret, err := k.o.secret(pub, ipub, rpub)
	if err != nil {
		return 0, err
	}
	for i, qp := range qps {
		m := hmac.New(sha256.New, secret[:])
		fmt.Fprintf(m, "softrdma QP secret v1: %d", i)
		var s [32]byte
		copy(s[:], m.Sum(nil))
		if err := secure(qp, mode, s, initiator); err != nil {
			return 0, err
		}
	}
	return mode, nil
}

// The RTU's proof. The REQ's tag says the REQ was made by a holder of the
// PSK, not that the holder is the one sending it now: a captured REQ
// replays as well as the original. So, with a PSK, the dialer's RTU
// starts with a block of its own,
//
//	"sRDM" | version 1 | 0 | tag (16)
//
// whose tag is HMAC-SHA256 under the PSK over the REQ's block and the
// REP's block, the REP's carrying the listener's fresh public key: only a
// holder of the PSK that saw this REP can write it. The listener's agent
// takes the RTU (and Accept returns) only with it; without it, the REP is
// resent until its retries or Accept's context run out.
const rtuProofLen = 4 + 1 + 1 + secTagLen

// rtuProof is the RTU block for the REQ block req and the REP block rep,
// both as sent (tags included).
func rtuProof(psk, req, rep []byte) []byte {
	b := append([]byte(secMagic), secVersion, 0)
	return append(b, pskTag(psk, "RTU", req, rep)...)
}

// checkRTUProof reports whether an RTU's private data starts with want.
func checkRTUProof(want, private []byte) bool {
	return len(private) >= len(want) && hmac.Equal(private[:len(want)], want)
}
