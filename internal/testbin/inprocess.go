package testbin

import (
	"bytes"
	"context"
	"io"

	"tokenmill/lib/cli"
)

// InProcess runs cmd (a command as given to cli.Main) in this process, as
// its binary would run, with stdin (nil: empty) and args: for tests that
// cancel the context or need many quick runs.
func InProcess(ctx context.Context, name, description string, cmd any, stdin io.Reader, args ...string) Result {
	if stdin == nil {
		stdin = bytes.NewReader(nil)
	}
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Name: name, Stdin: stdin, Stdout: &stdout, Stderr: &stderr}
	code := cli.Run(ctx, env, description, cmd, args)
	return Result{Code: code, Stdout: stdout.Bytes(), Stderr: stderr.String()}
}

// InterruptingReader is stdin for InProcess that interrupts the run, as
// SIGINT would, once After bytes of Data have been read. It serves at most
// 4 KiB a read, so the interrupt lands mid-stream.
type InterruptingReader struct {
	Data   []byte
	After  int
	Cancel context.CancelCauseFunc
	served int
}

func (r *InterruptingReader) Read(p []byte) (int, error) {
	if r.served >= len(r.Data) {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), 4096)], r.Data[r.served:])
	r.served += n
	if r.served >= r.After {
		r.Cancel(cli.ErrInterrupted)
	}
	return n, nil
}
