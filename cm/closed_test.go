package cm

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// forgetfulKernel is a closingKernel that, once closed, answers no port
// query, as provider/ibverbs's Context does: a Dial or Listen that looks
// for an address first would find none.
type forgetfulKernel struct {
	*closingKernel
}

func (k *forgetfulKernel) QueryPort(port uint8) (verbs.PortAttr, error) {
	if deviceClosed(k) {
		return verbs.PortAttr{}, verbs.Errorf("QueryPort", verbs.ErrDestroyed, "the device was closed")
	}
	return k.closingKernel.QueryPort(port)
}

// Dial and Listen on a closed kernel device fail with ErrDeviceClosed
// and say so, not with ErrNotFound for want of an address.
func TestClosedKernelDevice(t *testing.T) {
	n := newFakeNet()
	k := &forgetfulKernel{&closingKernel{fakeKernel: newFakeKernel(n, "10.9.0.1")}}
	ln, err := Listen("rdma", "10.9.0.1:0", &Options{Context: k})
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Dial", func() error { _, err := Dial(ctx, "rdma", addr, &Options{Context: k}); return err }},
		{"Dial UD", func() error {
			_, err := Dial(ctx, "rdma", addr, &Options{Context: k, QPType: verbs.QPTypeUD})
			return err
		}},
		{"Listen", func() error { _, err := Listen("rdma", "10.9.0.1:0", &Options{Context: k}); return err }},
		{"Listen UD", func() error {
			_, err := Listen("rdma", "10.9.0.1:0", &Options{Context: k, QPType: verbs.QPTypeUD})
			return err
		}},
	} {
		err := tc.call()
		if !errors.Is(err, ErrDeviceClosed) || errors.Is(err, verbs.ErrNotFound) {
			t.Errorf("%s on a closed device: %v; want ErrDeviceClosed", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), "closed") || !strings.Contains(err.Error(), "rxe_fake") {
			t.Errorf("%s on a closed device: %q does not say which device was closed", tc.name, err)
		}
	}
}
