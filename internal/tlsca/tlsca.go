// Package tlsca reads the CA files kvtop's clients trust: one reading, one
// set of words for what went wrong, for every source that takes a
// ca_file (metrics, the Prometheus API, NATS, --remote).
package tlsca

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrNoPEM says a CA file holds no PEM certificate.
var ErrNoPEM = errors.New("no PEM certificate in it")

// Roots reads the PEM certificates of file into a pool, added to the
// system's roots when system is set (a missing system pool is an empty
// one). A read error is os.ReadFile's; a file without a certificate is
// "<file>: no PEM certificate in it" (errors.Is ErrNoPEM). Callers prefix
// the setting's name.
func Roots(file string, system bool) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if system {
		if sys, err := x509.SystemCertPool(); err == nil {
			pool = sys
		}
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %w", file, ErrNoPEM)
	}
	return pool, nil
}

// Setting names the setting a Roots error is about, as kvtop's messages
// have always said it: "ca_file: open …: no such file or directory",
// "ca_file x.pem: no PEM certificate in it".
func Setting(name string, err error) error {
	if errors.Is(err, ErrNoPEM) {
		return fmt.Errorf("%s %w", name, err)
	}
	return fmt.Errorf("%s: %w", name, err)
}
