package cluster

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/marketplace/checkout/internal/pki"
)

// The cluster's certificate authority and certificates are package pki's, which the product's
// `checkout certs` makes for a deployment too; these are its names in the cluster.
type (
	PKI      = pki.PKI
	Identity = pki.Identity
)

const (
	TLSDir             = pki.TLSDir
	FrontendServerName = pki.FrontendServerName
	RenewBefore        = pki.RenewBefore
)

var (
	IdentityFrontend     = pki.IdentityFrontend
	IdentityInternode    = pki.IdentityInternode
	IdentitySystemWorker = pki.IdentitySystemWorker
	IdentityWorker       = pki.IdentityWorker
	IdentityAPI          = pki.IdentityAPI
	IdentityTools        = pki.IdentityTools
	IdentityUI           = pki.IdentityUI
	IdentityCodec        = pki.IdentityCodec
	Identities           = pki.Identities
)

// EnsurePKI makes the cluster's authority and certificates in dir/tls as pki.Ensure does (the codec
// frontend's HAProxy bundle with them), and the legacy proxy's client certificates as HAProxy reads
// them (legacy.go).
func EnsurePKI(dir string) (PKI, error) {
	p, err := pki.Ensure(dir)
	if err != nil {
		return p, err
	}
	for _, id := range legacyIdentities {
		if err := p.WriteHAProxyBundle(id); err != nil {
			return p, err
		}
	}
	return p, nil
}

// writeAtomic writes a file whole: a process that reads it meanwhile sees the old one or the new.
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
