//go:build unix

package cli

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// notifyResize delivers SIGWINCH, which a terminal sends when it is
// resized, so that the live display is redrawn to the new size at once;
// stop ends it.
func notifyResize() (<-chan os.Signal, func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGWINCH)
	return sig, func() { signal.Stop(sig) }
}
