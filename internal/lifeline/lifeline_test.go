package lifeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	const env = "TOKENMILL_TEST_LIFELINE_BIN"
	dir := t.TempDir()
	exe := filepath.Join(dir, "my-server")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	cached := filepath.Join(cache, "bin", "server")
	onPath := filepath.Join(dir, "path")
	install := func(p string) func(t *testing.T) {
		return func(t *testing.T) {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name     string
		env      string
		setup    func(t *testing.T)
		want     string
		wantErr  string
		notFound bool // the error is ErrNotFound
	}{
		{name: "env", env: exe, want: exe},
		{name: "env missing", env: filepath.Join(dir, "nope"), wantErr: "no such file"},
		{name: "env not executable", env: plain, wantErr: "not an executable"},
		{name: "env directory", env: dir, wantErr: "not an executable"},
		{name: "nothing", wantErr: "not found (looked in " + filepath.Dir(cached) + " and PATH)", notFound: true},
		{name: "PATH", setup: install(filepath.Join(onPath, "server")), want: filepath.Join(onPath, "server")},
		{name: "cache before PATH", setup: install(cached), want: cached},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(env, tc.env)
			t.Setenv(EnvCache, cache)
			t.Setenv("PATH", onPath)
			if tc.setup != nil {
				tc.setup(t)
			}
			got, err := Find(env, "server")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || errors.Is(err, ErrNotFound) != tc.notFound {
					t.Fatalf("Find() = %q, %v; want an error saying %q (not found: %v)", got, err, tc.wantErr, tc.notFound)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Find() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
