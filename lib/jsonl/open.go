package jsonl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/klauspost/compress/gzip"
)

const readBufferSize = 1 << 20

var (
	magicGzip    = []byte{0x1f, 0x8b}
	magicZstd    = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magicParquet = []byte("PAR1")
	utf8BOM      = []byte{0xef, 0xbb, 0xbf}
)

// multiCloser closes in order and keeps the first error.
type multiCloser []io.Closer

func (m multiCloser) Close() error {
	var first error
	for _, c := range m {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// openSource opens one input and picks its reader by content, never by
// name: compression by magic bytes, then Parquet, a JSON array, or JSONL.
func openSource(name string, stdin io.Reader, r *Reader) (source, error) {
	var raw io.Reader
	var closers multiCloser
	var file *os.File
	if name == "-" {
		raw = stdin
	} else {
		f, err := Open(r.ctx, name, r.logf())
		if err != nil {
			return nil, err
		}
		raw, file = f, f
		closers = append(closers, f)
	}
	br := bufio.NewReaderSize(raw, readBufferSize)
	compressed := false
	magic := peekMagic(br)
	switch {
	case bytes.HasPrefix(magic, magicGzip):
		zr, err := gzip.NewReader(br)
		if err != nil {
			closers.Close()
			return nil, describeReadError(err)
		}
		closers = append(multiCloser{zr}, closers...)
		br, compressed = bufio.NewReaderSize(zr, readBufferSize), true
	case bytes.HasPrefix(magic, magicZstd):
		zr, err := newZstdReader(br)
		if err != nil {
			closers.Close()
			return nil, err
		}
		closers = append(multiCloser{closerFunc(func() error { zr.Close(); return nil })}, closers...)
		br, compressed = bufio.NewReaderSize(zr, readBufferSize), true
	}

	magic = peekMagic(br)
	if bytes.HasPrefix(magic, magicParquet) {
		return openParquetInput(name, br, file, compressed, closers, &r.Stats, r.opts.Columns)
	}
	if strings.HasSuffix(name, ".parquet") {
		closers.Close()
		return nil, fmt.Errorf("%w: the name says Parquet but the content does not start with PAR1", ErrNotParquet)
	}
	var skipped int64 // a byte-order mark, not part of any record
	if bytes.HasPrefix(magic, utf8BOM) {
		br.Discard(len(utf8BOM))
		skipped = int64(len(utf8BOM))
	}
	if c := firstNonSpace(br); c != 0 && c != '{' && c != '[' {
		if delim, ok := csvKind(name, peekLine(br), r.opts.CSV.delimiter()); ok {
			if r.opts.CSV == nil {
				closers.Close()
				return nil, ErrCSV
			}
			return newCSVSource(name, br, closers, delim, r.opts.MaxLine, &r.Stats), nil
		}
	}
	if firstNonSpace(br) == '[' && !arrayLines(br) {
		return newArraySource(name, br, closers, r.opts.MaxLine, &r.Stats), nil
	}
	if startsPretty(br) {
		return newValueSource(name, br, closers, r.opts.MaxLine, &r.Stats), nil
	}
	ls := &lineSource{name: name, br: br, closer: closers, maxLine: r.opts.MaxLine, limit: r.opts.LimitName, stats: &r.Stats, pos: skipped}
	if file != nil && !compressed {
		if st, err := file.Stat(); err == nil && st.Mode().IsRegular() {
			ls.file = file
		}
	}
	return ls, nil
}

// firstNonSpace peeks past leading white space without consuming it. It
// waits only for bytes it needs, so a slow pipe that has sent one short
// record is not held up waiting for a fuller buffer.
func firstNonSpace(br *bufio.Reader) byte {
	for {
		b, _ := br.Peek(br.Buffered())
		for _, c := range b {
			if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
				return c
			}
		}
		if len(b) >= readBufferSize {
			return 0
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			return 0
		}
	}
}

// peekMagic returns the first bytes of the input, up to 4, reading more
// only while what has arrived could still be the start of a magic number.
func peekMagic(br *bufio.Reader) []byte {
	for {
		b, _ := br.Peek(min(br.Buffered(), 4))
		if len(b) == 4 || (len(b) > 0 && !magicPrefix(b)) {
			return b
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			b, _ = br.Peek(br.Buffered())
			return b
		}
	}
}

func magicPrefix(b []byte) bool {
	for _, m := range [][]byte{magicGzip, magicZstd, magicParquet, utf8BOM} {
		n := min(len(b), len(m))
		if bytes.Equal(b[:n], m[:n]) {
			return true
		}
	}
	return false
}

// openParquetInput gives the Parquet reader the random access it needs: the
// file itself when it is a plain file, otherwise a spooled temporary copy
// (Parquet on stdin, or compressed Parquet).
func openParquetInput(name string, br *bufio.Reader, file *os.File, compressed bool, closers multiCloser, stats *Stats, columns func(string) bool) (source, error) {
	if file != nil && !compressed {
		if st, err := file.Stat(); err == nil && st.Mode().IsRegular() {
			src, err := newParquetSource(name, file, st.Size(), closers, stats, columns)
			if err != nil {
				closers.Close()
			}
			return src, err
		}
	}
	tmp, err := os.CreateTemp("", "tokenmill-parquet-*")
	if err != nil {
		closers.Close()
		return nil, err
	}
	os.Remove(tmp.Name()) // the open descriptor keeps it until closed
	size, err := io.Copy(tmp, br)
	closers.Close()
	if err != nil {
		tmp.Close()
		return nil, fmt.Errorf("spooling parquet input: %w", describeReadError(err))
	}
	src, err := newParquetSource(name, tmp, size, tmp, stats, columns)
	if err != nil {
		tmp.Close()
	}
	return src, err
}

// ErrNotParquet is returned for a file that starts like Parquet but is not.
var ErrNotParquet = errors.New("not a valid Parquet file")
