package jsonl

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// A zstd file whose window is past what tokenmill reads is refused with
// the way to read it anyway, before its window is held; with the
// environment's larger bound it reads.
func TestZstdWindowBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "long.jsonl.zst")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw, err := zstd.NewWriter(f, zstd.WithWindowSize(256<<20), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(zw, `{"id":1,"prompt":"`+strings.Repeat("a", 1<<20)+`"}`+"\n")
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	read := func() (int, error) {
		r := NewReader(context.Background(), nil, []string{path}, nil, Options{})
		defer r.Close()
		n := 0
		for {
			_, err := r.Next()
			if err == io.EOF {
				return n, nil
			}
			if err != nil {
				return n, err
			}
			n++
		}
	}
	n, err := read()
	var ie *InputError
	if n != 0 || !errors.As(err, &ie) || !strings.Contains(err.Error(), zstdWindowEnv) {
		t.Fatalf("read %d records, err %v: want the window refused, naming %s", n, err, zstdWindowEnv)
	}
	t.Setenv(zstdWindowEnv, "512MiB")
	if n, err := read(); n != 1 || err != nil {
		t.Fatalf("with %s=512MiB: %d records, %v", zstdWindowEnv, n, err)
	}
}
