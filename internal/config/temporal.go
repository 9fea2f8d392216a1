package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// TemporalTLS is how a process reaches the Temporal frontend over mutual TLS: its own client
// certificate and key, the CA that signed the frontend's certificate, and the name that
// certificate carries (default: the host of TEMPORAL_ADDRESS).
type TemporalTLS struct {
	CertFile, KeyFile, CAFile, ServerName string
	// AllowPlaintext lets api and worker reach Temporal without TLS: only behind a proxy that
	// speaks mutual TLS to the frontend for them (a service mesh's sidecar). Logged at every start.
	AllowPlaintext bool
}

// Enabled says whether any TLS setting is given.
func (t TemporalTLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

func (p *parser) temporalTLS() TemporalTLS {
	return TemporalTLS{CertFile: p.str("TEMPORAL_TLS_CERT", ""), KeyFile: p.str("TEMPORAL_TLS_KEY", ""),
		CAFile: p.str("TEMPORAL_TLS_CA", ""), ServerName: p.str("TEMPORAL_TLS_SERVER_NAME", ""),
		AllowPlaintext: p.bool("TEMPORAL_ALLOW_PLAINTEXT", false)}
}

// CheckTemporalTLS is what api and worker ask before they dial Temporal: mutual TLS, all three
// files given and readable, unless TEMPORAL_ALLOW_PLAINTEXT says a proxy does it for them. One
// line naming what is wrong.
func (c Config) CheckTemporalTLS() error {
	t := c.TemporalTLS
	if !t.Enabled() {
		if t.AllowPlaintext {
			return nil
		}
		return errors.New("TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY and TEMPORAL_TLS_CA are not set: api and worker reach Temporal over mutual TLS only (TEMPORAL_ALLOW_PLAINTEXT=true when a local proxy speaks it for them; `checkout-dev dev` runs without)")
	}
	if t.AllowPlaintext {
		return errors.New("TEMPORAL_ALLOW_PLAINTEXT=true and TEMPORAL_TLS_* are both set: choose one")
	}
	_, err := c.TemporalTLSConfig()
	return err
}

// TemporalTLSConfig is the client TLS configuration of every dial to Temporal (nil: plaintext,
// when no TLS setting is given). The certificate and key are read again at every handshake, so a
// renewed certificate written over the old files is used from the next connection on, without a
// restart.
func (c Config) TemporalTLSConfig() (*tls.Config, error) {
	t := c.TemporalTLS
	if !t.Enabled() {
		return nil, nil
	}
	if t.CertFile == "" || t.KeyFile == "" || t.CAFile == "" {
		return nil, errors.New("TEMPORAL_TLS_CERT, TEMPORAL_TLS_KEY and TEMPORAL_TLS_CA: set all three (the client certificate, its key, and the CA of the frontend's certificate)")
	}
	load := func() (*tls.Certificate, error) {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("TEMPORAL_TLS_CERT/TEMPORAL_TLS_KEY: %w", err)
		}
		return &cert, nil
	}
	if _, err := load(); err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("TEMPORAL_TLS_CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TEMPORAL_TLS_CA %s: no PEM certificate in it", t.CAFile)
	}
	name := t.ServerName
	if name == "" {
		name = hostOf(c.TemporalAddress)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: name,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return load() }}, nil
}

// TemporalTransport says how the process reaches Temporal, for its start-up log line.
func (c Config) TemporalTransport() string {
	switch {
	case c.TemporalTLS.Enabled():
		return "mutual TLS"
	case c.TemporalTLS.AllowPlaintext:
		return "plaintext (TEMPORAL_ALLOW_PLAINTEXT)"
	}
	return "plaintext"
}

func hostOf(addr string) string {
	if strings.Contains(addr, "://") {
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}
