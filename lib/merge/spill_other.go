//go:build !linux

package merge

import "os"

// createSpill creates a spill file, unlinked at once (there is no unnamed
// file to open here).
func createSpill(dir string) (*os.File, error) { return createNamedSpill(dir) }
