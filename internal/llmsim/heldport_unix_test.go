//go:build unix

package llmsim

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A server that listens once ready holds its port while it starts: no
// other socket may bind it, as a port let go would be bound by another
// process's listener on port 0 or outgoing connection (then the server
// answered for another's, or never listened again). Once ready it listens
// there.
func TestStartingHoldsPort(t *testing.T) {
	clock := NewManualClock()
	fleet := startFleet(t, Config{Instant: true, Clock: clock, Flavor: FlavorVLLM, Faults: Faults{StartupDelay: time.Minute}}, 1)
	tcp, err := net.ResolveTCPAddr("tcp", strings.TrimPrefix(fleet.URLs()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	sa := &syscall.SockaddrInet4{Port: tcp.Port}
	copy(sa.Addr[:], tcp.IP.To4())
	if err := syscall.Bind(fd, sa); err != syscall.EADDRINUSE {
		t.Fatalf("binding %v while the server starts: %v, want %v", tcp, err, syscall.EADDRINUSE)
	}
	if _, err := testClient.Get(fleet.URLs()[0] + pathHealth); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("/health while starting: %v, want the connection refused", err)
	}
	clock.Advance(time.Minute)
	waitFor(t, "the server to listen on its port once ready", func() bool {
		resp, err := testClient.Get(fleet.URLs()[0] + pathHealth)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
}
