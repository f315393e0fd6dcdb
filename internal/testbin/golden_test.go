package testbin

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what a helper reports.
type recorder struct {
	testing.TB
	errs  []string
	fatal bool
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.fatal = true
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// check runs CheckGolden on a recorder, with -update as given.
func check(t *testing.T, upd bool, path, got string) *recorder {
	t.Helper()
	old := *update
	*update = upd
	defer func() { *update = old }()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		CheckGolden(r, path, []byte(got))
	}()
	<-done
	return r
}

func TestCheckGolden(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "x.golden")

	r := check(t, false, path, "a\nb\n")
	if !r.fatal || len(r.errs) != 1 || !strings.Contains(r.errs[0], "-update writes it") {
		t.Fatalf("a missing golden file: fatal %v, %q", r.fatal, r.errs)
	}
	if r := check(t, true, path, "a\nb\n"); len(r.errs) != 0 {
		t.Fatalf("-update: %q", r.errs)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "a\nb\n" {
		t.Fatalf("-update wrote %q, %v", b, err)
	}
	if r := check(t, false, path, "a\nb\n"); len(r.errs) != 0 {
		t.Fatalf("the same output: %q", r.errs)
	}
	for _, tt := range []struct{ got, want string }{
		{"a\nc\n", "line 2 (go test -update rewrites it, then review the diff):\n got \"c\"\nwant \"b\"\n"},
		{"a\n", "line 2 (go test -update rewrites it, then review the diff):\n got \"\"\nwant \"b\"\n"},
		{"a\nb\nc\n", "line 3 (go test -update rewrites it, then review the diff):\n got \"c\"\nwant \"\"\n"},
		{"a\nb", "line 3 (go test -update rewrites it, then review the diff):\n got (end of file)\nwant \"\"\n"},
	} {
		r := check(t, false, path, tt.got)
		if r.fatal || len(r.errs) != 1 || !strings.Contains(r.errs[0], tt.want) || !strings.HasSuffix(r.errs[0], "--- got in full:\n"+tt.got) {
			t.Errorf("got %q: fatal %v, %q; want it to say %q", tt.got, r.fatal, r.errs, tt.want)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "a\nb\n" {
		t.Errorf("a compare without -update rewrote the file: %q", b)
	}
}
