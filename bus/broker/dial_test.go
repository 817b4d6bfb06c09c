package broker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/scour-project/scour/internal/testkit"
)

// A transport_url whose first host is down still connects, to the next.
func TestFailoverToTheNextHost(t *testing.T) {
	testkit.Broker(t)
	u, err := url.Parse(testkit.BrokerURL())
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	multi := "rabbit://" + u.User.Username() + ":" + pass + "@127.0.0.1:1," + u.User.Username() + ":" + pass + "@" + u.Host + "/"
	cfg := Options{URL: multi, Heartbeat: 10 * time.Second, Name: "scour failover test"}
	uri, ac, d, err := amqpConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.DialConfig(uri, *ac)
	if err != nil {
		t.Fatalf("failover dial: %v", err)
	}
	defer conn.Close()
	if d.last == nil || !strings.HasSuffix(d.last.RemoteAddr().String(), u.Port()) {
		t.Errorf("connected to %v", d.last.RemoteAddr())
	}
	// Nothing reachable: the error names every host, never the password.
	cfg.URL = "rabbit://u:hunter2@127.0.0.1:1,u:hunter2@127.0.0.1:2/"
	uri, ac, _, _ = amqpConfig(&cfg)
	_, err = amqp.DialConfig(uri, *ac)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || !strings.Contains(err.Error(), "127.0.0.1:2") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("all hosts down: %v", err)
	}
}

// A reconnect starts with the host after the one whose connection
// dropped: that host is tried last, not first.
func TestReconnectStartsAfterTheDroppedHost(t *testing.T) {
	t.Parallel()
	var eps []Endpoint
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		eps = append(eps, Endpoint{Addr: l.Addr().String(), Host: "127.0.0.1"})
	}
	d := &dialer{endpoints: eps, timeout: time.Second}
	for i, want := range []int{0, 1, 2, 0} {
		c, err := d.Dial("tcp", "ignored")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.RemoteAddr().String(); got != eps[want].Addr {
			t.Errorf("dial %d went to %s, want host %d (%s)", i, got, want, eps[want].Addr)
		}
		c.Close()
	}
}

// A host that accepts TCP but never speaks AMQP (a frozen broker: the
// kernel still completes the handshake) does not hold scourd: the next
// attempt goes to the next host instead of the frozen one again.
func TestFrozenHostIsPassedOver(t *testing.T) {
	testkit.Broker(t)
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	go func() {
		for {
			c, err := frozen.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent, until the test ends
		}
	}()
	u, err := url.Parse(testkit.BrokerURL())
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	cred := u.User.Username() + ":" + pass + "@"
	cfg := Options{URL: "rabbit://" + cred + frozen.Addr().String() + "," + cred + u.Host + "/", Heartbeat: 10 * time.Second, Name: "scour frozen host test"}
	uri, ac, d, err := amqpConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.timeout = 300 * time.Millisecond
	if _, err := amqp.DialConfig(uri, *ac); err == nil {
		t.Fatal("the AMQP handshake with a silent host succeeded")
	}
	conn, err := amqp.DialConfig(uri, *ac)
	if err != nil {
		t.Fatalf("second attempt, which should go to the live host: %v", err)
	}
	conn.Close()
	if d.next != 1 {
		t.Errorf("connected through host %d, want 1 (the live one)", d.next)
	}
}

func TestTLSConfigFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "scour-test"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	kf := write("key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	junk := write("junk.pem", []byte("not a certificate"))

	c, err := tlsConfig(&TLSConfig{CAFile: ca, CertFile: ca, KeyFile: kf, ServerName: "rmq.example"})
	if err != nil {
		t.Fatal(err)
	}
	if c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "rmq.example" || c.InsecureSkipVerify {
		t.Errorf("tls config %+v", c)
	}
	if _, err := tlsConfig(&TLSConfig{CAFile: junk}); err == nil || !strings.Contains(err.Error(), "bus.tls.ca_file") {
		t.Errorf("junk CA: %v", err)
	}
	if _, err := tlsConfig(&TLSConfig{CertFile: ca, KeyFile: junk}); err == nil || !strings.Contains(err.Error(), "bus.tls.cert_file") {
		t.Errorf("bad key: %v", err)
	}
}
