package ollamaserver

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"tokenmill/internal/lifeline"
)

const (
	// EnvBinary points tests at an ollama binary.
	EnvBinary = "TOKENMILL_OLLAMA"
	// EnvCache is tokenmill's cache directory, where .ci/install-ollama
	// puts bin/ollama (default $HOME/.cache/tokenmill).
	EnvCache = lifeline.EnvCache
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

// CacheDir is tokenmill's cache directory (lifeline.CacheDir).
func CacheDir() string { return lifeline.CacheDir() }

// Find locates the ollama binary: $TOKENMILL_OLLAMA, else the cache's
// bin/ollama, else ollama on PATH (lifeline.Find); finding nothing wraps
// ErrNotInstalled, with the reason the last install failed if it left one.
func Find() (string, error) {
	p, err := lifeline.Find(EnvBinary, "ollama")
	if !errors.Is(err, lifeline.ErrNotFound) {
		return p, err
	}
	if why, rerr := os.ReadFile(filepath.Join(CacheDir(), failedMarker)); rerr == nil {
		return "", fmt.Errorf("%w (it last failed: %s)", ErrNotInstalled, strings.TrimSpace(string(why)))
	}
	return "", fmt.Errorf("%w (or set %s; %s", ErrNotInstalled, EnvBinary, strings.TrimPrefix(err.Error(), lifeline.ErrNotFound.Error()+" ("))
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
