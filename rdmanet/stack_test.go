package rdmanet

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"testing"
	"time"
)

// crypto/tls and bufio run on top of a Conn.
func TestTLS(t *testing.T) {
	devices(t)
	checkGoroutines(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"rdma"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	c, s := pair(t, nil)
	ts := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "rdma"})
	defer tc.Close()
	defer ts.Close()
	go func() {
		r := bufio.NewReader(ts)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			ts.Write([]byte("echo: " + line))
		}
	}()
	r := bufio.NewReader(tc)
	for i := 0; i < 10; i++ {
		if _, err := tc.Write([]byte("ping over tls\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil || line != "echo: ping over tls\n" {
			t.Fatalf("got %q, %v", line, err)
		}
	}
}
