package jsonl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"tokenmill/internal/testbin"
	"tokenmill/lib/cli"
)

// A Parquet dataset given to a tool that reads records is one usage
// error naming extract, before anything is read or written; a Parquet
// file of records is read as any input.
func TestCheckInputsParquet(t *testing.T) {
	type prompt struct {
		ID     string `parquet:"id"`
		Prompt string `parquet:"prompt"`
	}
	records := filepath.Join(t.TempDir(), "prompts.parquet")
	if err := parquet.WriteFile(records, []prompt{{"a", "Hi"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		datasets   bool // extract's and shard's inputs
		err        string
	}{
		{"the 0625 layout", testbin.RealData(t, "ii_0625_style.parquet"), false, "is a Parquet dataset (columns id, conversations, label, langdetect, source), not tokenmill's records: datasets are read by extract"},
		{"the 3M layout", testbin.RealData(t, "ii_3m_style.parquet"), false, "datasets are read by extract"},
		{"extract and shard take datasets", testbin.RealData(t, "ii_0625_style.parquet"), true, ""},
		{"records in Parquet", records, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkInputs([]Named{{Path: tc.path, Datasets: tc.datasets}})
			var usage *cli.UsageError
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (!errors.As(err, &usage) || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("got %v, want a usage error saying %q", err, tc.err)
			}
		})
	}
	// Not Parquet at all, whatever its name: the reader's to report.
	fake := filepath.Join(t.TempDir(), "x.parquet")
	if err := os.WriteFile(fake, []byte("PAR1 not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkInputs([]Named{{Path: fake}}); err != nil {
		t.Errorf("a broken file refused up front: %v", err)
	}
}
