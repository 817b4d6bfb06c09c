package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/scour-project/scour/internal/testkit"
)

// failoverURL is the test broker as the second host of a Nova-style
// transport_url whose first host (port 1) is down; query is appended.
func failoverURL(t *testing.T, addr, query string) string {
	t.Helper()
	u, err := url.Parse(testkit.BrokerURL())
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	cred := u.User.Username() + ":" + pass
	if addr == "" {
		addr = u.Host
	}
	return "rabbit://" + cred + "@127.0.0.1:1," + cred + "@" + addr + u.Path + query
}

// tlsBroker is a TLS front of the test broker with a certificate for
// serverName signed by its own CA; it returns the address and the CA file.
func tlsBroker(t *testing.T, serverName string) (addr, caFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "scour test CA"}, DNSNames: []string{serverName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u, _ := url.Parse(testkit.BrokerURL())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer b.Close()
				go func() { _, _ = io.Copy(b, c); b.Close() }()
				_, _ = io.Copy(c, b)
			}()
		}
	}()
	return ln.Addr().String(), caFile
}
