package forecast

import (
	"bytes"
	"context"
	"io"
	"os"
)

// CountInputLines counts the lines of plain JSONL input files, cheaply:
// the size of the run to forecast before its input is read. -1 when any
// input is stdin or not a regular file (a pipe, /dev/stdin, a FIFO, a
// process substitution: reading it would take the records from the run),
// compressed, Parquet or a JSON array (whose records are not lines), or
// when ctx ends first.
func CountInputLines(ctx context.Context, names []string) int64 {
	if len(names) == 0 {
		return -1
	}
	var total int64
	buf := make([]byte, 1<<20)
	for _, name := range names {
		if name == "-" {
			return -1
		}
		n, ok := countLines(ctx, name, buf)
		if !ok {
			return -1
		}
		total += n
	}
	return total
}

func countLines(ctx context.Context, name string, buf []byte) (int64, bool) {
	if st, err := os.Stat(name); err != nil || !st.Mode().IsRegular() {
		return 0, false
	}
	f, err := os.Open(name)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var n int64
	first, last := true, byte('\n')
	for ctx.Err() == nil {
		k, err := f.Read(buf)
		if k > 0 {
			if first {
				first = false
				head := bytes.TrimLeft(buf[:k], " \t\r\n\xef\xbb\xbf")
				if len(head) > 0 && head[0] != '{' {
					return 0, false // compressed, Parquet, an array, or not JSONL
				}
			}
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			last = buf[k-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, false
		}
	}
	if ctx.Err() != nil {
		return 0, false
	}
	if last != '\n' {
		n++
	}
	return n, true
}
