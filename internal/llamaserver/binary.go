package llamaserver

import (
	"errors"
	"fmt"
	"strings"

	"tokenmill/internal/lifeline"
)

const (
	// EnvBinary points tests at a llama-server binary.
	EnvBinary = "TOKENMILL_LLAMA_SERVER"
	// EnvCache is tokenmill's cache directory, where a llama-server built
	// by hand is looked for as bin/llama-server (default
	// $HOME/.cache/tokenmill).
	EnvCache = lifeline.EnvCache
)

// ErrNotInstalled is why Find found no binary; tests skip on it.
var ErrNotInstalled = errors.New("llama-server not installed: build llama.cpp's llama-server (CPU is enough) and set " + EnvBinary + " to it")

// CacheDir is tokenmill's cache directory (lifeline.CacheDir).
func CacheDir() string { return lifeline.CacheDir() }

// Find locates llama-server: $TOKENMILL_LLAMA_SERVER, else the cache's
// bin/llama-server, else llama-server on PATH (lifeline.Find); finding
// nothing wraps ErrNotInstalled.
func Find() (string, error) {
	p, err := lifeline.Find(EnvBinary, "llama-server")
	if errors.Is(err, lifeline.ErrNotFound) {
		return "", fmt.Errorf("%w%s", ErrNotInstalled, strings.TrimPrefix(err.Error(), lifeline.ErrNotFound.Error()))
	}
	return p, err
}
