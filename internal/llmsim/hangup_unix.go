//go:build unix

package llmsim

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// hangupWatch tells when the client of a request waiting for its answer
// closes its connection, as uvicorn tells SGLang (which then aborts the
// request). fasthttp reads nothing from a connection while its handler
// runs, so the watch asks the poller to wake it when the socket turns
// readable and peeks (MSG_PEEK) at what is there without taking it: no
// bytes mean the client closed; bytes (a pipelined request) end the watch,
// since what follows can no longer be seen without reading it.
type hangupWatch struct {
	conn net.Conn
	gone chan struct{} // closed when the client closed the connection
	done chan struct{} // closed when the watch is over
}

func watchHangup(c net.Conn) *hangupWatch {
	w := &hangupWatch{conn: c, gone: make(chan struct{}), done: make(chan struct{})}
	if tc, ok := c.(*trackConn); ok {
		c = tc.Conn
	}
	sc, ok := c.(syscall.Conn)
	var raw syscall.RawConn
	if ok {
		raw, _ = sc.SyscallConn()
	}
	if raw == nil {
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		var buf [1]byte
		hungUp := false
		err := raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK)
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				return false // nothing yet: wait until the socket is readable
			}
			hungUp = n == 0 || err != nil // end of stream, or a reset
			return true
		})
		if err == nil && hungUp {
			close(w.gone)
		}
	}()
	return w
}

// stop ends the watch before the answer is written: a read deadline in
// the past wakes the poller, and the deadline is cleared again once the
// watch is over, for the server's next read.
func (w *hangupWatch) stop() {
	select {
	case <-w.done:
		return
	default:
	}
	w.conn.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	w.conn.SetReadDeadline(time.Time{})
}
