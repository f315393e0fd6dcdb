//go:build !unix

package llmsim

import "net"

// hangupWatch never fires where the socket cannot be peeked at: a client
// that goes away keeps its slot until its answer is done.
type hangupWatch struct{ gone chan struct{} }

func watchHangup(net.Conn) *hangupWatch { return &hangupWatch{gone: make(chan struct{})} }

func (w *hangupWatch) stop() {}
