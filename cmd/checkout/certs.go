package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/marketplace/checkout/internal/pki"
)

// runCerts is `checkout certs`: the cluster's CA and certificates in a folder of a deployment's
// own (docker-compose.yml's certs job), as `checkout-dev cluster` makes them in its data folder.
func runCerts(args []string) error {
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	dir := fs.String("dir", "", "the folder: ca.pem and <identity>.pem, <identity>-key.pem")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	// Ensure writes into <parent>/tls, as in a cluster's data folder.
	if filepath.Base(filepath.Clean(*dir)) != pki.TLSDir {
		return fmt.Errorf("--dir %s: the folder must be named %s", *dir, pki.TLSDir)
	}
	certs, err := pki.Ensure(filepath.Dir(filepath.Clean(*dir)))
	if err != nil {
		return err
	}
	fmt.Println("certificates in", certs.Dir)
	return nil
}
