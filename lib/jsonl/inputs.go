package jsonl

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"

	"tokenmill/lib/cli"
)

// checkInputs refuses, as a usage error before anything is written, an
// input that cannot be read at all: a name that is not there, a
// directory, a file the user may not read; and CSV given to a tool that
// does not read it. A file that turns bad while it is read (truncated,
// malformed lines) is the reader's to report, record by record.
//
// FIFOs and devices are only looked at, never opened here: opening a FIFO
// would wake (and then abandon) the writer waiting on its other end.
func checkInputs(inputs []Named) error {
	for _, in := range inputs {
		if in.Path == "" || in.Path == "-" {
			continue
		}
		st, err := os.Stat(in.Path)
		if err != nil {
			return unreadableInput(in, reason(err))
		}
		if st.IsDir() {
			return unreadableInput(in, "it is a directory: name the files in it (e.g. "+in.Path+"/*.jsonl)")
		}
		if !st.Mode().IsRegular() {
			continue
		}
		f, err := os.Open(in.Path)
		if err != nil {
			return unreadableInput(in, reason(err))
		}
		csv := sniffCSV(in.Path, f)
		var cols []string
		if !in.Datasets {
			cols = parquetColumns(f, st.Size())
		}
		f.Close()
		switch {
		case csv && !in.CSV:
			return cli.Usagef("%s is not JSON Lines: CSV is read by extract (extract %s | ...)", describeInput(in), in.Path)
		case cols != nil && !holdsRecords(cols):
			return cli.Usagef("%s is a Parquet dataset (columns %s), not tokenmill's records: datasets are read by extract (extract %s | ...)",
				describeInput(in), strings.Join(cols[:min(len(cols), 6)], ", "), in.Path)
		}
	}
	return nil
}

// recordColumns are the top-level fields a file of tokenmill's records
// has one of: a prompt's messages or prompt, a generation's output, an
// error record's error.
var recordColumns = []string{"messages", "prompt", "output", "error"}

func holdsRecords(cols []string) bool {
	for _, c := range cols {
		if slices.Contains(recordColumns, c) {
			return true
		}
	}
	return false
}

// parquetColumns are the top-level column names of a Parquet file (nil
// when f is not one: no magic, or a footer that does not read).
func parquetColumns(f *os.File, size int64) (cols []string) {
	var magic [4]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil || string(magic[:]) != "PAR1" || checkFooter(f, size) != nil {
		return nil
	}
	defer func() {
		if recover() != nil {
			cols = nil // the reader says what is wrong with it, row by row
		}
	}()
	pf, err := parquet.OpenFile(f, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil
	}
	for _, c := range pf.Root().Columns() {
		cols = append(cols, c.Name())
	}
	if cols == nil {
		cols = []string{}
	}
	return cols
}

func unreadableInput(in Named, why string) error {
	return cli.Usagef("cannot read %s: %s", describeInput(in), why)
}

// describeInput names an input as the command line did: its path, after
// the flag that named it if any.
func describeInput(in Named) string {
	if in.Flag == "" || in.Flag == "input" {
		return in.Path
	}
	return in.Flag + " " + in.Path
}

// reason is what the system said, without repeating the operation and
// the path the message already names.
func reason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	}
	return err.Error()
}
