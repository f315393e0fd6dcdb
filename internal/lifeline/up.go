package lifeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"tokenmill/lib/procgroup"
)

// Host is the part of testing.TB that starting a server uses: a test
// passes its own *testing.T; a program that holds a server up (the
// benchmark's) passes one of its own making.
type Host interface {
	Helper()
	Skip(args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
	TempDir() string
	Cleanup(func())
	Failed() bool
}

var (
	// ErrPortTaken is a server exiting because another process bound its
	// port between the probe and the bind; Up then tries another port.
	ErrPortTaken = errors.New("the port was taken")
	// ErrExited is a server exiting before it answered.
	ErrExited = errors.New("exited before answering")
)

// portAttempts is how many ports Up tries.
const portAttempts = 3

// FreePort asks the kernel for a free loopback port. It can be taken
// again before the server binds it; Up then retries with another. A
// variable, so a test can hand out a taken one.
var FreePort = func(attempt int) (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// CanListen tells whether port is free on the loopback address.
func CanListen(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// Up starts a server on a free loopback port: launch starts it, ready
// waits until it answers. A ready error wrapping ErrPortTaken makes Up
// try another port; any other fails t with the end of the log. Every
// process started is stopped when t's test ends.
func Up(t Host, name, log string, launch func(port int) (*Process, error), ready func(p *Process, port int) error) *Process {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port, err := FreePort(attempt)
		if err != nil {
			t.Fatal(err)
		}
		p, err := launch(port)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Stop(t.Errorf) })
		err = ready(p, port)
		if err == nil {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("%s log %s:\n%s", name, log, LogTail(log))
				}
			})
			return p
		}
		if errors.Is(err, ErrPortTaken) && attempt < portAttempts {
			p.Stop(t.Errorf)
			continue
		}
		t.Fatalf("%s: %v\n%s", name, err, LogTail(log))
	}
}

// readyClient is bounded per poll by a context; the timeout is a backstop.
var readyClient = &http.Client{Timeout: 10 * time.Second}

// WaitReady polls GET url every 50 ms until ok accepts an answer, p
// exits (exited then says why, ErrExited by default) or timeout passes.
func WaitReady(p *Process, url string, timeout time.Duration, ok func(status int, body []byte) bool, exited func() error) error {
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for {
		select {
		case <-p.Done():
			return exited()
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := readyClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if ok(resp.StatusCode, b) {
				cancel()
				return nil
			}
			last = fmt.Sprintf("%s %.200s", resp.Status, bytes.TrimSpace(b))
		} else {
			last = err.Error()
		}
		cancel()
		if time.Now().After(deadline) {
			return fmt.Errorf("GET %s gave no ready answer within %v (last: %s)", url, timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// LogTail is the end of the log file at path, for failure messages.
func LogTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	const keep = 8 << 10
	if len(b) > keep {
		b = b[len(b)-keep:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
		return "[...]\n" + string(b)
	}
	return string(b)
}

// Environ is the test process's environment without the server's own
// settings (keys starting with prefix), HOME, the cache directory and
// proxies, then extra.
func Environ(prefix string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch lk := strings.ToLower(k); {
		case strings.HasPrefix(k, prefix), k == "HOME", k == "XDG_CACHE_HOME", strings.HasSuffix(lk, "_proxy"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// Binary is what find finds, for a server's Start: t skips where the
// lifeline cannot run or the error is notInstalled, and fails on any
// other error.
func Binary(t Host, find func() (string, error), notInstalled error) string {
	t.Helper()
	if err := procgroup.Supported(); err != nil {
		t.Skip(err)
	}
	bin, err := find()
	if errors.Is(err, notInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TakenPort holds a loopback port with a listener of its own and makes
// Up's first attempt get it, until t's test ends; it returns the port.
// Tests that use it must not run in parallel.
func TakenPort(t Host) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	taken := l.Addr().(*net.TCPAddr).Port
	real := FreePort
	FreePort = func(attempt int) (int, error) {
		if attempt == 1 {
			return taken, nil
		}
		return real(attempt)
	}
	t.Cleanup(func() { FreePort = real })
	return taken
}

// CheckGone fails t unless, within StopTimeout, no process of the group
// pgid runs and nothing answers GET url.
func CheckGone(t Host, pgid int, url string) {
	t.Helper()
	deadline := time.Now().Add(StopTimeout)
	for len(procgroup.Alive(pgid)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes %v of the server's group still run %v after it was stopped", procgroup.Alive(pgid), StopTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := &http.Client{Timeout: 2 * time.Second}
	if resp, err := c.Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("%s still answers %s", url, resp.Status)
	}
}
