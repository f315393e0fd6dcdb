package jsonl

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"tokenmill/lib/cli"
)

func TestWriterRoundTripCompressed(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"out.jsonl", "out.jsonl.gz", "out.jsonl.zst"} {
		path := filepath.Join(dir, "sub", name)
		w, err := Create(path, nil, WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			if err := w.Write([]byte(`{"i":1}`)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		out := readAll(t, NewReader(context.Background(), nil, []string{path}, nil, Options{}))
		if len(out) != 1000 || out[999].line != 1000 {
			t.Fatalf("%s: read back %d records", name, len(out))
		}
	}
}

// Without Force an existing file is a usage error (exit 2) and is left
// alone; with it, it is replaced whole on Close.
func TestWriterReplaceRule(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.jsonl")
	os.WriteFile(path, []byte("keep\n"), 0o644)
	_, err := Create(path, nil, WriterOptions{Flag: "--dups"})
	var usage *cli.UsageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), `--dups "`+path+`" already exists: pass --force`) {
		t.Fatalf("want a usage error naming --dups, got %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep\n" {
		t.Fatalf("file changed: %q", b)
	}
	w, err := Create(path, nil, WriterOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(`{}`))
	if b, _ := os.ReadFile(path); string(b) != "keep\n" {
		t.Fatalf("replaced before Close: %q", b)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{}\n" {
		t.Fatalf("not replaced: %q", b)
	}
}

// A record over the line limit is refused without spoiling the writer.
func TestWriterRefusesOverlongLine(t *testing.T) {
	defer func(limit int) { writeLimit = limit }(writeLimit)
	writeLimit = 1 << 10
	var buf bytes.Buffer
	w := NewWriter(&buf)
	var tooLong *LineTooLongError
	if err := w.Write(make([]byte, writeLimit+1)); !errors.As(err, &tooLong) || tooLong.Len != writeLimit+1 {
		t.Fatalf("Write = %v, want a LineTooLongError", err)
	}
	if err := w.Write([]byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil || buf.String() != "{}\n" {
		t.Fatalf("Close = %v, wrote %q", err, buf.String())
	}
}

func TestWriterAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.jsonl")
	w, err := Create(path, nil, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(`{}`))
	w.Flush()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("target visible before Close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{}\n" {
		t.Fatalf("content %q", b)
	}

	// Abort leaves nothing behind.
	path2 := filepath.Join(dir, "y.jsonl")
	w, _ = Create(path2, nil, WriterOptions{})
	w.Write([]byte(`{}`))
	w.Abort()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("abort left files: %v", entries)
	}
}

// A device or FIFO named as output is written in place, whatever the
// options: an atomic rename over /dev/null would replace it with a file.
func TestWriterSpecialFileInPlace(t *testing.T) {
	for _, opts := range []WriterOptions{{}, {Force: true}} {
		fifo := filepath.Join(t.TempDir(), "fifo")
		if err := syscall.Mkfifo(fifo, 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		// Opened read-write, the reading end never blocks the writer's open.
		r, err := os.OpenFile(fifo, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		w, err := Create(fifo, nil, opts)
		if err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		w.Write([]byte(`{"id":1}`))
		if err := w.Close(); err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		buf := make([]byte, 64)
		n, err := r.Read(buf)
		r.Close()
		if err != nil || string(buf[:n]) != "{\"id\":1}\n" {
			t.Fatalf("%+v: read %q, %v", opts, buf[:n], err)
		}
		if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
			t.Fatalf("%+v: %s is no longer a FIFO (%v, %v)", opts, fifo, st.Mode(), err)
		}
		if entries, _ := os.ReadDir(filepath.Dir(fifo)); len(entries) != 1 {
			t.Fatalf("%+v: files left beside the FIFO: %v", opts, entries)
		}
	}
}

// failWriter fails every write, like a full disk or a closed pipe.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

func TestWriterKeepsFirstError(t *testing.T) {
	w := NewWriter(failWriter{})
	// Small writes sit in the buffer: the error surfaces at Close.
	for i := 0; i < 10; i++ {
		if err := w.Write([]byte(`{}`)); err != nil {
			t.Fatalf("buffered write failed early: %v", err)
		}
	}
	if err := w.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close = %v, want ENOSPC", err)
	}
	if err := w.Write([]byte(`{}`)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write after failure = %v", err)
	}
}

func TestRejects(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rejects.jsonl")
	var stderr bytes.Buffer
	env := &cli.Env{Name: "tool", Stderr: &stderr}
	r, err := CreateRejects(path, nil, env, false)
	if err != nil {
		t.Fatal(err)
	}
	r.Add(RawLine{Data: []byte(`{"id":1}`), File: "a.jsonl", Line: 3}, "no_user_turn", "")
	r.Add(RawLine{Data: []byte(`{oops`), File: "a.jsonl", Line: 4}, ReasonMalformedJSON, "invalid character 'o'")
	for i := 0; i < 7; i++ {
		r.Add(RawLine{Data: []byte(`[1]`), File: "b.jsonl", Line: int64(10 + i)}, ReasonNotObject, "")
	}
	r.Input(&InputError{File: "c.gz", Line: 9, Reason: ReasonUnreadable, Err: io.ErrUnexpectedEOF})

	if got, want := r.Summary(), "rejected 10 (not_an_object 7, malformed_json 1, no_user_turn 1, unreadable 1)"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if err := r.Close(); !errors.Is(err, cli.ErrRejects) {
		t.Fatalf("Close = %v, want ErrRejects", err)
	}
	log := stderr.String()
	for _, want := range []string{"tool: a.jsonl:3: no_user_turn", "tool: a.jsonl:4: malformed_json: invalid character", "c.gz:9: unreadable", "further not_an_object rejects are counted"} {
		if !strings.Contains(log, want) {
			t.Errorf("stderr lacks %q:\n%s", want, log)
		}
	}
	if n := strings.Count(log, ": not_an_object"); n != reportLimit {
		t.Errorf("not_an_object shown %d times, want %d", n, reportLimit)
	}
	out := readAll(t, NewReader(context.Background(), nil, []string{path}, nil, Options{}))
	if len(out) != 10 {
		t.Fatalf("rejects file has %d records, want every one of 10", len(out))
	}
	wantFirst := `{"id":1,"reject":{"reason":"no_user_turn","file":"a.jsonl","line":3}}`
	if out[0].data != wantFirst {
		t.Errorf("first reject %s, want %s", out[0].data, wantFirst)
	}
	if !strings.HasPrefix(out[1].data, `{"raw":"{oops","reject":{"reason":"malformed_json"`) {
		t.Errorf("raw reject %s", out[1].data)
	}
}

func TestRejectsNoneIsSuccess(t *testing.T) {
	r := NewRejects(nil, nil)
	if err := r.Close(); err != nil || r.Summary() != "rejected 0" {
		t.Fatalf("Close = %v, summary %q", err, r.Summary())
	}
}
