package testbin

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Conns is a TCP server on a free loopback port for tests that decide
// what each connection does byte by byte (a server that closes after an
// answer, a relay that counts requests): URL is its base URL, Accepted
// counts the connections it took.
type Conns struct {
	URL      string
	Accepted atomic.Int64
}

// ServeConns runs handle on every connection, each in its own goroutine,
// until the test ends. Then it closes the listener, closes done (so that a
// handler waiting on a stalled connection returns), closes every
// connection and waits for the handlers. handle need not close c.
func ServeConns(t testing.TB, handle func(c net.Conn, done <-chan struct{})) *Conns {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Conns{URL: "http://" + ln.Addr().String()}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		close(done)
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.Accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				go func() { <-done; c.Close() }()
				handle(c, done)
			}()
		}
	}()
	return s
}
