package ollamaserver

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const (
	// EnvBinary points tests at an ollama binary.
	EnvBinary = "TOKENMILL_OLLAMA"
	// EnvCache is tokenmill's cache directory, where .ci/install-ollama
	// puts bin/ollama (default $HOME/.cache/tokenmill).
	EnvCache = "TOKENMILL_CACHE"
	// Version is the Ollama release .ci/install-ollama installs and
	// testdata/ollama's answers come from.
	Version = "v0.6.5"
	// module is the path go install builds Ollama from.
	module = "github.com/ollama/ollama"
	// failedMarker, in the cache directory, holds the reason the last
	// install failed.
	failedMarker = "ollama-install.failed"
)

// ErrNotInstalled is why Find found no binary; tests skip on it.
var ErrNotInstalled = errors.New("ollama not installed: run .ci/install-ollama")

// CacheDir is tokenmill's cache directory: $TOKENMILL_CACHE, else
// $HOME/.cache/tokenmill.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "tokenmill-cache")
	}
	return filepath.Join(home, ".cache", "tokenmill")
}

// Find locates the ollama binary: $TOKENMILL_OLLAMA, else the cache's
// bin/ollama, else ollama on PATH. A TOKENMILL_OLLAMA that names no
// executable is an error of its own; finding nothing wraps
// ErrNotInstalled, with the reason the last install failed if it left one.
func Find() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	cached := filepath.Join(CacheDir(), "bin", "ollama")
	if executable(cached) == nil {
		return cached, nil
	}
	if p, err := exec.LookPath("ollama"); err == nil {
		return p, nil
	}
	if why, err := os.ReadFile(filepath.Join(CacheDir(), failedMarker)); err == nil {
		return "", fmt.Errorf("%w (it last failed: %s)", ErrNotInstalled, strings.TrimSpace(string(why)))
	}
	return "", fmt.Errorf("%w (or set %s; looked in %s and PATH)", ErrNotInstalled, EnvBinary, filepath.Dir(cached))
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

// builtVersion is the module version a go-installed ollama was built at,
// "" when the binary does not say (a release build reports it through
// /api/version instead).
func builtVersion(path string) string {
	info, err := buildinfo.ReadFile(path)
	if err != nil || info.Main.Path != module || !strings.HasPrefix(info.Main.Version, "v") {
		return ""
	}
	return info.Main.Version
}
