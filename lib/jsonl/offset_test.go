package jsonl

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReaderOffsets: a record of a regular JSONL file says where its bytes
// are, so that a stage can read it back instead of holding it; the file's
// bytes at [Offset, Offset+len(Data)) are Data exactly, past a byte-order
// mark, blank lines, CRLF endings, long lines read ahead and a line over
// the limit. A compressed file, stdin and a FIFO are not seekable.
func TestReaderOffsets(t *testing.T) {
	long := `{"id":"long","t":"` + strings.Repeat("x", 3*readBufferSize) + `"}`
	over := `{"id":"over","t":"` + strings.Repeat("y", 4*readBufferSize) + `"}`
	content := "\xef\xbb\xbf" + `{"id":1}` + "\n\n  \r\n" + `{"id":2}` + "\r\n" + long + "\n" + over + "\n" + `{"id":3}` + "\n" + long + "\n" + `{"id":4}`
	dir := t.TempDir()
	plain := filepath.Join(dir, "a.jsonl")
	if err := os.WriteFile(plain, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	zipped := filepath.Join(dir, "a.jsonl.gz")
	if err := os.WriteFile(zipped, gz(t, []byte(content)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		names    []string
		stdin    io.Reader
		seekable bool
	}{
		{"plain", []string{plain}, nil, true},
		{"gzip", []string{zipped}, nil, false},
		{"stdin", []string{"-"}, strings.NewReader(content), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(context.Background(), nil, tc.names, tc.stdin, Options{MaxLine: len(long) + 100})
			defer r.Close()
			var ids []string
			tooLong := 0
			for {
				rec, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					var ie *InputError
					if !errors.As(err, &ie) || ie.Reason != ReasonLineTooLong {
						t.Fatal(err)
					}
					tooLong++
					continue
				}
				ids = append(ids, string(rec.Data[:min(12, len(rec.Data))]))
				if rec.Seekable != tc.seekable {
					t.Fatalf("line %d: seekable %v, want %v", rec.Line, rec.Seekable, tc.seekable)
				}
				if !tc.seekable {
					continue
				}
				if end := rec.Offset + int64(len(rec.Data)); rec.Offset < 0 || end > int64(len(content)) || !bytes.Equal([]byte(content[rec.Offset:end]), rec.Data) {
					t.Fatalf("line %d: offset %d does not hold its %d bytes", rec.Line, rec.Offset, len(rec.Data))
				}
			}
			if len(ids) != 6 || tooLong != 1 {
				t.Fatalf("read %d records and %d over-long lines, want 6 and 1: %q", len(ids), tooLong, ids)
			}
		})
	}
}

// TestBatchKeepsOffsets: Parallel hands the workers each record's place.
func TestBatchKeepsOffsets(t *testing.T) {
	content := "{\"a\":1}\n{\"a\":22}\n\n{\"a\":333}\n"
	name := filepath.Join(t.TempDir(), "b.jsonl")
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	in := NewReader(context.Background(), nil, []string{name}, nil, Options{})
	var n int
	err := Parallel(context.Background(), in, 2, func(int, *Batch[int]) {}, func(b *Batch[int]) error {
		for _, it := range b.Items {
			n++
			if !it.Seekable || content[it.Offset:it.Offset+int64(len(it.Data))] != string(it.Data) {
				t.Errorf("line %d: offset %d seekable %v", it.Line, it.Offset, it.Seekable)
			}
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("%d records, %v", n, err)
	}
}
