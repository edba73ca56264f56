package cm

// Negotiating protected packets (Options.Security; verbs.Securer): a
// softrdma extension carried in the connection's private data, so plain
// rdma_cm peers never see it unless asked. The dialer puts a block at the
// start of its REQ's private data (after rdma_cm's header):
//
//	"sRDM" | version 1 | mode | X25519 public key (32 bytes)
//
// A softrdma listener that finds it answers with the same block in its
// REP, with its own public key and the mode it settled on (the stronger of
// what the dialer asks and what the listener requires). Both derive the
// QPs' shared secret from the X25519 exchange (SHA-256 over the shared
// key and both public keys) and protect their QP before it leaves INIT:
// every packet then carries a MAC and a sequence number, and with
// SecurityEncrypt its payload is encrypted. A dialer whose peer does not
// answer with the block (rxe, or a listener that does not speak it) gets
// ErrNoSecurity: asking for protection means requiring it. The keys are
// ephemeral, so the exchange is secure against an eavesdropper, not
// against an attacker who rewrites the CM exchange itself (there is no
// identity to check; a pre-shared key would be the next step).

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

const (
	secMagic    = "sRDM"
	secVersion  = 1
	secBlockLen = 4 + 1 + 1 + 32
)

// secOffer is one side's half of the exchange.
type secOffer struct {
	mode verbs.SecurityMode
	priv *ecdh.PrivateKey
	pub  []byte // ours
}

func newSecOffer(mode verbs.SecurityMode) (*secOffer, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("cm: generating a key: %w", err)
	}
	return &secOffer{mode: mode, priv: k, pub: k.PublicKey().Bytes()}, nil
}

// block is the private-data block announcing o.
func (o *secOffer) block() []byte {
	b := append([]byte(secMagic), secVersion, byte(o.mode))
	return append(b, o.pub...)
}

// parseSecBlock reads a block at the start of private data p: the mode,
// the peer's public key, and the private data after it.
func parseSecBlock(p []byte) (mode verbs.SecurityMode, pub, rest []byte, ok bool) {
	if len(p) < secBlockLen || string(p[:4]) != secMagic || p[4] != secVersion {
		return 0, nil, p, false
	}
	mode = verbs.SecurityMode(p[5])
	if mode != verbs.SecurityAuth && mode != verbs.SecurityEncrypt {
		return 0, nil, p, false
	}
	return mode, p[6:secBlockLen], p[secBlockLen:], true
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
	o, err := newSecOffer(mode)
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
	mode, pub, _, ok := parseSecBlock(peerOffer)
	if !ok || len(peerOffer) != secBlockLen {
		return 0, fmt.Errorf("cm: the peer's offer (%d bytes) is not a softrdma key exchange block: %w", len(peerOffer), ErrNoSecurity)
	}
	mode = max(mode, k.o.mode)
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
