package cm

import (
	"errors"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// initQPs returns n fake RC QPs in INIT.
func initQPs(t *testing.T, d *fakeDev, n int) []verbs.QP {
	t.Helper()
	pd, _ := d.AllocPD()
	var qps []verbs.QP
	for range n {
		qp, _ := pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeRC})
		p := DefaultParams()
		if err := Init(qp, &p); err != nil {
			t.Fatal(err)
		}
		qps = append(qps, qp)
	}
	return qps
}

// TestKeyExchange: two sides that swap offers protect their QPs with the
// same secret QP by QP, a different one for every QP (their packet
// sequence numbers restart at 1, so a shared key would reuse GCM nonces),
// opposite initiator flags and the stronger mode; a garbled offer fails.
func TestKeyExchange(t *testing.T) {
	n := newFakeNet()
	a, b := initQPs(t, n.newDev("a", "10.0.0.1"), 3), initQPs(t, n.newDev("b", "10.0.0.2"), 3)
	ka, err := NewKeyExchange(verbs.SecurityAuth)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := NewKeyExchange(verbs.SecurityEncrypt)
	if len(ka.Offer()) != OfferLen {
		t.Fatalf("offer of %d bytes, OfferLen %d", len(ka.Offer()), OfferLen)
	}
	ma, err := ka.Secure(kb.Offer(), true, a...)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := kb.Secure(ka.Offer(), false, b...)
	if err != nil {
		t.Fatal(err)
	}
	if ma != verbs.SecurityEncrypt || mb != verbs.SecurityEncrypt {
		t.Fatalf("modes %v / %v, want encrypt (the stronger)", ma, mb)
	}
	seen := map[[32]byte]bool{}
	for i := range a {
		sa, sb := a[i].(*fakeRCQP).security(), b[i].(*fakeRCQP).security()
		if sa == nil || sb == nil {
			t.Fatalf("QP %d not protected", i)
		}
		if sa.Secret != sb.Secret || !sa.Initiator || sb.Initiator || sa.Mode != verbs.SecurityEncrypt {
			t.Errorf("QP %d: secrets equal %v, initiator %v/%v, mode %v", i, sa.Secret == sb.Secret, sa.Initiator, sb.Initiator, sa.Mode)
		}
		if seen[sa.Secret] {
			t.Errorf("QP %d shares its secret with another QP", i)
		}
		seen[sa.Secret] = true
	}

	kc, _ := NewKeyExchange(verbs.SecurityAuth)
	bad := kc.Offer()
	bad[0] ^= 1
	if _, err := kc.Secure(bad, true, initQPs(t, n.newDev("c", "10.0.0.3"), 1)...); !errors.Is(err, ErrNoSecurity) {
		t.Errorf("a garbled offer: %v, want ErrNoSecurity", err)
	}
	if _, err := NewKeyExchange(0); err == nil {
		t.Error("NewKeyExchange(0) succeeded")
	}
}
