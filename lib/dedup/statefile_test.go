package dedup

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"tokenmill/internal/testbin"
)

// statePeakRSS bounds the resident memory of a dedup run that is refused.
const statePeakRSS = 100 << 20

// A --state that is not a regular file: /dev/zero (named, and through a
// link), a FIFO nobody writes, a socket. Each is refused at once (a usage
// error, exit 2) before anything is opened for writing: -o and --dups are
// not created, the directory and TMPDIR are as they were, and nothing is
// read from it (dedup --state /dev/zero spooled 5 GB into a hidden
// temporary file in 6 s; the FIFO waited for a writer). The run stays
// under its memory cap, and under a cap of 2048 blocks on any file it
// writes (ulimit -f), TMPDIR's spool among them.
func TestBinaryStateNotRegular(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, "tmp")
	os.Mkdir(tmp, 0o755)
	os.Symlink("/dev/zero", filepath.Join(dir, "zero.state"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.state"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "sock.state"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	in := filepath.Join(dir, "in.jsonl")
	input, _ := corpusPrompts(50, 2)
	if err := os.WriteFile(in, input, 0o644); err != nil {
		t.Fatal(err)
	}
	before := listing(t, dir)
	for _, tt := range []struct{ state, want string }{
		{"/dev/zero", `--state "/dev/zero" is a device: a state is a regular file`},
		{"zero.state", `--state "zero.state" is a device`},
		{"fifo.state", `--state "fifo.state" is a FIFO or a pipe`},
		{"sock.state", `--state "sock.state" is a socket`},
	} {
		t.Run(tt.state, func(t *testing.T) {
			stats := filepath.Join(t.TempDir(), "rusage")
			cmd := testbin.Capped(stats, 2048, "dedup", "--state", tt.state, "-o", "out.jsonl", "--dups", "dups.jsonl", "in.jsonl")
			cmd.Dir, cmd.Env = dir, append(os.Environ(), "TMPDIR="+tmp)
			r := testbin.Exec(t, cmd)
			if r.Code != 2 || !strings.Contains(r.Stderr, tt.want) {
				t.Errorf("exit %d, want 2 saying %q:\n%s", r.Code, tt.want, r.Stderr)
			}
			_, rss := testbin.PeakRSS(t, stats, r.Stderr)
			if rss > statePeakRSS {
				t.Errorf("peak RSS %d MB, past %d MB", rss>>20, statePeakRSS>>20)
			}
			if after := listing(t, dir); !slices.Equal(after, before) {
				t.Errorf("the refused run changed the directory: before %q, after %q", before, after)
			}
			t.Logf("exit %d, peak RSS %.1f MB", r.Code, float64(rss)/(1<<20))
		})
	}
}

// listing is every name under dir (TMPDIR's among them) with its size.
func listing(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size := int64(0)
		if info.Mode().IsRegular() {
			size = info.Size()
		}
		out = append(out, path+" "+info.Mode().Type().String()+" "+strconv.FormatInt(size, 10))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
