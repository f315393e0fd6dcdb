package jsonl

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrNotRegular is a file read with ReadRegular that is not a regular
// file: a FIFO, a device such as /dev/zero, a socket or a directory.
var ErrNotRegular = errors.New("not a regular file")

// ReadRegular reads the whole of a small regular file that configures a
// tool (a tokenizer's files, an endpoints list), at most limit bytes. It
// never waits on a FIFO (opened without blocking, then refused) and never
// reads an endless device: anything but a regular file is ErrNotRegular,
// and a file larger than limit, or one that grows past it while read, is
// refused. The errors name the file and quote none of its content.
func ReadRegular(name string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|nonBlock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", name, ErrNotRegular, st.Mode().Type())
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d read from such a file", name, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: grew past the %d bytes read from such a file while read", name, limit)
	}
	return data, nil
}
