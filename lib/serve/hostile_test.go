package serve

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tokenmill/lib/cli"
)

// serve's own files are never written through a link, nor on one another:
// a symbolic link at its lock or at a server's log, an endpoints file that
// is the status file or (by a hard link) the lock, a directory as the
// endpoints file, a file where the logs' directory goes: each is a usage
// error (exit 2) before anything is written, the link's target neither
// created nor touched.
func TestHostileStateFiles(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, dir, state string) (endpoints string)
		want  string
	}{
		{"a link at the lock", func(t *testing.T, dir, state string) string {
			mustWrite(t, filepath.Join(dir, "victim"), "kept")
			mustLink(t, filepath.Join(dir, "victim"), filepath.Join(state, lockName))
			return ""
		}, "is a symbolic link"},
		{"a dangling link at a log", func(t *testing.T, dir, state string) string {
			os.MkdirAll(filepath.Join(state, logsName), 0o755)
			mustLink(t, filepath.Join(dir, "elsewhere.log"), filepath.Join(state, logsName, "server-0.log"))
			return ""
		}, "is a symbolic link"},
		{"a link at the logs' directory", func(t *testing.T, dir, state string) string {
			os.Mkdir(filepath.Join(dir, "other"), 0o755)
			mustLink(t, filepath.Join(dir, "other"), filepath.Join(state, logsName))
			return ""
		}, "is a symbolic link"},
		{"a file where the logs go", func(t *testing.T, dir, state string) string {
			mustWrite(t, filepath.Join(state, logsName), "not a directory")
			return ""
		}, "is not a directory"},
		{"the endpoints file is the status file", func(t *testing.T, dir, state string) string {
			return filepath.Join(state, ".", stateName)
		}, "is the same file as"},
		{"the endpoints file is the lock by a hard link", func(t *testing.T, dir, state string) string {
			mustWrite(t, filepath.Join(state, lockName), "")
			if err := os.Link(filepath.Join(state, lockName), filepath.Join(dir, "ep.txt")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(dir, "ep.txt")
		}, "is the same file as"},
		{"the endpoints file is a directory", func(t *testing.T, dir, state string) string {
			os.Mkdir(filepath.Join(dir, "eps"), 0o755)
			return filepath.Join(dir, "eps")
		}, "is a directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "state")
			os.Mkdir(state, 0o755)
			endpoints := tt.setup(t, dir, state)
			before := tree(t, dir)
			var stderr strings.Builder
			env := &cli.Env{Name: "serve", Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr}
			args := []string{"--state-dir", state, "--servers", "1", "--port", "30000"}
			if endpoints != "" {
				args = append(args, "--endpoints-file", endpoints)
			}
			// Bounded: a serve that is not refused runs until its context ends.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			code := cli.Run(ctx, env, Description, &Run{}, append(args, "--", "sh", "-c", "exec sleep 60", "{port}"))
			if code != cli.ExitUsage || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, want %d with %q; stderr:\n%s", code, cli.ExitUsage, tt.want, stderr.String())
			}
			if after := tree(t, dir); !slices.Equal(before, after) {
				t.Errorf("a refused run changed the directory: before %q, after %q", before, after)
			}
		})
	}
}

// The --api-key is never in the status file, whatever a server's
// readiness answer or its command line repeated of it; what the status
// table prints of a server's answers and names is escaped for the
// terminal, on one line.
func TestStateRedactsAndStatusEscapes(t *testing.T) {
	dir := t.TempDir()
	secrets := &cli.Secrets{}
	secrets.Add("sk-serve-S3cr3t")
	st := &State{PID: 1, State: serveRunning, Command: []string{"vllm", "serve", "--api-key", "sk-serve-S3cr3t"},
		Servers: []Server{{Index: 0, URL: "http://127.0.0.1:30000", State: stateUnhealthy,
			Check:    "/health 401 (Bearer sk-serve-S3cr3t refused)\x1b]0;PWNED\x07\r\nfake line\tcolumn",
			LastExit: "exit 1: \x1b[31mred\x1b[0m", LastExitAt: time.Unix(0, 0)}}}
	if err := writeState(dir, st, secrets); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, stateName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "S3cr3t") || !strings.Contains(string(b), "***") {
		t.Fatalf("the status file holds the key, or no ***:\n%s", b)
	}
	read, err := readState(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	w := bufio.NewWriter(&out)
	writeStatus(w, read, true, time.Unix(0, 0))
	w.Flush()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if strings.ContainsAny(out.String(), "\x1b\x07\r") || len(lines) != 3 || strings.Contains(out.String(), "S3cr3t") {
		t.Fatalf("the status table sends control characters, forges a line or shows the key (%d lines):\n%q", len(lines), out.String())
	}
	if !strings.Contains(lines[2], `\x1b]0;PWNED\x07\r\nfake line column`) {
		t.Errorf("the check is not shown escaped: %q", lines[2])
	}
}

// tree is every name under dir with what it holds or links to.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entry := path
		switch {
		case d.Type()&os.ModeSymlink != 0:
			target, _ := os.Readlink(path)
			entry += " -> " + target
		case d.Type().IsRegular():
			b, _ := os.ReadFile(path)
			entry += ": " + string(b)
		}
		out = append(out, entry)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustWrite(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustLink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
