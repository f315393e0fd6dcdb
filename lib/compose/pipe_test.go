package compose

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/testbin"
)

// TestPipe: a pipe (stdin, or a FIFO named as an input) is spooled and
// composed exactly as the file would be; one larger than --spool-max is
// refused, saying why and what to do.
func TestPipe(t *testing.T) {
	dir := t.TempDir()
	files := realSources(t, dir)
	var all bytes.Buffer
	for _, s := range []string{"alpaca", "glaive", "v1-sft"} {
		all.WriteString(readFile(t, files[s]))
	}
	joined := filepath.Join(dir, "all.jsonl")
	if err := os.WriteFile(joined, all.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--by", "source", "--share", "alpaca=0.5,glaive=0.3,v1-sft=0.2", "--total", "500"}
	fromFile := mustRun(t, dir, nil, "compose", append(args, joined)...)
	fromPipe := mustRun(t, dir, bytes.NewReader(all.Bytes()), "compose", args...)
	if !bytes.Equal(fromFile.Stdout, fromPipe.Stdout) || len(fromFile.Stdout) == 0 {
		t.Fatalf("stdin composed otherwise than the file (%d and %d bytes)", len(fromPipe.Stdout), len(fromFile.Stdout))
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			f.Write(all.Bytes())
			f.Close()
		}
	}()
	fromFIFO := mustRun(t, dir, nil, "compose", append(args, fifo)...)
	if !bytes.Equal(fromFile.Stdout, fromFIFO.Stdout) {
		t.Fatal("a FIFO composed otherwise than the file")
	}

	r := testbin.Run(t, dir, bytes.NewReader(all.Bytes()), nil, "compose", append(args, "--spool-max", "64KiB")...)
	if r.Code != 1 || !strings.Contains(r.Stderr, "stdin holds more than --spool-max 64KiB, and compose reads its input twice (count, then select): name a file instead of a pipe, or raise --spool-max") {
		t.Fatalf("a pipe over --spool-max: exit %d\n%s", r.Code, r.Stderr)
	}
	if len(r.Stdout) != 0 {
		t.Fatalf("a refused run wrote %d bytes", len(r.Stdout))
	}
}

// TestPipeMemory: a large input on a pipe is spooled, not held: the
// process's peak memory stays far below the input's size.
func TestPipeMemory(t *testing.T) {
	size := testbin.Size(64<<20, 256<<20)
	body := strings.Repeat("Explain the difference between a process and a thread, with an example. ", 12)
	var input bytes.Buffer
	for i := 0; input.Len() < size; i++ {
		fmt.Fprintf(&input, `{"id":"m-%08d","messages":[{"role":"user","content":"%d: %s"}],"source":"s%d"}`+"\n", i, i, body, i%4)
	}
	// Through rusage: Linux starts a child's peak RSS at its spawner's,
	// and this test's process holds the input.
	dir := t.TempDir()
	usage := filepath.Join(dir, "rusage")
	cmd := testbin.Command("rusage", usage, testbin.Path("compose"), "--by", "source", "--share", "s0=0.4,s1=0.3,s2=0.2,s3=0.1", "--total", "20000", "-o", "/dev/null")
	cmd.Dir = dir
	cmd.Stdin = io.NopCloser(bytes.NewReader(input.Bytes())) // a pipe, not a file
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
	case <-time.After(testbin.Timeout):
		cmd.Process.Kill()
		t.Fatalf("compose did not finish within %v", testbin.Timeout)
	}
	_, rss := testbin.PeakRSS(t, usage, stderr.String())
	t.Logf("%d MB on a pipe: peak RSS %d MB\n%s", input.Len()>>20, rss>>20, stderr.String())
	if rss > 48<<20 {
		t.Errorf("peak RSS %d MB for %d MB of input, over 48 MB: the input is held, not spooled", rss>>20, input.Len()>>20)
	}
	if !strings.Contains(stderr.String(), "wrote 20000 records") {
		t.Errorf("summary:\n%s", stderr.String())
	}
}
