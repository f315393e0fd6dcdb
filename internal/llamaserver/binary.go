package llamaserver

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

const (
	// EnvBinary points tests at a llama-server binary.
	EnvBinary = "TOKENMILL_LLAMA_SERVER"
	// EnvCache is tokenmill's cache directory, where a llama-server built
	// by hand is looked for as bin/llama-server (default
	// $HOME/.cache/tokenmill).
	EnvCache = "TOKENMILL_CACHE"
)

// ErrNotInstalled is why Find found no binary; tests skip on it.
var ErrNotInstalled = errors.New("llama-server not installed: build llama.cpp's llama-server (CPU is enough) and set " + EnvBinary + " to it")

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

// Find locates llama-server: $TOKENMILL_LLAMA_SERVER, else the cache's
// bin/llama-server, else llama-server on PATH. A TOKENMILL_LLAMA_SERVER
// that names no executable is an error of its own; finding nothing wraps
// ErrNotInstalled.
func Find() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	cached := filepath.Join(CacheDir(), "bin", "llama-server")
	if executable(cached) == nil {
		return cached, nil
	}
	if p, err := exec.LookPath("llama-server"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w (looked in %s and PATH)", ErrNotInstalled, filepath.Dir(cached))
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
