package pki_test

import (
	"crypto"
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
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/marketplace/checkout/internal/pki"
)

// TestPKI_MadeOnce_FrontendTakesOnlyItsCAsClients: the cluster's CA and certificates are made once
// (a second start changes nothing, keys are owner-only); a server on the frontend's certificate
// that requires a client certificate of that CA lets the worker's certificate in, and refuses a
// client without one and a client whose certificate another CA signed.
func TestPKI_MadeOnce_FrontendTakesOnlyItsCAsClients(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certs, err := pki.Ensure(dir)
	require.NoError(t, err)
	before, err := os.ReadFile(certs.CertFile(pki.IdentityWorker))
	require.NoError(t, err)
	again, err := pki.Ensure(dir)
	require.NoError(t, err)
	after, err := os.ReadFile(again.CertFile(pki.IdentityWorker))
	require.NoError(t, err)
	assert.Equal(t, before, after, "a second start keeps the certificates")
	for _, id := range pki.Identities {
		fi, err := os.Stat(certs.KeyFile(id))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), id.Name)
	}
	cert := parse(t, certs.CertFile(pki.IdentityWorker))
	assert.Equal(t, "checkout-worker", cert.Subject.CommonName)

	addr := frontend(t, certs)
	dial := func(cfg *tls.Config) error {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		// TLS 1.3: the server's verdict on the client certificate arrives with the first read.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		if err == io.EOF {
			return nil
		}
		return err
	}
	worker, err := certs.ClientTLS(pki.IdentityWorker)
	require.NoError(t, err)
	assert.NoError(t, dial(worker), "the worker's certificate is let in")

	anonymous := worker.Clone()
	anonymous.Certificates = nil
	assert.Error(t, dial(anonymous), "no client certificate: refused")

	other, err := pki.Ensure(t.TempDir())
	require.NoError(t, err)
	foreign, err := other.ClientTLS(pki.IdentityWorker)
	require.NoError(t, err)
	foreign.RootCAs = worker.RootCAs
	assert.Error(t, dial(foreign), "another CA's client certificate: refused")
}

// TestPKI_ACertificateNearItsEndIsMadeAgain: at a start, a certificate with less than
// RenewBefore left is issued again by the same CA; the others are kept.
func TestPKI_ACertificateNearItsEndIsMadeAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certs, err := pki.Ensure(dir)
	require.NoError(t, err)
	// The worker's certificate replaced by one of the same CA that ends tomorrow.
	short := shortLived(t, certs)
	require.NoError(t, os.WriteFile(certs.CertFile(pki.IdentityWorker), short.cert, 0o644))
	require.NoError(t, os.WriteFile(certs.KeyFile(pki.IdentityWorker), short.key, 0o600))
	api, err := os.ReadFile(certs.CertFile(pki.IdentityAPI))
	require.NoError(t, err)

	_, err = pki.Ensure(dir)
	require.NoError(t, err)
	renewed := parse(t, certs.CertFile(pki.IdentityWorker))
	assert.Greater(t, time.Until(renewed.NotAfter), pki.RenewBefore, "made again")
	assert.NoError(t, renewed.CheckSignatureFrom(parse(t, certs.CAFile())), "by the same CA")
	kept, err := os.ReadFile(certs.CertFile(pki.IdentityAPI))
	require.NoError(t, err)
	assert.Equal(t, api, kept)
}

func parse(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	block, _ := pem.Decode(raw)
	require.NotNil(t, block, path)
	c, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return c
}

// frontend serves TLS on the frontend's certificate, requiring a client certificate of the CA.
func frontend(t *testing.T, certs pki.PKI) string {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certs.CertFile(pki.IdentityFrontend), certs.KeyFile(pki.IdentityFrontend))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(parse(t, certs.CAFile()))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool})
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
			}(c)
		}
	}()
	return ln.Addr().String()
}

type pair struct{ cert, key []byte }

// shortLived is a client certificate of certs' CA that ends in a day.
func shortLived(t *testing.T, certs pki.PKI) pair {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(certs.Dir, "ca-key.pem"))
	require.NoError(t, err)
	caPair, err := tls.X509KeyPair(mustRead(t, certs.CAFile()), raw)
	require.NoError(t, err)
	return issueShort(t, parse(t, certs.CAFile()), caPair.PrivateKey)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	return raw
}

// issueShort is a client certificate signed by ca that ends in a day.
func issueShort(t *testing.T, ca *x509.Certificate, caKey crypto.PrivateKey) pair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "checkout-worker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	return pair{cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}
}

// TestPKI_CodecBundle_ServesLocalhostWithTheCAInItsChain: Ensure writes the codec frontend's
// HAProxy bundle (what `checkout certs` gives a deployment's HAProxy), owner-only: its certificate,
// the CA's after it, and its key; a browser that trusts the CA alone verifies it for localhost.
func TestPKI_CodecBundle_ServesLocalhostWithTheCAInItsChain(t *testing.T) {
	t.Parallel()
	certs, err := pki.Ensure(t.TempDir())
	require.NoError(t, err)
	path := certs.HAProxyBundle(pki.IdentityCodec)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(raw, raw)
	require.NoError(t, err, "the bundle holds the certificate and its key")
	require.Len(t, pair.Certificate, 2, "the codec's certificate, then the CA's")
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	caRaw, err := os.ReadFile(certs.CAFile())
	require.NoError(t, err)
	block, _ := pem.Decode(caRaw)
	require.NotNil(t, block)
	assert.Equal(t, block.Bytes, pair.Certificate[1])
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caRaw))
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"})
	assert.NoError(t, err)
}
