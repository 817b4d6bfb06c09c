package placement

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writePEM(t *testing.T, path, typ string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientCert makes a self-signed client certificate and key in dir.
func clientCert(t *testing.T, dir string) (certPath, keyPath string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "scour"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, filepath.Join(dir, "client.pem"), "CERTIFICATE", der),
		writePEM(t, filepath.Join(dir, "client.key"), "EC PRIVATE KEY", kder), cert
}

func TestTLSOptions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certPath, keyPath, cert := clientCert(t, dir)
	f := &fakePlacement{minVersion: "1.0", maxVersion: "1.39", handle: dirtyDevice(nil)}
	srv := httptest.NewUnstartedServer(f)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", srv.Certificate().Raw)

	for _, tc := range []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"CA bundle and client certificate", func(c *Config) { c.CACert, c.Cert, c.Key = ca, certPath, keyPath }, true},
		{"insecure with client certificate", func(c *Config) { c.Insecure, c.Cert, c.Key = true, certPath, keyPath }, true},
		{"CA bundle without client certificate", func(c *Config) { c.CACert = ca }, false},
		{"unknown CA", func(c *Config) { c.Cert, c.Key = certPath, keyPath }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := unitConfig(srv.URL)
			tc.mod(&cfg)
			_, err := New(context.Background(), cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("New: %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !IsRecoverable(err) {
				t.Errorf("TLS failure not recoverable: %v", err)
			}
		})
	}
	bad := unitConfig(srv.URL)
	bad.CACert = certPath + ".missing"
	if _, err := New(context.Background(), bad); err == nil {
		t.Error("missing CA bundle accepted")
	}
}
