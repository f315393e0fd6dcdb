package jsonl

import (
	"errors"
	"io/fs"
	"os"

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
		f.Close()
		if csv && !in.CSV {
			return cli.Usagef("%s is not JSON Lines: CSV is read by extract (extract %s | ...)", describeInput(in), in.Path)
		}
	}
	return nil
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
