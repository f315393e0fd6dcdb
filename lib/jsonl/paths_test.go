package jsonl

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"tokenmill/lib/cli"
)

// CheckPaths refuses, as a usage error naming both flags, every output
// that is an input or another output, however the two names get there,
// and applies the replace rule; the allowed aliases stay allowed.
func TestCheckPaths(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte("{}\n"), 0o644)
	os.Symlink(in, filepath.Join(dir, "link.jsonl"))
	os.Link(in, filepath.Join(dir, "hard.jsonl"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Symlink(filepath.Join(dir, "sub"), filepath.Join(dir, "sublink"))
	at := func(name string) string { return filepath.Join(dir, name) }
	ins := Inputs([]string{in})
	tests := []struct {
		name    string
		inputs  []Named
		outputs []Output
		force   bool
		want    string // "" for no error
	}{
		{"distinct", ins, []Output{{Flag: "-o", Path: at("out.jsonl")}, {Flag: "--rejects", Path: at("r.jsonl")}}, false, ""},
		{"output is the input", ins, []Output{{Flag: "--rejects", Path: in}}, true, `--rejects "` + in + `" is the same file as input "` + in + `"`},
		{"through a symbolic link", ins, []Output{{Flag: "-o", Path: at("link.jsonl")}}, true, "is the same file as input"},
		{"through a hard link", ins, []Output{{Flag: "--dups", Path: at("hard.jsonl")}}, true, "is the same file as input"},
		{"relative and absolute", ins, []Output{{Flag: "-o", Path: "in.jsonl"}}, true, ""}, // the test runs elsewhere: a different file
		{"two new names, one file", nil, []Output{{Flag: "-o", Path: at("sub/x.jsonl")}, {Flag: "--errors", Path: at("sublink/x.jsonl")}}, false,
			`--errors "` + at("sublink/x.jsonl") + `" is the same file as -o "` + at("sub/x.jsonl") + `"`},
		{"two outputs, one existing file", nil, []Output{{Flag: "-o", Path: in}, {Flag: "--rejects", Path: at("link.jsonl")}}, true, "is the same file as -o"},
		{"a directory", nil, []Output{{Flag: "--plot", Path: at("sub")}}, true, `--plot "` + at("sub") + `" is a directory, not a file`},
		{"exists without force", nil, []Output{{Flag: "-o", Path: in}}, false, `-o "` + in + `" already exists: pass --force to replace it`},
		{"kept needs no force", nil, []Output{{Flag: "--state", Path: in, Kept: true}}, false, ""},
		{"kept is no input", ins, []Output{{Flag: "--state", Path: in, Kept: true}}, false, "--state"},
		{"merge -o may be an input", ins, []Output{{Flag: "-o", Path: in, MayBeInput: true}}, true, ""},
		{"stdout once", nil, []Output{{Flag: "-o", Path: "-"}, {Flag: "--rejects", Path: ""}}, false, ""},
		{"stdout twice", nil, []Output{{Flag: "-o", Path: "-"}, {Flag: "--rejects", Path: "-"}}, false, "-o and --rejects both write to stdout"},
		{"devices take many", nil, []Output{{Flag: "-o", Path: os.DevNull}, {Flag: "--dups", Path: os.DevNull}}, false, ""},
		{"stdin is no file", Inputs([]string{"-"}), []Output{{Flag: "-o", Path: at("o.jsonl")}}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPaths(tt.inputs, tt.outputs, tt.force)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var usage *cli.UsageError
			if !errors.As(err, &usage) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want a usage error with %q", err, tt.want)
			}
		})
	}
	if b, _ := os.ReadFile(in); string(b) != "{}\n" {
		t.Fatalf("the input changed: %q", b)
	}
}

// A second holder is refused at once with the first one's pid; a lock
// file left by a dead holder is taken over and left in place; one this
// run made goes with Release.
func TestLockFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "seen.state")
	l, err := LockFile("--state", target)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target + ".lock"); strings.TrimSpace(string(b)) != itoa(os.Getpid()) {
		t.Fatalf("lock file holds %q, want this pid", b)
	}
	// flock locks belong to open files: a second open, as another process
	// would make, is refused.
	_, err = LockFile("--state", target)
	var locked *LockedError
	if !errors.As(err, &locked) || locked.PID != os.Getpid() || !strings.Contains(err.Error(), `--state "`+target+`" is in use by process `+itoa(os.Getpid())) {
		t.Fatalf("second lock: %v", err)
	}
	l.Release()
	l.Release()
	if _, err := os.Stat(target + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the lock file this run made is still there: %v", err)
	}
	os.WriteFile(target+".lock", []byte("999999999\n"), 0o644) // a killed run's
	if l, err = LockFile("--state", target); err != nil {
		t.Fatalf("a dead holder's lock file: %v", err)
	}
	l.Release()
	if _, err := os.Stat(target + ".lock"); err != nil {
		t.Fatalf("a lock file this run did not make was removed: %v", err)
	}
	os.WriteFile(target+".lock", make([]byte, 100), 0o644)
	if _, err := LockFile("--state", target); err == nil || !strings.Contains(err.Error(), "is not a lock file") {
		t.Fatalf("a file that is no lock file: %v", err)
	}
	if b, _ := os.ReadFile(target + ".lock"); len(b) != 100 {
		t.Fatal("a file that is no lock file was changed")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
