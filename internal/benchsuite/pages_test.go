package benchsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// TestPagesReadsEveryValue: the pages command reads every value of the
// columns named, no more, counted against the same file's rows as the
// reader builds them.
func TestPagesReadsEveryValue(t *testing.T) {
	file := testbin.RealData(t, "ii_0625_style.parquet")
	// What the columns hold, from the rows as JSON: one id, langdetect and
	// source a row, a from and a value a turn.
	r := jsonl.NewReader(context.Background(), nil, []string{file}, nil, jsonl.Options{})
	defer r.Close()
	var rows, turns, textBytes int64
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var row struct {
			ID            string `json:"id"`
			Conversations []struct {
				From  string `json:"from"`
				Value string `json:"value"`
			} `json:"conversations"`
			Langdetect string `json:"langdetect"`
			Source     string `json:"source"`
		}
		if err := json.Unmarshal(rec.Data, &row); err != nil {
			t.Fatalf("row %d: %v", rec.Line, err)
		}
		rows++
		turns += int64(len(row.Conversations))
		textBytes += int64(len(row.ID) + len(row.Langdetect) + len(row.Source))
		for _, c := range row.Conversations {
			textBytes += int64(len(c.From) + len(c.Value))
		}
	}
	for _, c := range []struct {
		columns           []string
		leaves            int
		values, textBytes int64
	}{
		{[]string{"id", "conversations", "langdetect", "source"}, 5, 3*rows + 2*turns, textBytes},
		{[]string{"id"}, 1, rows, -1},
	} {
		var out bytes.Buffer
		cmd := PagesCmd{Columns: c.columns, File: file}
		if err := cmd.Run(context.Background(), &cli.Env{Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Rows, Columns, Values int64
			ValueBytes            int64 `json:"value_bytes"`
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v", out.Bytes(), err)
		}
		if got.Rows != rows || got.Columns != int64(c.leaves) || got.Values != c.values || (c.textBytes >= 0 && got.ValueBytes != c.textBytes) {
			t.Errorf("%v: got %+v; want %d rows, %d columns, %d values, %d bytes", c.columns, got, rows, c.leaves, c.values, c.textBytes)
		}
	}
	if rows != 500 || turns < 2*rows {
		t.Errorf("the file read as %d rows of %d turns", rows, turns)
	}
	// Refused, writing nothing: a column the file lacks, a pipe, a file
	// that is not Parquet.
	pipe := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd  PagesCmd
		want string
	}{
		{PagesCmd{Columns: []string{"no_such"}, File: file}, "no column is named"},
		{PagesCmd{File: pipe}, "not a regular file"},
		{PagesCmd{File: "pages_test.go"}, "magic header"},
	} {
		var out bytes.Buffer
		if err := c.cmd.Run(context.Background(), &cli.Env{Stdout: &out}); err == nil || !strings.Contains(err.Error(), c.want) || out.Len() > 0 {
			t.Errorf("%s: %v (want %q), wrote %q", c.cmd.File, err, c.want, out.Bytes())
		}
	}
}

// TestParquetFloorLine: the line under the Parquet table puts the pages'
// cost beside the JSONL line's, from the rows measured.
func TestParquetFloorLine(t *testing.T) {
	h := testHarness(t)
	row := func(name string, cpu float64) *Result {
		return &Result{Group: "extract-parquet", Name: name, Records: 1e6, OutRecords: 1e6,
			Runs: []Run{{Wall: time.Duration(cpu * float64(time.Second)), User: time.Duration(cpu * float64(time.Second))}}}
	}
	h.results = []*Result{row("JSONL, 1 core", 2.4), row("Parquet, 1 core", 3.5), row(pagesRow, 1.7)}
	var b strings.Builder
	renderParquetFloor(&b, h)
	for _, want := range []string{"costs 3.5 µs of CPU against 2.4 µs", "pages alone cost 1.7 µs (71% of", "leaves 0.7 µs a row", "extract spends\n1.8 µs on it"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
	// Parquet no dearer than JSONL: nothing to explain.
	h.results = []*Result{row("JSONL, 1 core", 2.4), row("Parquet, 1 core", 2.3), row(pagesRow, 1.7)}
	b.Reset()
	if renderParquetFloor(&b, h); b.Len() > 0 {
		t.Errorf("wrote %q", b.String())
	}
}
