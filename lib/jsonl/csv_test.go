package jsonl

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A CSV row past the line limit is rejected as line_too_long without
// being held, as a JSON line is: the rows before it are read, the reader
// stops reading the file there (a CSV row's end is found only by reading
// it whole), and the next file is read as usual.
func TestCSVRowTooLong(t *testing.T) {
	dir := t.TempDir()
	const limit = 1 << 20
	huge := filepath.Join(dir, "huge.csv")
	body := "prompt,source\nfirst,a\n\"" + strings.Repeat("x", 20*limit) + "\",b\nafter,c\n"
	if err := os.WriteFile(huge, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(dir, "next.csv")
	if err := os.WriteFile(next, []byte("prompt,source\nsecond,d\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewReader(context.Background(), nil, []string{huge, next}, nil, Options{MaxLine: limit, CSV: &CSVOptions{Delimiter: ','}})
	defer r.Close()
	var rows []string
	var tooLong []*InputError
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		var ie *InputError
		switch {
		case errors.As(err, &ie):
			tooLong = append(tooLong, ie)
			continue
		case err != nil:
			t.Fatal(err)
		}
		rows = append(rows, string(rec.Data))
	}
	if len(rows) != 2 || !strings.Contains(rows[0], `"first"`) || !strings.Contains(rows[1], `"second"`) {
		t.Errorf("rows %q: want the first file's row before the long one and the next file's", rows)
	}
	if len(tooLong) != 1 || tooLong[0].Reason != ReasonLineTooLong || tooLong[0].Line != 3 || tooLong[0].File != huge {
		t.Fatalf("input errors %+v, want one line_too_long at %s:3", tooLong, huge)
	}
	// Not held: the reader stopped within the limit and its read-ahead.
	if read := r.Stats.Bytes; read > int64(limit)+2*csvReadAhead+int64(len("second,d\n"))+64 {
		t.Errorf("%d bytes read of the %d-byte row: it was read past the limit", read, 20*limit)
	}
}
