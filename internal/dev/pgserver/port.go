package pgserver

import (
	"fmt"
	"net"
	"sync"
)

// given holds every port FreePort has handed out in this process. The kernel may hand a port
// that was just closed to the next bind on port 0, so two calls in a row can get the same one; a
// process that sets several servers' ports from FreePort (dev's ports, a test's) would then start
// two of them on one port.
var given = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort asks the kernel for a free TCP port on loopback, one that this process has not been
// given before.
func FreePort() (int, error) {
	given.Lock()
	defer given.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !given.ports[port] {
			given.ports[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("no loopback port that this process has not already been given")
}
