package cluster_test

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

	"github.com/marketplace/checkout/internal/dev/cluster"
)

// TestPKI_MadeOnce_FrontendTakesOnlyItsCAsClients: the cluster's CA and certificates are made once
// (a second start changes nothing, keys are owner-only); a server on the frontend's certificate
// that requires a client certificate of that CA lets the worker's certificate in, and refuses a
// client without one and a client whose certificate another CA signed.
func TestPKI_MadeOnce_FrontendTakesOnlyItsCAsClients(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki, err := cluster.EnsurePKI(dir)
	require.NoError(t, err)
	before, err := os.ReadFile(pki.CertFile(cluster.IdentityWorker))
	require.NoError(t, err)
	again, err := cluster.EnsurePKI(dir)
	require.NoError(t, err)
	after, err := os.ReadFile(again.CertFile(cluster.IdentityWorker))
	require.NoError(t, err)
	assert.Equal(t, before, after, "a second start keeps the certificates")
	for _, id := range cluster.Identities {
		fi, err := os.Stat(pki.KeyFile(id))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), id.Name)
	}
	cert := parse(t, pki.CertFile(cluster.IdentityWorker))
	assert.Equal(t, "checkout-worker", cert.Subject.CommonName)

	addr := frontend(t, pki)
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
	worker, err := pki.ClientTLS(cluster.IdentityWorker)
	require.NoError(t, err)
	assert.NoError(t, dial(worker), "the worker's certificate is let in")

	anonymous := worker.Clone()
	anonymous.Certificates = nil
	assert.Error(t, dial(anonymous), "no client certificate: refused")

	other, err := cluster.EnsurePKI(t.TempDir())
	require.NoError(t, err)
	foreign, err := other.ClientTLS(cluster.IdentityWorker)
	require.NoError(t, err)
	foreign.RootCAs = worker.RootCAs
	assert.Error(t, dial(foreign), "another CA's client certificate: refused")
}

// TestPKI_ACertificateNearItsEndIsMadeAgain: at a start, a certificate with less than
// RenewBefore left is issued again by the same CA; the others are kept.
func TestPKI_ACertificateNearItsEndIsMadeAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pki, err := cluster.EnsurePKI(dir)
	require.NoError(t, err)
	// The worker's certificate replaced by one of the same CA that ends tomorrow.
	short := shortLived(t, pki)
	require.NoError(t, os.WriteFile(pki.CertFile(cluster.IdentityWorker), short.cert, 0o644))
	require.NoError(t, os.WriteFile(pki.KeyFile(cluster.IdentityWorker), short.key, 0o600))
	api, err := os.ReadFile(pki.CertFile(cluster.IdentityAPI))
	require.NoError(t, err)

	_, err = cluster.EnsurePKI(dir)
	require.NoError(t, err)
	renewed := parse(t, pki.CertFile(cluster.IdentityWorker))
	assert.Greater(t, time.Until(renewed.NotAfter), cluster.RenewBefore, "made again")
	assert.NoError(t, renewed.CheckSignatureFrom(parse(t, pki.CAFile())), "by the same CA")
	kept, err := os.ReadFile(pki.CertFile(cluster.IdentityAPI))
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
func frontend(t *testing.T, pki cluster.PKI) string {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(pki.CertFile(cluster.IdentityFrontend), pki.KeyFile(cluster.IdentityFrontend))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(parse(t, pki.CAFile()))
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

// shortLived is a client certificate of pki's CA that ends in a day.
func shortLived(t *testing.T, pki cluster.PKI) pair {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(pki.Dir, "ca-key.pem"))
	require.NoError(t, err)
	caPair, err := tls.X509KeyPair(mustRead(t, pki.CAFile()), raw)
	require.NoError(t, err)
	return issueShort(t, parse(t, pki.CAFile()), caPair.PrivateKey)
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
