package tlsca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRoots: a CA file with a certificate is trusted; one without, or
// missing, is an error that names the setting and the file as the
// operator wrote them.
func TestRoots(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kvtop test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	good, junk := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, system := range []bool{false, true} {
		pool, err := Roots(good, system)
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(der)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
			t.Fatalf("system %v: the CA file's certificate is not trusted: %v", system, err)
		}
	}
	_, err = Roots(junk, false)
	if got := Setting("ca_file", err).Error(); got != "ca_file "+junk+": no PEM certificate in it" {
		t.Fatalf("%q", got)
	}
	_, err = Roots(filepath.Join(dir, "missing.pem"), false)
	if got := Setting("ca_file", err).Error(); !strings.HasPrefix(got, "ca_file: open ") || !strings.Contains(got, "no such file") {
		t.Fatalf("%q", got)
	}
}
