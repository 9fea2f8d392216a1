// Package childproc runs a server of the local stack (the Temporal dev server, Prometheus) as a
// child process: in a process group of its own, asked to stop when this process dies, and killed
// with its group when it does not stop in time.
package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"
)

// Process is a running child.
type Process struct {
	name string
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
}

// Start runs cmd; name says what it is in errors. Its output goes to log, or, when log is nil, is
// kept to be quoted should it exit while starting.
func Start(name string, cmd *exec.Cmd, log io.Writer) (*Process, error) {
	p := &Process{name: name, cmd: cmd, done: make(chan error, 1)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	if log != nil {
		cmd.Stdout, cmd.Stderr = log, log
	} else {
		cmd.Stdout, cmd.Stderr = &p.out, &p.out
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// WaitReady calls ready every 100ms until it returns nil, the child exits, ctx ends or timeout
// passes.
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case err := <-p.done:
			p.done <- err
			return fmt.Errorf("%s exited while starting: %v\n%s", p.name, err, p.out.String())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if lastErr = ready(ctx); lastErr == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return errors.Join(fmt.Errorf("%s not ready after %s", p.name, timeout), lastErr)
}

// Stop asks the child to end (SIGTERM) and waits for it; after 20 seconds its group is killed.
func (p *Process) Stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Kill ends the child and its group at once (SIGKILL), as a crash would, and waits for it.
func (p *Process) Kill() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.done <- nil
}
