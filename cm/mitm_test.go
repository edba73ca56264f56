package cm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// mitm sits on the fake network between dialer and listener and runs a
// key exchange with each: it swaps the public key in the REQ's block for
// one of its own, and the REP's for another, leaving everything else (a
// tag it cannot compute, without the PSK, included). It records the keys
// it saw, to derive the secrets each side ends up with.
type mitm struct {
	mu              sync.Mutex
	toListener      *secOffer // our half towards the listener (in the REQ)
	toDialer        *secOffer // our half towards the dialer (in the REP)
	dialerPub       []byte
	listenerPub     []byte
	onlyREP         bool // leave the REQ alone
	downgrade       bool // also clear the "bound" bit and drop the tag
	rewrittenBlocks int
}

func newMITM(t *testing.T) *mitm {
	m := &mitm{}
	var err error
	if m.toListener, err = newSecOffer(verbs.SecurityAuth, nil); err != nil {
		t.Fatal(err)
	}
	if m.toDialer, err = newSecOffer(verbs.SecurityAuth, nil); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *mitm) rewrite(attr wire.CMAttr, mad []byte) {
	if attr != wire.CMReqAttr && attr != wire.CMRepAttr || attr == wire.CMReqAttr && m.onlyREP {
		return
	}
	i := bytes.Index(mad, []byte(secMagic+"\x01"))
	if i < 0 {
		return
	}
	pub := mad[i+6 : i+secBlockLen]
	m.mu.Lock()
	defer m.mu.Unlock()
	ours := m.toListener
	if attr == wire.CMReqAttr {
		m.dialerPub = bytes.Clone(pub)
	} else {
		m.listenerPub = bytes.Clone(pub)
		ours = m.toDialer
	}
	copy(pub, ours.pub)
	if m.downgrade && mad[i+5]&secBound != 0 {
		mad[i+5] &^= secBound
		clear(mad[i+secBlockLen : i+secBlockLen+secTagLen]) // the tag becomes private data
	}
	m.rewrittenBlocks++
}

// secrets derives what the dialer and the listener computed, as the
// attacker can when the exchange is not bound to a PSK.
func (m *mitm) secrets(t *testing.T) (dialer, listener [32]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var err error
	if dialer, err = m.toDialer.secret(m.dialerPub, m.dialerPub, m.toDialer.pub); err != nil {
		t.Fatal(err)
	}
	if listener, err = m.toListener.secret(m.listenerPub, m.toListener.pub, m.listenerPub); err != nil {
		t.Fatal(err)
	}
	return dialer, listener
}

// secureDial runs one Dial and one Accept with the given PSKs (nil: none)
// on p and returns both results.
func secureDial(t *testing.T, p *pair, dialPSK, listenPSK []byte) (cli, srv *Conn, dialErr, acceptErr error) {
	l, err := Listen("rdma", p.server, &Options{Context: p.srv, Security: verbs.SecurityAuth, SecurityPSK: listenPSK})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type result struct {
		c   *Conn
		err error
	}
	acc := make(chan result, 1)
	go func() {
		req, err := l.Accept(context.Background())
		if err != nil {
			acc <- result{nil, err}
			return
		}
		c, err := req.Accept(context.Background(), nil)
		acc <- result{c, err}
	}()
	cli, dialErr = Dial(context.Background(), "rdma", p.server, &Options{Context: p.cli, Security: verbs.SecurityAuth, SecurityPSK: dialPSK, PrivateData: []byte("hi")})
	r := <-acc
	return cli, r.c, dialErr, r.err
}

func secretOf(c *Conn) [32]byte {
	if s := c.QP.(*fakeRCQP).security(); s != nil {
		return s.Secret
	}
	return [32]byte{}
}

func randomPSK(t *testing.T) []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestMITMWithoutPSK: with an unauthenticated exchange a man in the middle
// who rewrites the CM private data connects both sides through himself
// and knows both secrets: the limit docs/security.md states, shown.
func TestMITMWithoutPSK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		m := newMITM(t)
		p.net.rewrite = m.rewrite
		cli, srv, derr, aerr := secureDial(t, p, nil, nil)
		if derr != nil || aerr != nil {
			t.Fatalf("dial %v, accept %v", derr, aerr)
		}
		defer cli.Close()
		defer srv.Close()
		d, l := m.secrets(t)
		if m.rewrittenBlocks != 2 || secretOf(cli) != d || secretOf(srv) != l {
			t.Fatalf("the attacker rewrote %d blocks; knows the dialer's secret %v, the listener's %v", m.rewrittenBlocks, secretOf(cli) == d, secretOf(srv) == l)
		}
	})
}

// TestMITMWithPSK: when both sides bind the exchange to a pre-shared key,
// the same attacker fails at connect time, whichever half he rewrites,
// and so does one who strips the binding (a downgrade); without an
// attacker the two sides agree on a secret that depends on the PSK; sides
// with different PSKs, or one without, do not connect.
func TestMITMWithPSK(t *testing.T) {
	psk := randomPSK(t)
	for _, tc := range []struct {
		name             string
		attack           func(m *mitm) // nil: no attacker
		dialPSK, lstnPSK []byte
		dialMismatch     bool // Dial's own check fails (else the listener's REJ)
		lstnFail         bool
	}{
		{"rewrite both keys", func(m *mitm) {}, psk, psk, false, true},
		{"rewrite the REP's key", func(m *mitm) { m.onlyREP = true }, psk, psk, true, false},
		{"strip the binding", func(m *mitm) { m.downgrade = true }, psk, psk, false, true},
		{"different PSKs", nil, psk, randomPSK(t), false, true},
		{"only the dialer has one", nil, psk, nil, false, true},
		{"only the listener has one", nil, nil, psk, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPair(t)
				if tc.attack != nil {
					m := newMITM(t)
					tc.attack(m)
					p.net.rewrite = m.rewrite
				}
				cli, srv, derr, aerr := secureDial(t, p, tc.dialPSK, tc.lstnPSK)
				if cli != nil {
					defer cli.Close()
				}
				if srv != nil {
					defer srv.Close()
				}
				var rej *RejectError
				if tc.dialMismatch && !errors.Is(derr, ErrSecurityMismatch) || !tc.dialMismatch && !errors.As(derr, &rej) {
					t.Errorf("dial: %v; want ErrSecurityMismatch (%v) or else a REJ", derr, tc.dialMismatch)
				}
				if tc.lstnFail && !errors.Is(aerr, ErrSecurityMismatch) {
					t.Errorf("accept: %v; want ErrSecurityMismatch", aerr)
				}
				if !tc.lstnFail && aerr == nil && srv != nil {
					// The listener accepted the untouched REQ; the
					// dialer's refusal of the REP ends it.
					synctest.Wait()
				}
			})
		})
	}
	t.Run("no attacker", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newPair(t)
			cli, srv, derr, aerr := secureDial(t, p, psk, psk)
			if derr != nil || aerr != nil {
				t.Fatalf("dial %v, accept %v", derr, aerr)
			}
			defer cli.Close()
			defer srv.Close()
			if secretOf(cli) != secretOf(srv) || secretOf(cli) == ([32]byte{}) {
				t.Fatal("the two sides derived different secrets")
			}
			if !bytes.HasPrefix(srv.PeerPrivateData, []byte("hi")) {
				t.Errorf("private data %q", srv.PeerPrivateData[:2])
			}
		})
	})
	if _, err := Dial(context.Background(), "rdma", "10.0.0.2:1", &Options{SecurityPSK: psk}); err == nil {
		t.Error("a PSK without a mode was accepted")
	}
	if _, err := Dial(context.Background(), "rdma", "10.0.0.2:1", &Options{Security: verbs.SecurityAuth, SecurityPSK: psk[:8]}); err == nil {
		t.Error("an 8-byte PSK was accepted")
	}
}

// FuzzSecBlock: parsing any private data never panics, and a block it
// accepts is a prefix of the input with a valid mode and a 32-byte key.
func FuzzSecBlock(f *testing.F) {
	o, _ := newSecOffer(verbs.SecurityEncrypt, bytes.Repeat([]byte{7}, 16))
	f.Add(o.reqBlock())
	f.Add(append(o.block(), "rest"...))
	f.Add([]byte("sRDM\x01\x81"))
	f.Fuzz(func(t *testing.T, p []byte) {
		b, rest, ok := parseSecBlock(p)
		if !ok {
			if !bytes.Equal(rest, p) {
				t.Fatal("a refused block consumed bytes")
			}
			return
		}
		n := len(b.raw)
		if !bytes.Equal(p[:n], b.raw) || !bytes.Equal(rest, p[n:]) || len(b.pub) != 32 ||
			(b.mode != verbs.SecurityAuth && b.mode != verbs.SecurityEncrypt) || (n == secBlockLen) == b.bound {
			t.Fatalf("block %+v rest %d of %d bytes", b, len(rest), len(p))
		}
	})
}
