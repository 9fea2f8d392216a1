package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Processes of earlier builds reach the frontend through the legacy proxy. A build from before
// mutual TLS (saga-6 and older) cannot present a certificate, and the frontend takes no client
// without one; yet its workers must keep running until its runs drain. So the cluster runs a second
// HAProxy, in TCP mode, that listens on a Unix socket only the cluster's own user may open (mode
// 0600) and dials the frontend over mutual TLS with the worker's certificate: such a worker is
// known to the server as a worker, nothing more, and no port is opened to anyone.

// LegacyProxyName is the proxy's process.
const LegacyProxyName = "temporal-legacy-proxy"

const legacyProxyConfig = "legacy-proxy.cfg"

// legacyIdentities are the identities the proxy speaks as, each behind a socket of its own: an
// earlier build's workers as the worker, its API replicas as the API (which alone may start line
// cancellations for ops).
var legacyIdentities = []Identity{IdentityWorker, IdentityAPI}

// LegacySocket is the proxy's socket for id: in the data folder, or, where that path is too long
// for a socket (108 bytes), in the system's temporary folder under a name of the data folder's
// own.
func (o Options) LegacySocket(id Identity) string {
	if p := filepath.Join(o.Dir, "temporal-legacy-"+id.Name+".sock"); len(p) < 100 {
		return p
	}
	sum := sha256.Sum256([]byte(o.Dir))
	return filepath.Join(os.TempDir(), "checkout-cluster-"+hex.EncodeToString(sum[:6])+"-"+id.Name+".sock")
}

// LegacyEnv is what a process of a build without TLS settings runs with to reach this cluster's
// Temporal as id (IdentityWorker or IdentityAPI): its TEMPORAL_ADDRESS is the legacy proxy's
// socket, in place of the frontend's port. Everything else is the settings of today's processes
// (which such a build ignores where it does not know them).
func LegacyEnv(o Options, id Identity) []string {
	return []string{"TEMPORAL_ADDRESS=unix://" + o.LegacySocket(id)}
}

// legacyProxy plans the proxy: HAProxy on its own configuration (writeLegacyProxyConfig).
func legacyProxy(o Options, haproxy string) Process {
	return Process{Name: LegacyProxyName, Service: LegacyProxyName, Path: haproxy,
		Args: []string{"-W", "-db", "-f", filepath.Join(o.Dir, legacyProxyConfig)},
		Ready: func(ctx context.Context) error {
			for _, id := range legacyIdentities {
				var d net.Dialer
				c, err := d.DialContext(ctx, "unix", o.LegacySocket(id))
				if err != nil {
					return err
				}
				c.Close()
			}
			return nil
		}}
}

// LegacyProxyConfig is the proxy's HAProxy configuration: a socket per identity, owner-only, to
// the frontend at frontend over TLS (ALPN h2, as gRPC requires) with that identity's certificate,
// checking the frontend's against the cluster's CA.
func LegacyProxyConfig(o Options, frontend string) string {
	pki := o.PKI()
	lines := []string{
		"# Written by checkout-dev cluster: processes of builds without TLS settings reach the frontend",
		"# through these sockets, as the worker or the API (internal/dev/cluster/legacy.go).",
		"global",
		"    maxconn 1024",
		"    log stdout format raw local0 notice",
		"defaults",
		"    mode tcp",
		"    log global",
		"    timeout connect 2s",
		"    timeout client 10m",
		"    timeout server 10m",
	}
	for _, id := range legacyIdentities {
		lines = append(lines,
			"frontend legacy-"+id.Name,
			fmt.Sprintf("    bind unix@%s mode 600", o.LegacySocket(id)),
			"    default_backend frontend-as-"+id.Name,
			"backend frontend-as-"+id.Name,
			fmt.Sprintf("    server frontend %s ssl crt %s ca-file %s verify required verifyhost %s sni str(%s) alpn h2",
				frontend, pki.HAProxyBundle(id), pki.CAFile(), FrontendServerName, FrontendServerName))
	}
	return strings.Join(append(lines, ""), "\n")
}
