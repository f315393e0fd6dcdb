package extract

import (
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"tokenmill/internal/testbin"
)

// hostilePeakRSS bounds the resident memory of a run on a hostile input.
const hostilePeakRSS = 100 << 20

// Inputs whose few bytes claim gigabytes: a Parquet schema nested 100,000
// deep (1.9 MB: the library reserved some 80 GB), a Parquet page claiming
// 2^31-1 values (5.6 GB), a zstd frame with a 256 MiB window. extract
// reports each as unreadable, naming why, exits 3, and stays under its
// memory cap and a resident bound far below what the claims would take.
func TestBinaryInputsThatClaimGigabytes(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	parquetFile := func(md format.FileMetaData, body []byte) []byte {
		fb, err := thrift.Marshal(new(thrift.CompactProtocol), &md)
		if err != nil {
			t.Fatal(err)
		}
		data := append(append([]byte("PAR1"), body...), fb...)
		data = binary.LittleEndian.AppendUint32(data, uint32(len(fb)))
		return append(data, "PAR1"...)
	}
	deep := format.FileMetaData{Version: 1, Schema: []format.SchemaElement{{Name: "root", NumChildren: thrift.New[int32](1)}}}
	for i := range 100_000 {
		deep.Schema = append(deep.Schema, format.SchemaElement{Name: "g" + strconv.Itoa(i), NumChildren: thrift.New[int32](1), RepetitionType: thrift.New(format.Optional)})
	}
	deep.Schema = append(deep.Schema, format.SchemaElement{Name: "prompt", Type: thrift.New(format.ByteArray), RepetitionType: thrift.New(format.Optional)})

	header, err := thrift.Marshal(new(thrift.CompactProtocol), &format.PageHeader{Type: format.DataPage, CompressedPageSize: 8, UncompressedPageSize: 8,
		DataPageHeader: thrift.New(format.DataPageHeader{NumValues: math.MaxInt32, Encoding: format.Plain})})
	if err != nil {
		t.Fatal(err)
	}
	body := append(header, make([]byte, 8)...)
	page := format.FileMetaData{Version: 1, NumRows: 1, Schema: []format.SchemaElement{{Name: "root", NumChildren: thrift.New[int32](1)},
		{Name: "prompt", Type: thrift.New(format.ByteArray), RepetitionType: thrift.New(format.Required)}},
		RowGroups: []format.RowGroup{{NumRows: 1, Columns: []format.ColumnChunk{{FileOffset: 4, MetaData: format.ColumnMetaData{
			Type: format.ByteArray, PathInSchema: []string{"prompt"}, NumValues: 1, DataPageOffset: 4,
			TotalCompressedSize: int64(len(body)), TotalUncompressedSize: int64(len(body))}}}}}}

	var zs strings.Builder
	zw, err := zstd.NewWriter(&zs, zstd.WithWindowSize(256<<20), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	// a megabyte: less is written as one segment, its window its size
	io.WriteString(zw, `{"prompt":"`+strings.Repeat("a", 1<<20)+`"}`+"\n")
	zw.Close()

	for _, tc := range []struct{ name, path, want string }{
		{"a schema 100,000 deep", write("deep.parquet", parquetFile(deep, nil)), "nests groups more than 64 deep"},
		{"a page of 2^31-1 values", write("page.parquet", parquetFile(page, body)), "more than tokenmill reads"},
		{"a zstd window of 256 MiB", write("long.jsonl.zst", []byte(zs.String())), "TOKENMILL_ZSTD_MAX_WINDOW"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stats := filepath.Join(t.TempDir(), "rusage")
			cmd := testbin.Capped(stats, 0, "extract", "--progress", "0", tc.path)
			cmd.Dir = dir
			r := testbin.Exec(t, cmd)
			if r.Code != 3 || !strings.Contains(r.Stderr, tc.want) || len(r.Stdout) != 0 {
				t.Fatalf("exit %d, %d bytes out; want 3 saying %q:\n%s", r.Code, len(r.Stdout), tc.want, r.Stderr)
			}
			_, rss := testbin.PeakRSS(t, stats, r.Stderr)
			if rss > hostilePeakRSS {
				t.Errorf("peak RSS %d MB, past %d MB", rss>>20, hostilePeakRSS>>20)
			}
			t.Logf("exit %d, peak RSS %.1f MB", r.Code, float64(rss)/(1<<20))
		})
	}
}
