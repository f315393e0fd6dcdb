package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
)

// Build builds the named commands (tokenmill/cmd/<name>,
// tokenmill/internal/cmd/<name> for the development commands, or the
// import path of another main package) into dir, for a TestMain that keeps
// its binaries itself; Main calls it.
//
// The test processes of one `go test ./...` need the same few binaries,
// and linking them again in every package costs more than many packages'
// tests. So they are built into one directory per checkout in the user's
// cache, each binary by one process at a time (a process waits only for
// the binaries it needs), where go build finds a binary up to date and
// does not link it again, and hard-linked (or copied) from there into
// dir. A binary a package is running is never changed under it: go build
// replaces a file rather than writing into it, and the package's link
// keeps the old one. Where there is no such cache, they are built into dir.
func Build(dir string, names ...string) error {
	shared, err := sharedBinDir()
	if err != nil {
		return goBuild(dir, names)
	}
	bins := make([]string, len(names))
	for i, n := range names {
		bins[i] = path.Base(n)
	}
	unlock, err := lockBinaries(shared, bins)
	if err != nil {
		return goBuild(dir, names)
	}
	defer unlock()
	if err := goBuild(shared, names); err != nil {
		return err
	}
	for _, b := range bins {
		if err := linkOrCopy(filepath.Join(shared, b), filepath.Join(dir, b)); err != nil {
			return err
		}
	}
	return nil
}

func goBuild(dir string, names []string) error {
	// -buildvcs=auto: the binaries carry the commit they were built from
	// (--version says it) wherever the source is a checkout.
	args := []string{"build", "-buildvcs=auto", "-o", dir + string(os.PathSeparator)}
	for _, n := range names {
		args = append(args, packageOf(n))
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("building %v: %v\n%s", names, err, out)
	}
	return nil
}

// sharedBinDir is the checkout's directory of built binaries.
func sharedBinDir() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	base := os.Getenv("TOKENMILL_CACHE") // where .ci/install-ollama puts its build too
	if base == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(c, "tokenmill")
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(base, "testbin", hex.EncodeToString(sum[:8]))
	return dir, os.MkdirAll(dir, 0o700)
}

// moduleRoot is the directory of the go.mod above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// linkOrCopy makes dst the file src is now: a hard link, or a copy where
// the two are on different file systems.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Commands are the names of the product's commands (the module's cmd/),
// for a test of the whole toolset.
func Commands() ([]string, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
