//go:build unix

package llmsim

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
)

// heldPort is a TCP port bound and not listening, for a server that
// listens once ready (vLLM): a connection to it is refused, as to the
// real server while it starts, and no other socket of this machine can
// take the port meanwhile. A port closed while the server starts could be
// taken (by another process's listener on port 0 or outgoing connection),
// and the server would then answer for another's or never listen.
type heldPort struct {
	fd   int // -1 once listening or closed
	addr string
}

// holdPort binds addr (port 0: any free port) without listening; with
// retry it tries as retryInUse does.
func holdPort(ctx context.Context, addr string, retry bool) (*heldPort, error) {
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := &heldPort{fd: -1}
	err = retryInUse(ctx, retry, func() error {
		fd, err := bindSocket(tcp)
		h.fd = fd
		return err
	})
	if err != nil {
		return nil, err
	}
	bound, err := syscall.Getsockname(h.fd)
	if err != nil {
		h.close()
		return nil, os.NewSyscallError("getsockname", err)
	}
	switch b := bound.(type) {
	case *syscall.SockaddrInet4:
		h.addr = (&net.TCPAddr{IP: net.IP(b.Addr[:]), Port: b.Port}).String()
	case *syscall.SockaddrInet6:
		h.addr = (&net.TCPAddr{IP: net.IP(b.Addr[:]), Port: b.Port}).String()
	}
	return h, nil
}

// bindSocket is a TCP socket bound to addr as net.Listen binds it: with
// SO_REUSEADDR (over the TIME_WAIT connections of the endpoint's previous
// incarnation), and with no host on every address, IPv6 and IPv4.
func bindSocket(addr *net.TCPAddr) (int, error) {
	s4 := &syscall.SockaddrInet4{Port: addr.Port}
	s6 := &syscall.SockaddrInet6{Port: addr.Port}
	family, sa := syscall.AF_INET6, syscall.Sockaddr(s6)
	if ip4 := addr.IP.To4(); ip4 != nil {
		copy(s4.Addr[:], ip4)
		family, sa = syscall.AF_INET, s4
	} else if addr.IP != nil {
		copy(s6.Addr[:], addr.IP.To16())
	}
	fd, err := socket(family)
	if err != nil && addr.IP == nil { // no IPv6 here: every IPv4 address
		family, sa = syscall.AF_INET, s4
		fd, err = socket(family)
	}
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if family == syscall.AF_INET6 && addr.IP == nil {
		_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return -1, os.NewSyscallError("setsockopt", err)
	}
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return -1, &net.OpError{Op: "bind", Net: "tcp", Addr: addr, Err: os.NewSyscallError("bind", err)}
	}
	return fd, nil
}

// socket is a TCP socket that a forked process does not inherit.
func socket(family int) (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	return fd, err
}

// listen starts listening on the held port; the port is no longer held
// (closed on failure).
func (h *heldPort) listen() (net.Listener, error) {
	fd := h.fd
	h.fd = -1
	if fd < 0 {
		return nil, errors.New("llmsim: the port is not held")
	}
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("listen", err)
	}
	f := os.NewFile(uintptr(fd), h.addr)
	defer f.Close() // the listener holds a copy
	return net.FileListener(f)
}

// close lets the port go without listening.
func (h *heldPort) close() {
	if h.fd >= 0 {
		syscall.Close(h.fd)
		h.fd = -1
	}
}
