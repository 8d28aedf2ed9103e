package lockbroker_test

// API keys and HTTPS with a private CA, against a real broker.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
	"lockbroker.dev/lockbroker/lockbrokertest"
)

const apiKey = "test-key-0123456789abcdef"

func keyedBroker(t *testing.T) *lockbrokertest.Broker {
	path := keysFile(t, apiKey, []string{"lock"}, []string{"allowed-"})
	return ownBroker(t, nil, map[string]string{"LOCKBROKER_AUTH_KEYS_FILE": path})
}

func TestTheBearerKeyOpensTheBroker(t *testing.T) {
	b := keyedBroker(t)
	client, name := clientOf(t, b.URL, lockbroker.ClientOptions{APIKey: apiKey}), "allowed-"+lockName(t)
	lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if status, err := client.Status(bg, name); err != nil || !status.Held {
		t.Fatalf("status %+v, %v", status, err)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}
}

func TestAMissingOrWrongKeyIsUnauthorized(t *testing.T) {
	b := keyedBroker(t)
	for _, key := range []string{"", "wrong-key"} {
		client := clientOf(t, b.URL, lockbroker.ClientOptions{APIKey: key})
		_, err := client.Acquire(bg, "allowed-"+lockName(t), lockbroker.AcquireOptions{})
		var denied *lockbroker.AuthError
		if !errors.As(err, &denied) || denied.Status != 401 || denied.Code != "unauthorized" {
			t.Fatalf("key %q: %v", key, err)
		}
	}
}

func TestALockOutsideTheKeysPrefixesIsForbidden(t *testing.T) {
	b := keyedBroker(t)
	client := clientOf(t, b.URL, lockbroker.ClientOptions{APIKey: apiKey})
	_, err := client.Acquire(bg, "other-"+lockName(t), lockbroker.AcquireOptions{})
	var denied *lockbroker.AuthError
	if !errors.As(err, &denied) || denied.Status != 403 || denied.Code != "forbidden" {
		t.Fatalf("got %v", err)
	}
}

func TestTheKeyComesFromTheEnvironment(t *testing.T) {
	b := keyedBroker(t)
	t.Setenv("LOCKBROKER_URL", b.URL)
	t.Setenv("LOCKBROKER_API_KEY", apiKey)
	client, err := lockbroker.NewClientFromEnv(lockbroker.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Status(bg, "allowed-"+lockName(t)); err != nil {
		t.Fatal(err)
	}
}

// writeCertificates makes a private CA and a certificate for 127.0.0.1 signed
// by it; it returns the paths of the CA, the certificate and its key (PEM).
func writeCertificates(t *testing.T) (caPath, certPath, keyPath string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockbroker test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTemplate, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(leafKey)
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", leafDER),
		write("server.key", "PRIVATE KEY", keyDER)
}

func TestHTTPSWithAPrivateCA(t *testing.T) {
	caPath, certPath, keyPath := writeCertificates(t)
	b := ownBroker(t, nil, map[string]string{
		"LOCKBROKER_HTTP_TLS_CERT_PATH": certPath,
		"LOCKBROKER_HTTP_TLS_KEY_PATH":  keyPath,
	})
	name := lockName(t)

	untrusting := clientOf(t, b.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second})
	_, err := untrusting.Status(bg, name)
	var unknown x509.UnknownAuthorityError
	var down *lockbroker.Unavailable
	if !errors.As(err, &down) || !errors.As(err, &unknown) {
		t.Fatalf("without the CA: %v", err)
	}

	client := clientOf(t, b.URL, lockbroker.ClientOptions{Timeout: 5 * time.Second, CACertFile: caPath})
	lease, err := client.Lock(bg, name, lockbroker.LockOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(bg); err != nil {
		t.Fatal(err)
	}

	if _, err := lockbroker.NewClient(b.URL, lockbroker.ClientOptions{CACertFile: keyPath}); err == nil {
		t.Fatal("a CA file without a certificate was accepted")
	}
}
