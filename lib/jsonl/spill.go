package jsonl

import "os"

// CreateSpill makes a scratch file in dir (os.TempDir() when empty) that
// lives only as long as its descriptor: on Linux it never has a name
// (O_TMPFILE), so a process killed at any moment leaves nothing behind;
// elsewhere, or on a file system without O_TMPFILE, it is made under
// pattern (as os.CreateTemp takes it) and unlinked at once.
func CreateSpill(dir, pattern string) (*os.File, error) {
	if f, ok, err := createUnnamed(dir); ok {
		return f, err
	}
	return createNamedSpill(dir, pattern)
}

// createNamedSpill creates a spill file and unlinks it at once, where an
// unnamed one cannot be had: a kill between the two leaves it behind.
func createNamedSpill(dir, pattern string) (*os.File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
