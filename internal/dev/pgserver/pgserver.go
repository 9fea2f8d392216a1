// Package pgserver runs a private PostgreSQL cluster from the machine's server binaries, in a data
// folder of its own and on its own port. `dev` and the tests use it; production points
// DATABASE_URL at a managed server instead.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options describe the cluster to run.
type Options struct {
	// Dir is the data folder; it is created with initdb when it holds no cluster yet.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Database is created when missing; empty means "postgres" only.
	Database string
	// Fast trades durability for speed (fsync off): for tests and benchmarks, never for data
	// anyone wants to keep.
	Fast bool
	// Settings are extra server settings (name → value).
	Settings map[string]string
	// Log receives the server's output; nil discards it.
	Log *os.File
}

// Server is a running cluster. Stop it; it also stops when this process dies.
type Server struct {
	Dir  string
	Port int
	// Socket is the folder of the server's Unix socket (the data folder), or empty when that path
	// is too long for a socket's name and the server listens on TCP only.
	Socket string
	cmd    *exec.Cmd
	// exited is closed when the server process has ended, with exitErr its end.
	exited  chan struct{}
	exitErr error
}

// Superuser is the role initdb creates; connections use trust authentication on loopback only.
const Superuser = "postgres"

// Start initialises the data folder when needed and starts the server, waiting until it accepts
// connections.
func Start(ctx context.Context, o Options) (*Server, error) {
	bindir, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dir, cred); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		cmd := exec.CommandContext(ctx, filepath.Join(bindir, "initdb"),
			"-D", dir, "-U", Superuser, "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("initdb %s: %w\n%s", dir, err, out)
		}
	}
	port := o.Port
	if port == 0 {
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if inUse(port) {
		return nil, fmt.Errorf("port %d is already in use: stop what listens there or choose another PG_PORT", port)
	}
	// A Unix socket in the data folder too (owned by the server's user, mode 0700): a local client
	// skips TCP's loopback stack. A socket's name is bounded (about 107 bytes on Linux).
	socket := dir
	if len(socket)+len("/.s.PGSQL.65535") > 100 {
		socket = ""
	}
	args := []string{"-D", dir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + socket,
		"-c", "max_connections=300", "-c", "shared_buffers=256MB"}
	if o.Fast {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	keys := make([]string, 0, len(o.Settings))
	for k := range o.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+o.Settings[k])
	}
	cmd := exec.Command(filepath.Join(bindir, "postgres"), args...)
	// SIGINT is PostgreSQL's fast shutdown; the kernel sends it when this process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGINT, Setpgid: true}
	var logBuf bytes.Buffer
	if o.Log != nil {
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
	} else {
		cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	s := &Server{Dir: dir, Port: port, Socket: socket, cmd: cmd, exited: make(chan struct{})}
	go func() { s.exitErr = cmd.Wait(); close(s.exited) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			break
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("postgres exited while starting: %v\n%s", s.exitErr, logBuf.String())
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("postgres on port %d not ready after 60s: %v", port, err)
		}
	}
	if o.Database != "" {
		if err := s.CreateDatabase(ctx, o.Database, ""); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// URL is the connection string of one database of the cluster.
func (s *Server) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, s.Port, database)
}

// LocalURL is URL over the server's Unix socket, or over TCP when it has none.
func (s *Server) LocalURL(database string) string {
	if s.Socket == "" {
		return s.URL(database)
	}
	return fmt.Sprintf("postgres://%s@/%s?host=%s&port=%d&sslmode=disable", Superuser, database,
		url.QueryEscape(s.Socket), s.Port)
}

// CreateDatabase creates name (from template when given) unless it exists.
func (s *Server) CreateDatabase(ctx context.Context, name, template string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Stop shuts the server down (fast shutdown) and waits for it.
func (s *Server) Stop() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// StopImmediate stops the server running on the data folder dir as `pg_ctl stop -m immediate`
// does, whoever started it: every backend ends at once, nothing is checkpointed, and the next start
// recovers from the WAL, as after a crash. It returns once the server is gone.
func StopImmediate(ctx context.Context, dir string) error {
	bindir, err := BinDir()
	if err != nil {
		return err
	}
	cred, err := runAs()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bindir, "pg_ctl"), "stop", "-D", dir, "-m", "immediate", "-w", "-t", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Exited is closed when the server has ended, whoever ended it.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// ExitErr is how the server ended, once Exited is closed.
func (s *Server) ExitErr() error {
	<-s.exited
	return s.exitErr
}

// BinDir finds the folder with initdb and postgres: PG_BINDIR, then PATH, then Debian's layout.
func BinDir() (string, error) {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) > 0 {
		sort.Strings(matches)
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found: install the postgresql package or set PG_BINDIR")
}

// runAs returns the credentials the server runs with: PostgreSQL refuses to run as root, so a
// root caller runs it as the postgres system user; anyone else runs it as themselves.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres system user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func prepareDir(dir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if cred == nil {
		return nil
	}
	// The server user must own its data folder and reach it through every parent.
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return err
	}
	for p := filepath.Dir(dir); p != "/" && p != "."; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, st.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("make %s traversable for the postgres user: %w", p, err)
			}
		}
	}
	return nil
}

func inUse(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
