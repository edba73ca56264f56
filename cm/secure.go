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
