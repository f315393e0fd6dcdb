//go:build !unix

package llmsim

import (
	"context"
	"net"
)

// heldPort, where a socket cannot be bound without listening, only
// remembers the address: the port is free while the server starts, and
// another socket may take it meanwhile.
type heldPort struct {
	ctx  context.Context
	addr string
}

func holdPort(ctx context.Context, addr string, retry bool) (*heldPort, error) {
	ln, err := listen(ctx, addr, retry)
	if err != nil {
		return nil, err
	}
	h := &heldPort{ctx: ctx, addr: ln.Addr().String()}
	ln.Close()
	return h, nil
}

func (h *heldPort) listen() (net.Listener, error) { return listen(h.ctx, h.addr, true) }

func (h *heldPort) close() {}
