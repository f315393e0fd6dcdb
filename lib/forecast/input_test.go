package forecast

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

func TestCountInputLines(t *testing.T) {
	dir := t.TempDir()
	a, b, arr := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "arr")
	os.WriteFile(a, []byte("{}\n{}\n{}\n"), 0o644)
	os.WriteFile(b, []byte("{}\n{}"), 0o644)
	os.WriteFile(arr, []byte("[{}, {}]"), 0o644)
	for _, tt := range []struct {
		names []string
		want  int64
	}{{[]string{a}, 3}, {[]string{a, b}, 5}, {nil, -1}, {[]string{"-"}, -1}, {[]string{a, arr}, -1}, {[]string{filepath.Join(dir, "missing")}, -1}} {
		if got := CountInputLines(context.Background(), tt.names); got != tt.want {
			t.Errorf("%v: %d, want %d", tt.names, got, tt.want)
		}
	}
}
