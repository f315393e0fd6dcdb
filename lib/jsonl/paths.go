package jsonl

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"tokenmill/lib/cli"
)

// Named is a file named on the command line, with the flag that named it
// ("input" for an argument).
type Named struct {
	Flag, Path string
	// Stdin is the tool's standard input, for the input "-": a redirect
	// (< FILE) makes it a file like any other, to be compared with the
	// outputs.
	Stdin io.Reader
	// CSV: the tool reads CSV and TSV (extract); every other tool refuses them.
	CSV bool
	// Datasets: the tool takes any rows, a dataset's as well as
	// tokenmill's records (extract, and shard, which splits either byte
	// for byte); the others refuse a Parquet dataset, naming extract.
	Datasets bool
}

// Inputs names a tool's arguments as inputs.
func Inputs(paths []string) []Named {
	out := make([]Named, len(paths))
	for i, p := range paths {
		out[i] = Named{Flag: "input", Path: p}
	}
	return out
}

// InputsFrom is Inputs with the tool's standard input, read when paths is
// empty or holds "-": CheckPaths then compares the file stdin is (a
// redirect, < FILE) with every output, so that `tool -o x < x` is refused
// before x is opened for writing.
func InputsFrom(paths []string, stdin io.Reader) []Named {
	out := Inputs(paths)
	reads := len(paths) == 0
	for _, p := range paths {
		reads = reads || p == "-"
	}
	if reads && stdin != nil {
		out = append(out, Named{Flag: "stdin", Path: "-", Stdin: stdin})
	}
	return out
}

// CSVInputs is InputsFrom for a tool that reads CSV (extract).
func CSVInputs(paths []string, stdin io.Reader) []Named {
	out := DatasetInputs(paths, stdin)
	for i := range out {
		out[i].CSV = true
	}
	return out
}

// DatasetInputs is InputsFrom for a tool that takes a dataset's rows.
func DatasetInputs(paths []string, stdin io.Reader) []Named {
	out := InputsFrom(paths, stdin)
	for i := range out {
		out[i].Datasets = true
	}
	return out
}

// Output is a file a run writes ("" for none, "-" for stdout).
type Output struct {
	Flag, Path string
	// Kept marks a file the run reads and writes back by design (dedup
	// --state): it may exist without --force.
	Kept bool
	// MayBeInput lets the output name one of the inputs: merge's -o, which
	// is put in place only after every input has been read.
	MayBeInput bool
	// Later: Outputs.Open leaves it for the run to open with Create when
	// it gets to it (stats' --plot, drawn after the report is printed).
	Later bool
}

// CheckPaths is what every tool checks before it opens anything for
// writing, so that a refusal comes before any write (a usage error, exit 2):
//
//   - every input can be read: it exists, is not a directory, may be
//     opened, and is not CSV unless the tool reads CSV (see checkInputs);
//   - the replace rule: an output that exists as a file is refused unless
//     force (or it is Kept); a directory is refused always;
//   - no aliasing: no output is the same file as an input (unless
//     MayBeInput) or as another output, compared by device and inode for
//     files that exist and, for names not yet taken, by the cleaned path
//     after resolving the symbolic links of the parent directory; two
//     outputs on stdout are refused too.
//
// Devices such as /dev/null may take several outputs. A FIFO or device
// output is written in place (see File), so force does not apply to it.
func CheckPaths(inputs []Named, outputs []Output, force bool) error {
	if err := checkInputs(inputs); err != nil {
		return err
	}
	ins := make([]place, 0, len(inputs))
	for _, in := range inputs {
		switch {
		case in.Stdin != nil:
			if p, ok := locateStdin(in.Stdin); ok {
				ins = append(ins, p)
			}
		case in.Path != "" && in.Path != "-":
			ins = append(ins, locate(in.Flag, in.Path))
		}
	}
	var outs []place
	stdout := ""
	for _, o := range outputs {
		switch o.Path {
		case "":
			continue
		case "-":
			if stdout != "" {
				return cli.Usagef("%s and %s both write to stdout: name a file for one of them", stdout, o.Flag)
			}
			stdout = o.Flag
			continue
		}
		p := locate(o.Flag, o.Path)
		switch {
		case p.exists && p.mode.IsDir():
			return cli.Usagef("%s %q is a directory, not a file", o.Flag, o.Path)
		case p.exists && p.mode.IsRegular() && !o.Kept && !force:
			return cli.Usagef("%s %q already exists: pass --force to replace it", o.Flag, o.Path)
		}
		if !o.MayBeInput {
			for _, in := range ins {
				if p.same(in) && in.flag == "stdin" {
					return cli.Usagef("%s %q is the same file as the input on stdin (a redirect < %s): reading it while it is written would lose it; name another output", o.Flag, o.Path, o.Path)
				}
				if p.same(in) {
					return cli.Usagef("%s %q is the same file as %s %q", o.Flag, o.Path, in.flag, in.path)
				}
			}
		}
		for _, other := range outs {
			if p.same(other) {
				return cli.Usagef("%s %q is the same file as %s %q", o.Flag, o.Path, other.flag, other.path)
			}
		}
		outs = append(outs, p)
	}
	return nil
}

// place is where a named file is, or would be.
type place struct {
	flag, path string
	exists     bool
	mode       fs.FileMode
	id         fileID
	key        string // resolved path of a name not yet taken
}

func locate(flag, path string) place {
	p := place{flag: flag, path: path}
	if st, err := os.Stat(path); err == nil {
		p.exists, p.mode, p.id = true, st.Mode(), statIdentity(st)
		return p
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if abs, err := filepath.Abs(filepath.Join(dir, base)); err == nil {
		p.key = abs
	} else {
		p.key = filepath.Clean(filepath.Join(dir, base))
	}
	return p
}

// locateStdin is where stdin is, when it is a file with an identity
// (a redirect, a FIFO; not a reader of a test's).
func locateStdin(r io.Reader) (place, bool) {
	f, ok := r.(interface{ Stat() (fs.FileInfo, error) })
	if !ok {
		return place{}, false
	}
	st, err := f.Stat()
	if err != nil {
		return place{}, false
	}
	return place{flag: "stdin", path: "-", exists: true, mode: st.Mode(), id: statIdentity(st)}, true
}

// same reports whether two places are one file. Character devices
// (/dev/null, a terminal) take any number of streams.
func (p place) same(q place) bool {
	if p.exists != q.exists {
		return false
	}
	if !p.exists {
		return p.key == q.key
	}
	return p.id == q.id && p.id != (fileID{}) && p.mode&fs.ModeCharDevice == 0
}

// refuseExisting is the replace rule for a writer opened without
// CheckPaths: an existing regular file needs force.
func refuseExisting(flag, path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.IsDir():
		return cli.Usagef("%s %q is a directory, not a file", flag, path)
	case st.Mode().IsRegular():
		return cli.Usagef("%s %q already exists: pass --force to replace it", flag, path)
	}
	return nil
}
