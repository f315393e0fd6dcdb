package jsonl

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// Stdin redirected from a file (tool -o x < x) is that file: an output
// naming it under any name is refused; stdin is compared only when the
// tool reads it.
func TestCheckPathsStdin(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "x.jsonl")
	os.WriteFile(in, []byte("{}\n"), 0o644)
	os.Symlink(in, filepath.Join(dir, "link.jsonl"))
	os.WriteFile(filepath.Join(dir, "other.jsonl"), []byte("{}\n"), 0o644) // an input that can be read
	stdin, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	for _, tt := range []struct {
		name  string
		args  []string
		out   string
		stdin io.Reader
		want  string
	}{
		{"no arguments", nil, in, stdin, "is the same file as the input on stdin"},
		{"dash", []string{"-"}, filepath.Join(dir, "link.jsonl"), stdin, "is the same file as the input on stdin"},
		{"stdin not read", []string{filepath.Join(dir, "other.jsonl")}, in, stdin, ""},
		{"another output", nil, filepath.Join(dir, "y.jsonl"), stdin, ""},
		{"a reader without a file", nil, in, strings.NewReader(""), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPaths(InputsFrom(tt.args, tt.stdin), []Output{{Flag: "-o", Path: tt.out}}, true)
			if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
}

// A second holder is refused at once with the first one's pid; a lock
// file left by a dead holder is taken over; the lock file goes with
// Release either way; a file that is no lock file, or a link at the lock
// file's name, is refused and left as it was.
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
	if _, err := os.Stat(target + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a lock file taken over from a dead run was left behind: %v", err)
	}
	os.WriteFile(target+".lock", make([]byte, 100), 0o644)
	if _, err := LockFile("--state", target); err == nil || !strings.Contains(err.Error(), "is not a lock file") {
		t.Fatalf("a file that is no lock file: %v", err)
	}
	if b, _ := os.ReadFile(target + ".lock"); len(b) != 100 {
		t.Fatal("a file that is no lock file was changed")
	}
	os.Remove(target + ".lock")
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, target+".lock")
	if _, err := LockFile("--state", target); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Fatalf("a link at the lock file's name: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("the link's target was written: %q", b)
	}
}

// The lock goes by the file, not the name typed: a symbolic link to the
// file, a hard link to it, a path through a linked directory and a
// dangling link to a name not yet taken all meet the first holder's lock;
// a file the run creates under a new name joins the lock (Hold), so a hard
// link made to it later is refused too.
func TestLockByIdentity(t *testing.T) {
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	os.WriteFile(at("out.jsonl"), []byte("{}\n"), 0o644)
	os.Symlink(at("out.jsonl"), at("latest.jsonl"))
	os.Link(at("out.jsonl"), at("hard.jsonl"))
	os.Mkdir(at("sub"), 0o755)
	os.Symlink(at("sub"), at("sublink"))
	os.Symlink(at("sub/new.jsonl"), at("dangling.jsonl"))

	for _, tt := range []struct {
		name, first, second string
		alias               bool // refused by the lock on the file itself
	}{
		{"symbolic link", at("out.jsonl"), at("latest.jsonl"), false},
		{"link first", at("latest.jsonl"), at("out.jsonl"), false},
		{"hard link", at("out.jsonl"), at("hard.jsonl"), true},
		{"linked directory", at("sub/x.jsonl"), at("sublink/x.jsonl"), false},
		{"relative name", at("out.jsonl"), "out.jsonl", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !filepath.IsAbs(tt.second) {
				t.Chdir(dir)
			}
			l, err := LockFile("-o", tt.first)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			_, err = LockFile("-o", tt.second)
			var locked *LockedError
			if !errors.As(err, &locked) || locked.Alias != tt.alias {
				t.Fatalf("%s while %s is locked: %v, want a LockedError (alias %v)", tt.second, tt.first, err, tt.alias)
			}
		})
	}
	// A new file: the run holds its name, creates it, and holds the file.
	l, err := LockFile("-o", at("fresh.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := CreateNew("-o", at("fresh.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := l.Hold("-o", at("fresh.jsonl"), f); err != nil {
		t.Fatal(err)
	}
	os.Link(at("fresh.jsonl"), at("fresh-hard.jsonl"))
	var locked *LockedError
	if _, err := LockFile("-o", at("fresh-hard.jsonl")); !errors.As(err, &locked) || !locked.Alias {
		t.Fatalf("a hard link to a file created under the lock: %v", err)
	}
	// A replaced link is the name's own: its target is another file.
	l2, err := LockReplaced("-o", at("dangling.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	l2.Release()
	l.Release()
	l3, err := LockFile("-o", at("fresh-hard.jsonl"))
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	l3.Release()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".lock") {
			t.Errorf("lock file %s left behind", e.Name())
		}
	}
}

// Removing the lock file at Release is safe against a second run that
// opened it just before: many holders taking and releasing one lock at
// once (each LockFile opens the file anew, as a process would) never
// overlap, and no lock file is left when all are done.
func TestLockReleaseRace(t *testing.T) {
	target := filepath.Join(t.TempDir(), "state")
	var holders, overlaps, taken atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 300 {
				l, err := LockFile("--state", target)
				var locked *LockedError
				if errors.As(err, &locked) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if holders.Add(1) > 1 {
					overlaps.Add(1)
				}
				taken.Add(1)
				holders.Add(-1)
				l.Release()
			}
		}()
	}
	wg.Wait()
	if overlaps.Load() > 0 || taken.Load() == 0 {
		t.Fatalf("%d overlaps in %d locks taken", overlaps.Load(), taken.Load())
	}
	if _, err := os.Stat(target + ".lock"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file left: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
