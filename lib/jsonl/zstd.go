package jsonl

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"

	"tokenmill/lib/cli"
)

// A zstd frame's window is what its decoder holds: a small file written
// with --long=30 makes a reader take a gigabyte. Every tool reads windows
// up to zstd's own --long default (128 MiB), and refuses a larger one,
// saying how to allow it (TOKENMILL_ZSTD_MAX_WINDOW, which then costs that
// much memory), before it holds it.
const (
	defaultZstdWindow = 128 << 20
	zstdWindowEnv     = "TOKENMILL_ZSTD_MAX_WINDOW"
)

// zstdWindow is the largest window read: the environment's, else the
// default.
func zstdWindow() uint64 {
	if v, ok := os.LookupEnv(zstdWindowEnv); ok {
		var s cli.Size
		if s.UnmarshalText([]byte(v)) == nil && s > 0 {
			return uint64(s)
		}
	}
	return defaultZstdWindow
}

// newZstdReader decodes r, refusing windows past zstdWindow.
func newZstdReader(r io.Reader) (*zstd.Decoder, error) {
	return zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(zstdWindow()))
}

// zstdError says what a window too large means and how to read it anyway.
func zstdError(err error) error {
	if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
		return fmt.Errorf("its zstd window is larger than the %s tokenmill reads (the decoder would hold it whole; set %s=2GiB, say, to read it at that cost, or recompress without --long): %w",
			cli.Size(zstdWindow()), zstdWindowEnv, err)
	}
	return err
}
