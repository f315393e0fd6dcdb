package tokens

import (
	"sync"
	"sync/atomic"
)

// Context is the model's context length as a run learns it: as the
// servers (or --context-length) state it, or as a server said it where
// that is smaller (the server's own word wins over a larger
// --context-length); 0 while unknown. The zero value knows nothing.
type Context struct {
	stated func() int // what the servers state (0: nothing); nil: none
	said   atomic.Int64
	mu     sync.Mutex // one ConfirmCut question at a time
	// keepsAtLeast is what a server was found to keep of a prompt.
	keepsAtLeast int
}

// State sets where the servers' statement is read; before any other use.
func (c *Context) State(stated func() int) { c.stated = stated }

// Len is the context requests are fitted to; 0 while unknown.
func (c *Context) Len() int {
	said := int(c.said.Load())
	if c.stated != nil {
		if n := c.stated(); n > 0 && (said == 0 || n < said) {
			return n
		}
	}
	return said
}

// Learn takes n, the context a server said, when it is smaller than the
// one requests are fitted to (or none is known); was is that one (0:
// none).
func (c *Context) Learn(n int) (was int, learned bool) {
	for {
		old := c.said.Load()
		if old > 0 && int64(n) >= old {
			return 0, false
		}
		now := c.Len()
		if now > 0 && n >= now {
			return 0, false
		}
		if c.said.CompareAndSwap(old, int64(n)) {
			return now, true
		}
	}
}

// ConfirmCut asks probe whether a server cuts prompts at n tokens: n (or
// the context learned meanwhile) when it does, 0 when it keeps more or
// could not be asked (err). One question at a time; the answers are kept,
// so that prompts as short are not asked about again.
func (c *Context) ConfirmCut(n int, probe func(n int) (kept int, err error)) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx := c.Len(); ctx > 0 && n >= ctx {
		return ctx, nil // learned meanwhile
	}
	if n < c.keepsAtLeast {
		return 0, nil
	}
	kept, err := probe(n)
	switch {
	case err != nil:
		c.keepsAtLeast = max(c.keepsAtLeast, n+1)
		return 0, err
	case kept > n:
		c.keepsAtLeast = max(c.keepsAtLeast, kept)
		return 0, nil
	}
	return kept, nil
}
