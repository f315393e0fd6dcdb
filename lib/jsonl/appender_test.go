package jsonl

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"tokenmill/lib/cli"
)

func TestRepairTail(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	tests := []struct {
		name, in, want string
		cut            int64
	}{
		{"empty", "", "", 0},
		{"complete", "a\nb\n", "a\nb\n", 0},
		{"partial", "a\nb\n{\"id\":", "a\nb\n", 6},
		{"no newline at all", "{\"id\":1", "", 7},
		{"partial longer than a chunk", "a\n" + big, "a\n", int64(len(big))},
		{"long complete line", big + "\n", big + "\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			os.WriteFile(path, []byte(tt.in), 0o644)
			f, _ := os.OpenFile(path, os.O_RDWR, 0)
			cut, err := RepairTail(f)
			f.Close()
			if err != nil || cut != tt.cut {
				t.Fatalf("cut %d err %v, want %d", cut, err, tt.cut)
			}
			if b, _ := os.ReadFile(path); string(b) != tt.want {
				t.Errorf("left %q", b)
			}
		})
	}
}

// Lines reach the file whole and in the order written: buffered lines only
// at a flush, a line written now with everything before it, secrets never.
func TestAppender(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.jsonl")
	opened := 0
	a := NewAppender("-o", func() (*os.File, error) {
		opened++
		return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	})
	var secrets cli.Secrets
	secrets.Add("sk-secret-0123456789")
	a.Redact(&secrets)
	if !a.Empty() || a.IsOpen() {
		t.Fatal("a new Appender is empty and not open")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the file was created before a line was written")
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.WriteLine([]byte(`{"id":1,"key":"sk-secret-0123456789"}`)))
	if opened != 0 {
		t.Fatal("a buffered line opened the file")
	}
	must(a.WriteLineNow([]byte(`{"id":2}`)))
	if b, _ := os.ReadFile(path); string(b) != "{\"id\":1,\"key\":\"***\"}\n{\"id\":2}\n" {
		t.Fatalf("after WriteLineNow the file holds %q", b)
	}
	must(a.WriteLine([]byte(`{"id":3}`)))
	if b, _ := os.ReadFile(path); bytes.Count(b, []byte("\n")) != 2 {
		t.Fatalf("a buffered line reached the file before a flush: %q", b)
	}
	must(a.Close())
	if b, _ := os.ReadFile(path); bytes.Count(b, []byte("\n")) != 3 || opened != 1 {
		t.Fatalf("after Close: %q, opened %d times", b, opened)
	}
	if a.Empty() || a.IsOpen() {
		t.Error("a closed Appender with lines reports empty or open")
	}
}

// Concurrent writers never interleave inside a line.
func TestAppenderConcurrent(t *testing.T) {
	var out bytes.Buffer
	a := NewStreamAppender("stdout", &out)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			line := bytes.Repeat([]byte{byte('a' + w)}, 1000)
			for range 300 {
				if err := a.WriteLine(line); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 8*300 {
		t.Fatalf("%d lines, want %d", len(lines), 8*300)
	}
	for i, l := range lines {
		if len(l) != 1000 || strings.Trim(l, l[:1]) != "" {
			t.Fatalf("line %d is torn: %.40q...", i, l)
		}
	}
}

// A write that fails is the Appender's error from then on: no later line
// reaches the file after a lost one.
func TestAppenderStopsAtFirstError(t *testing.T) {
	a := NewAppender("-o", func() (*os.File, error) { return nil, os.ErrPermission })
	if err := a.WriteLineNow([]byte("x")); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("got %v, want the open's error", err)
	}
	if err := a.WriteLine([]byte("y")); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("a write after the error: %v", err)
	}
	if err := a.Close(); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("Close: %v", err)
	}
}

func TestRepairTailAtMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none")
	_, err := RepairTailAt(path, func(p string) (*os.File, error) { return os.OpenFile(p, os.O_RDWR, 0) })
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want a not-exist error", err)
	}
}

// Whatever a crash leaves, repair keeps exactly the complete lines.
func FuzzRepairTail(f *testing.F) {
	for _, s := range []string{"", "a\n", "a\nb", "{\"id\":1}\n{\"id\"", "\n\n\n", strings.Repeat("x", 70000) + "\ny"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f")
		os.WriteFile(path, data, 0o644)
		fh, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		cut, err := RepairTail(fh)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		want := data[:bytes.LastIndexByte(data, '\n')+1]
		if !bytes.Equal(got, want) || cut != int64(len(data)-len(want)) {
			t.Fatalf("kept %q (cut %d), want %q", got, cut, want)
		}
	})
}
