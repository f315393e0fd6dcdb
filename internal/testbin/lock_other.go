//go:build !unix

package testbin

import "errors"

// lockDir: no shared directory where there is no flock; Build builds into
// the package's own.
func lockDir(string) (func(), error) {
	return nil, errors.New("no file locks on this system")
}
