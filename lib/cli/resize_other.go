//go:build !unix

package cli

import "os"

// notifyResize: no resize signal here; the display is redrawn to the
// terminal's size at its next tick.
func notifyResize() (<-chan os.Signal, func()) { return nil, func() {} }
