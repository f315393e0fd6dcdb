//go:build !unix

package testbin

import "errors"

// lockBinaries: no shared directory where there is no flock; Build builds
// into the package's own.
func lockBinaries(string, []string) (func(), error) {
	return nil, errors.New("no file locks on this system")
}
