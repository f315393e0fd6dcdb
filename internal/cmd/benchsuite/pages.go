package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/parquet-go/parquet-go"

	"tokenmill/lib/cli"
)

// PagesCmd reads a Parquet file's pages and nothing more: the work any
// reader of its rows must do before it can build a record. The pages of
// the top-level columns named are read, decompressed and decoded into
// values (the calls extract makes, pages given back to the library's
// pools), one row group after another on one goroutine, and the values
// are dropped. Its CPU time is the floor under extract's cost per row.
type PagesCmd struct {
	Columns []string `help:"Top-level columns to read (default: all)." sep:"," placeholder:"NAME"`
	File    string   `arg:"" help:"The Parquet file." type:"existingfile"`
}

// Run reads the pages and prints what it read.
func (c *PagesCmd) Run(ctx context.Context, env *cli.Env) error {
	// Checked before opening: opening a FIFO waits for its writer.
	if st, err := os.Stat(c.File); err != nil {
		return err
	} else if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file: a Parquet file is read from its end, which a pipe cannot do", c.File)
	}
	f, err := os.Open(c.File)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() { // replaced since the check
		return fmt.Errorf("%s is not a regular file", c.File)
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return fmt.Errorf("%s: %v", c.File, err)
	}
	leaves, err := leafColumns(pf, c.Columns)
	if err != nil {
		return fmt.Errorf("%s: %v", c.File, err)
	}
	var values, bytes int64
	buf := make([]parquet.Value, 1024)
	for _, g := range pf.RowGroups() {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunks := g.ColumnChunks()
		for _, leaf := range leaves {
			n, b, err := readPages(parquet.AsyncPages(chunks[leaf].Pages()), buf)
			if err != nil {
				return fmt.Errorf("%s: column %d: %v", c.File, leaf, err)
			}
			values, bytes = values+n, bytes+b
		}
	}
	_, err = fmt.Fprintf(env.Stdout, "{\"rows\":%d,\"columns\":%d,\"values\":%d,\"value_bytes\":%d}\n", pf.NumRows(), len(leaves), values, bytes)
	return err
}

// leafColumns is the leaf column indexes under the top-level fields named
// (all of them when none is).
func leafColumns(f *parquet.File, names []string) ([]int, error) {
	var leaves []int
	index := 0
	for _, field := range f.Root().Columns() {
		n := countLeaves(field)
		if len(names) == 0 || slices.Contains(names, field.Name()) {
			for i := range n {
				leaves = append(leaves, index+i)
			}
		}
		index += n
	}
	if len(leaves) == 0 {
		return nil, fmt.Errorf("no column is named %v", names)
	}
	return leaves, nil
}

func countLeaves(c *parquet.Column) int {
	if c.Leaf() {
		return 1
	}
	n := 0
	for _, child := range c.Columns() {
		n += countLeaves(child)
	}
	return n
}

// readPages reads every page of a column chunk into values, returning how
// many values and bytes of byte-array values it held.
func readPages(pages parquet.Pages, buf []parquet.Value) (values, bytes int64, err error) {
	defer pages.Close()
	for {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			return values, bytes, nil
		}
		if err != nil {
			return values, bytes, err
		}
		r := p.Values()
		for {
			n, err := r.ReadValues(buf)
			values += int64(n)
			for _, v := range buf[:n] {
				bytes += int64(len(v.ByteArray()))
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parquet.Release(p)
				return values, bytes, err
			}
		}
		parquet.Release(p)
	}
}
