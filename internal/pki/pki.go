// Package pki makes a certificate authority of a deployment's own and the certificates of its
// parties, for mutual TLS between the Temporal services and their clients: `checkout certs` makes
// them in a deployment's folder (docker-compose.yml's certs job), `checkout-dev cluster` in its data
// folder.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The cluster's own certificate authority and certificates, made with crypto/x509 in its data
// folder (TLSDir) the first time and kept: the Temporal frontend requires a client certificate
// signed by it, and every client of the product connects with the certificate of its kind, whose
// common name is the identity the server's authorizer knows it by.
const TLSDir = "tls"

// Identity is one certificate of the cluster: its file names (<Name>.pem, <Name>-key.pem), the
// common name it carries and whether it serves, is a client, or both.
type Identity struct {
	Name, CommonName string
	Server, Client   bool
}

// The cluster's identities. The client kinds' common names are what the Temporal server's claim
// mapper (tools/temporal-server) maps to permissions.
var (
	// IdentityFrontend is the frontend's serving certificate.
	IdentityFrontend = Identity{Name: "frontend", CommonName: "temporal-frontend", Server: true, Client: true}
	// IdentityInternode serves and dials between history, matching, the frontend and the internal worker.
	IdentityInternode = Identity{Name: "internode", CommonName: "temporal-internode", Server: true, Client: true}
	// IdentitySystemWorker is Temporal's own worker service calling the frontend (schedules,
	// worker deployments): an administrator of the cluster.
	IdentitySystemWorker = Identity{Name: "system-worker", CommonName: "temporal-system-worker", Client: true}
	// IdentityWorker and IdentityAPI are the product's services; IdentityTools the harness and the
	// operators' tools (namespace, audit, loadgen, temporal CLI); IdentityUI the Web UI server,
	// which carries a person's token and may do nothing without it.
	IdentityWorker = Identity{Name: "worker", CommonName: "checkout-worker", Client: true}
	IdentityAPI    = Identity{Name: "api", CommonName: "checkout-api", Client: true}
	IdentityTools  = Identity{Name: "tools", CommonName: "checkout-tools", Client: true}
	IdentityUI     = Identity{Name: "ui", CommonName: "temporal-ui", Client: true}
	// IdentityCodec serves the codec endpoint over https to browsers (HAProxy's codec frontend),
	// for localhost and 127.0.0.1; browsers trust it by the cluster's CA (CAFile).
	IdentityCodec = Identity{Name: "codec", CommonName: "checkout-codec", Server: true}
)

// Identities are every certificate the cluster makes.
var Identities = []Identity{IdentityFrontend, IdentityInternode, IdentitySystemWorker,
	IdentityWorker, IdentityAPI, IdentityTools, IdentityUI, IdentityCodec}

// FrontendServerName is the name the frontend's certificate is issued for and clients check
// (TEMPORAL_TLS_SERVER_NAME); it also carries localhost and 127.0.0.1.
const FrontendServerName = "temporal-frontend"

// Validity of what the cluster makes; a certificate with less than RenewBefore left is made again
// (by the same authority) at the next start.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
	RenewBefore  = 30 * 24 * time.Hour
)

// PKI is the cluster's authority and certificates on disk.
type PKI struct{ Dir string }

// CAFile is the authority's certificate, which every party trusts.
func (p PKI) CAFile() string { return filepath.Join(p.Dir, "ca.pem") }

// CertFile and KeyFile are an identity's certificate and key.
func (p PKI) CertFile(id Identity) string { return filepath.Join(p.Dir, id.Name+".pem") }
func (p PKI) KeyFile(id Identity) string  { return filepath.Join(p.Dir, id.Name+"-key.pem") }

// ClientEnv are the TEMPORAL_TLS_* settings of a product process of kind id.
func (p PKI) ClientEnv(id Identity) []string {
	return []string{"TEMPORAL_TLS_CERT=" + p.CertFile(id), "TEMPORAL_TLS_KEY=" + p.KeyFile(id),
		"TEMPORAL_TLS_CA=" + p.CAFile(), "TEMPORAL_TLS_SERVER_NAME=" + FrontendServerName}
}

// ClientTLS is the TLS configuration of a client of kind id.
func (p PKI) ClientTLS(id Identity) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(p.CertFile(id), p.KeyFile(id))
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(p.CAFile())
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("%s: no certificate", p.CAFile())
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, ServerName: FrontendServerName,
		Certificates: []tls.Certificate{cert}}, nil
}

// Ensure makes the authority and every identity's certificate in dir/tls the first time, makes
// again the certificates that expire within RenewBefore (or that another authority signed), and
// leaves the rest: a second start changes nothing. Keys are readable by their owner only.
func Ensure(dir string) (PKI, error) {
	p := PKI{Dir: filepath.Join(dir, TLSDir)}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return p, err
	}
	ca, caKey, err := p.ensureCA()
	if err != nil {
		return p, err
	}
	for _, id := range Identities {
		if p.fresh(id, ca) {
			continue
		}
		if err := p.issue(id, ca, caKey); err != nil {
			return p, fmt.Errorf("certificate %s: %w", id.Name, err)
		}
	}
	// The codec frontend's certificate, as HAProxy reads one.
	if err := p.WriteHAProxyBundle(IdentityCodec); err != nil {
		return p, err
	}
	return p, nil
}

// HAProxyBundle is id's certificate and key in one file, as HAProxy reads a certificate.
func (p PKI) HAProxyBundle(id Identity) string { return filepath.Join(p.Dir, id.Name+"-bundle.pem") }

// WriteHAProxyBundle writes id's HAProxy bundle from its certificate and key (owner-only). A
// server's carries the CA's certificate after its own: a browser that pins the CA's key finds it in
// the chain.
func (p PKI) WriteHAProxyBundle(id Identity) error {
	cert, err := os.ReadFile(p.CertFile(id))
	if err != nil {
		return err
	}
	if id.Server {
		ca, err := os.ReadFile(p.CAFile())
		if err != nil {
			return err
		}
		cert = append(cert, ca...)
	}
	key, err := os.ReadFile(p.KeyFile(id))
	if err != nil {
		return err
	}
	return writeAtomic(p.HAProxyBundle(id), append(cert, key...), 0o600)
}

func (p PKI) caKeyFile() string { return filepath.Join(p.Dir, "ca-key.pem") }

// ensureCA reads the authority, or makes it when there is none.
func (p PKI) ensureCA() (*x509.Certificate, crypto.Signer, error) {
	cert, key, err := readPair(p.CAFile(), p.caKeyFile())
	if err == nil {
		return cert, key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("the cluster's certificate authority: %w", err)
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "checkout cluster CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(caValidity), IsCA: true, BasicConstraintsValid: true,
		MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePair(p.CAFile(), p.caKeyFile(), der, key); err != nil {
		return nil, nil, err
	}
	cert, err = x509.ParseCertificate(der)
	return cert, key, err
}

// fresh: id's certificate exists, was signed by ca and lives longer than RenewBefore.
func (p PKI) fresh(id Identity, ca *x509.Certificate) bool {
	cert, _, err := readPair(p.CertFile(id), p.KeyFile(id))
	if err != nil || cert.CheckSignatureFrom(ca) != nil {
		return false
	}
	return time.Until(cert.NotAfter) > RenewBefore
}

func (p PKI) issue(id Identity, ca *x509.Certificate, caKey crypto.Signer) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial(),
		Subject:   pkix.Name{CommonName: id.CommonName, Organization: []string{"checkout"}},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(leafValidity), KeyUsage: x509.KeyUsageDigitalSignature}
	if id.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = []string{id.CommonName, "localhost"}
		if id == IdentityFrontend {
			tmpl.DNSNames = append(tmpl.DNSNames, FrontendServerName)
		}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	if id.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return err
	}
	return writePair(p.CertFile(id), p.KeyFile(id), der, key)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

// writePair writes a certificate (readable by all) and its key (by the owner only), each whole:
// a process that reads them meanwhile sees the old pair or the new one.
func writePair(certPath, keyPath string, der []byte, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeAtomic(path string, raw []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(raw)
	err = errors.Join(err, tmp.Chmod(mode), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

func readPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		if _, statErr := os.Stat(certPath); errors.Is(statErr, os.ErrNotExist) {
			return nil, nil, statErr
		}
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, err
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not a signing key", keyPath)
	}
	return cert, signer, nil
}
