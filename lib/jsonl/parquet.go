package jsonl

import (
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/segmentio/encoding/json"
)

// parquetSource yields each row of a Parquet file as a JSON object. Nested
// columns (the Hugging Face list<struct> of conversations, structs of
// lists) become JSON arrays and objects; Line is the 1-based row number.
// Rows are read one at a time, so memory is bounded by a row group's pages,
// not by the file.
type parquetSource struct {
	name   string
	reader *parquet.Reader
	closer io.Closer
	row    int64
	rows   int64
	buf    []byte
	stats  *Stats
}

func newParquetSource(name string, ra io.ReaderAt, size int64, closer io.Closer, stats *Stats) (source, error) {
	f, err := parquet.OpenFile(ra, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotParquet, err)
	}
	stats.Bytes += size
	return &parquetSource{name: name, reader: parquet.NewReader(f), closer: closer, rows: f.NumRows(), stats: stats}, nil
}

func (s *parquetSource) next() (Record, error) {
	if s.row >= s.rows {
		return Record{}, io.EOF
	}
	row := map[string]any{}
	if err := s.reader.Read(&row); err != nil {
		if err == io.EOF {
			return Record{}, &InputError{File: s.name, Line: s.row + 1, Reason: ReasonUnreadable,
				Err: fmt.Errorf("file promises %d rows but ends after %d", s.rows, s.row)}
		}
		return Record{}, &InputError{File: s.name, Line: s.row + 1, Reason: ReasonUnreadable, Err: err}
	}
	s.row++
	var err error
	s.buf, err = json.Append(s.buf[:0], row, json.SortMapKeys)
	if err != nil {
		return Record{}, &InputError{File: s.name, Line: s.row, Reason: ReasonUnreadable, Err: err}
	}
	return Record{Data: s.buf, File: s.name, Line: s.row}, nil
}

func (s *parquetSource) close() error {
	err := s.reader.Close()
	if cerr := s.closer.Close(); err == nil {
		err = cerr
	}
	return err
}
