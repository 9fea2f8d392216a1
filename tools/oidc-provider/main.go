// Command oidc-provider is the checkout's identity provider: an OpenID Connect provider built on
// github.com/zitadel/oidc (its authorization, token, discovery and JWKS endpoints; ours are the
// sign-in page and where people, programs, keys and the client are kept). `make cluster` runs it;
// the Temporal UI signs people in with it, sellers' ERPs and the load generator get shoppers' and
// sellers' tokens from it (machines.go), and Temporal and the API verify its tokens against its
// JWKS. Outside this machine a shop uses its own identity provider the same way.
//
// A module of its own, as tools/temporal-server, so that the product's go.mod does not carry it.
//
//	oidc-provider serve       serve (settings below)
//	oidc-provider user        add or replace a person: --dir, --name, --sub, --role, --display;
//	                          the password on standard input
//	oidc-provider rotate-key  add a signing key to --dir (published at once, signing after
//	                          OIDC_KEY_PUBLISH_LEAD); remove an old key's file to retire it
//	oidc-provider seller      add or replace a seller's ERP, a client of the client_credentials
//	                          grant: --dir, --client-id, --seller (its seller id), --sub (its user
//	                          id); the client secret (32 bytes or more) on standard input
//	oidc-provider shopper-key add or replace a program's key for the JWT-profile grant, which may
//	                          assert shoppers only: --dir, --kid, --min-subject (the lowest user id
//	                          it may assert); the RSA public key (PEM) on standard input
//
// serve's settings (environment):
//
//	OIDC_DIR              the folder of keys/ and users.json (required)
//	OIDC_ISSUER           the issuer, as browsers and verifiers reach it (required); http only on
//	                      loopback
//	OIDC_LISTEN           listen address (default 127.0.0.1:8234)
//	OIDC_CLIENT_ID        the Temporal UI's client id, the tokens' audience (default temporal-ui)
//	OIDC_CLIENT_SECRET    its secret (required, at least 32 bytes)
//	OIDC_REDIRECT_URIS    its callback URLs, comma-separated (required)
//	OIDC_TOKEN_TTL        how long tokens live (default 1h)
//	OIDC_KEY_PUBLISH_LEAD how long a new key is published before it signs (default 2m)
package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/zitadel/oidc/v3/pkg/op"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "oidc-provider:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args)
	case "user":
		return addUser(args, os.Stdin)
	case "rotate-key":
		fs := flag.NewFlagSet("rotate-key", flag.ContinueOnError)
		dir := fs.String("dir", os.Getenv("OIDC_DIR"), "the provider's folder")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *dir == "" {
			return errors.New("--dir is required")
		}
		kid, err := makeKey(*dir, time.Now())
		if err != nil {
			return err
		}
		fmt.Println("new signing key", kid, "published now; it signs once it has been published for OIDC_KEY_PUBLISH_LEAD")
		return nil
	case "seller":
		fs := flag.NewFlagSet("seller", flag.ContinueOnError)
		dir := fs.String("dir", os.Getenv("OIDC_DIR"), "the provider's folder")
		var c sellerClient
		fs.StringVar(&c.ClientID, "client-id", "", "the ERP's client id")
		fs.StringVar(&c.SellerID, "seller", "", "the seller id its tokens carry")
		fs.StringVar(&c.Subject, "sub", "", "the seller's user id, its tokens' subject")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *dir == "" {
			return errors.New("--dir is required")
		}
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && line == "" {
			return errors.New("the client secret is read from standard input")
		}
		return putSeller(*dir, c, strings.TrimRight(line, "\r\n"))
	case "shopper-key":
		fs := flag.NewFlagSet("shopper-key", flag.ContinueOnError)
		dir := fs.String("dir", os.Getenv("OIDC_DIR"), "the provider's folder")
		var k shopperKey
		fs.StringVar(&k.KeyID, "kid", "", "the key's id, which assertions name")
		fs.Int64Var(&k.MinSubject, "min-subject", 0, "the lowest user id the key may assert")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *dir == "" {
			return errors.New("--dir is required")
		}
		raw, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<10))
		if err != nil {
			return err
		}
		k.PublicKey = string(raw)
		return putShopperKey(*dir, k)
	}
	return fmt.Errorf("unknown command %q: serve, user, rotate-key, seller, shopper-key", cmd)
}

func addUser(args []string, stdin *os.File) error {
	fs := flag.NewFlagSet("user", flag.ContinueOnError)
	dir := fs.String("dir", os.Getenv("OIDC_DIR"), "the provider's folder")
	var u user
	fs.StringVar(&u.Name, "name", "", "the name the person signs in with")
	fs.StringVar(&u.Subject, "sub", "", "the checkout's user id of the person (a decimal number): the tokens' sub")
	fs.StringVar(&u.Role, "role", "", "support, ops, shopper or seller")
	fs.StringVar(&u.DisplayName, "display", "", "the person's name as actions record it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && line == "" {
		return errors.New("the password is read from standard input")
	}
	u.DisplayName = cmp.Or(u.DisplayName, u.Name)
	return putUser(*dir, u, strings.TrimRight(line, "\r\n"))
}

type settings struct {
	dir, issuer, listen, clientID, clientSecret string
	redirects                                   []string
	tokenTTL, publishLead                       time.Duration
}

func readSettings() (settings, error) {
	s := settings{dir: os.Getenv("OIDC_DIR"), issuer: strings.TrimRight(os.Getenv("OIDC_ISSUER"), "/"),
		listen: cmp.Or(os.Getenv("OIDC_LISTEN"), "127.0.0.1:8234"), clientID: cmp.Or(os.Getenv("OIDC_CLIENT_ID"), "temporal-ui"),
		clientSecret: os.Getenv("OIDC_CLIENT_SECRET"), tokenTTL: time.Hour, publishLead: 2 * time.Minute}
	for _, r := range strings.Split(os.Getenv("OIDC_REDIRECT_URIS"), ",") {
		if r = strings.TrimSpace(r); r != "" {
			s.redirects = append(s.redirects, r)
		}
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"OIDC_TOKEN_TTL", &s.tokenTTL}, {"OIDC_KEY_PUBLISH_LEAD", &s.publishLead}} {
		if v := os.Getenv(d.name); v != "" {
			parsed, err := time.ParseDuration(v)
			if err != nil || parsed < 0 {
				return s, fmt.Errorf("%s %q: a duration", d.name, v)
			}
			*d.to = parsed
		}
	}
	u, err := url.Parse(s.issuer)
	switch {
	case s.dir == "":
		return s, errors.New("OIDC_DIR is not set")
	case s.issuer == "" || err != nil || u.Host == "":
		return s, fmt.Errorf("OIDC_ISSUER %q: the issuer's URL (https://…)", s.issuer)
	case u.Scheme != "https" && !(u.Scheme == "http" && loopback(u.Hostname())):
		return s, fmt.Errorf("OIDC_ISSUER %s: https, or http on this machine only (localhost, 127.0.0.1)", s.issuer)
	case len(s.clientSecret) < 32:
		return s, errors.New("OIDC_CLIENT_SECRET is not set or shorter than 32 bytes")
	case len(s.redirects) == 0:
		return s, errors.New("OIDC_REDIRECT_URIS is not set: the client's callback URLs")
	case s.tokenTTL < time.Minute || s.tokenTTL > 24*time.Hour:
		return s, fmt.Errorf("OIDC_TOKEN_TTL %s: between 1m and 24h", s.tokenTTL)
	}
	return s, nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// newHandler is the provider's HTTP handler: zitadel/oidc's endpoints and our sign-in page.
func newHandler(s settings, log *slog.Logger, now func() time.Time) (http.Handler, error) {
	if err := ensureKey(s.dir, now()); err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	st := &storage{dir: s.dir, client: newClient(s.clientID, s.clientSecret, s.redirects, s.tokenTTL),
		keys: &keyRing{dir: s.dir, publishLead: s.publishLead, now: now, reload: 10 * time.Second}, tokenTTL: s.tokenTTL,
		now: now, requests: map[string]*authRequest{}, codes: map[string]string{}}
	cfg := &op.Config{CodeMethodS256: true}
	if _, err := rand.Read(cfg.CryptoKey[:]); err != nil {
		return nil, err
	}
	var opts []op.Option
	if strings.HasPrefix(s.issuer, "http://") {
		opts = append(opts, op.WithAllowInsecure())
	}
	provider, err := op.NewProvider(cfg, st, op.StaticIssuer(s.issuer), opts...)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	signIn := &login{storage: st, callback: op.AuthCallbackURL(provider), origin: originOf(s.issuer), log: log}
	for _, r := range s.redirects {
		if o := originOf(r); o != "" && !slices.Contains(signIn.clients, o) {
			signIn.clients = append(signIn.clients, o)
		}
	}
	mux.Handle(loginPath, op.NewIssuerInterceptor(provider.IssuerFromRequest).Handler(signIn))
	mux.Handle("/", provider)
	return mux, nil
}

func serve(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("serve takes no arguments (its settings are environment variables): %v", args)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	s, err := readSettings()
	if err != nil {
		return err
	}
	h, err := newHandler(s, log, time.Now)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: s.listen, Handler: h, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	l, err := net.Listen("tcp", s.listen)
	if err != nil {
		return err
	}
	log.Info("serving", "issuer", s.issuer, "listen", s.listen, "client_id", s.clientID)
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(l) }()
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}
