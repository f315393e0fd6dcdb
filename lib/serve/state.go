package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/procgroup"
)

// The state directory: what one serve writes of itself, for serve
// status, serve stop and the next serve.
const (
	stateName     = "state.json" // the status file, replaced on every change
	lockName      = "lock"       // held (flock) while a serve runs
	logsName      = "logs"       // server-K.log, rotated
	endpointsName = "endpoints.txt"
)

// Serve states.
const (
	serveRunning  = "running"
	serveStopping = "stopping"
	serveStopped  = "stopped"
	serveFailed   = "failed" // every server given up
)

// Server states.
const (
	stateStarting   = "starting"   // started, not ready yet
	stateReady      = "ready"      // answers its readiness check
	stateUnhealthy  = "unhealthy"  // was ready, its check fails now
	stateRestarting = "restarting" // stopped or exited; started again at next_start
	stateStopping   = "stopping"
	stateStopped    = "stopped"
	stateGivenUp    = "given up" // failed to start --max-failures times in a row
)

// State is the status file: the serve and each of its servers.
type State struct {
	PID           int       `json:"pid"`
	PIDStart      uint64    `json:"pid_start,omitempty"` // the pid's start time, where the system says
	State         string    `json:"state"`
	Started       time.Time `json:"started"`
	Updated       time.Time `json:"updated"`
	Host          string    `json:"host"`
	Command       []string  `json:"command"`
	EndpointsFile string    `json:"endpoints_file"`
	Servers       []Server  `json:"servers"`
}

// Server is one server's entry in the status file.
type Server struct {
	Index int    `json:"index"`
	URL   string `json:"url"`
	Port  int    `json:"port"`
	GPUs  string `json:"gpus,omitempty"`
	State string `json:"state"`
	// PID is the server's process group (its leader's pid), 0 while none
	// runs; PIDStart the leader's start time.
	PID        int       `json:"pid,omitempty"`
	PIDStart   uint64    `json:"pid_start,omitempty"`
	Started    time.Time `json:"started,omitzero"`
	ReadySince time.Time `json:"ready_since,omitzero"`
	NextStart  time.Time `json:"next_start,omitzero"`
	// Restarts counts the starts after the first; FailedStarts the starts
	// in a row that ended before the server was ready.
	Restarts     int       `json:"restarts"`
	FailedStarts int       `json:"failed_starts"`
	LastExit     string    `json:"last_exit,omitempty"` // why the last start ended
	LastExitAt   time.Time `json:"last_exit_at,omitzero"`
	Check        string    `json:"check,omitempty"` // what the last readiness check saw
	Log          string    `json:"log"`
	// Cgroup is the cgroup of the start running now, where it has one:
	// every process it started is there, whatever group it went to.
	Cgroup string `json:"cgroup,omitempty"`
}

// maxStateFile bounds what is read of a status file: far past any
// fleet's, and never a device without end.
const maxStateFile = 16 << 20

// saveBound is how long serve, at its end, waits for its last state to
// be written before it exits without.
const saveBound = 10 * time.Second

// readState reads the status file of dir; a missing one is os.ErrNotExist.
func readState(dir string) (*State, error) {
	b, err := readStateFile(dir)
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateName), err)
	}
	return &st, nil
}

// readStateFile is the status file's bytes: a regular file, read within
// maxStateFile and never waited on (a FIFO there is refused).
func readStateFile(dir string) ([]byte, error) {
	return jsonl.ReadRegular(filepath.Join(dir, stateName), maxStateFile)
}

// writeState replaces the status file at once (a reader sees the old or
// the new, whole), with secrets (nil: none) replaced by ***.
func writeState(dir string, st *State, secrets *cli.Secrets) error {
	b, err := stateBytes(st, secrets)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, stateName), b)
}

// stateBytes is the status file's text for st.
func stateBytes(st *State, secrets *cli.Secrets) ([]byte, error) {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(secrets.Redact(b), '\n'), nil
}

// checkFiles refuses, before anything is written, a state directory or
// an endpoints file that would make serve write where it must not: the
// endpoints file on the status file, the lock or a log (under any name:
// compared by the file), a directory as the endpoints file, or a symbolic
// link at one of serve's own files in the state directory (its lock, its
// logs), which it never writes through.
func checkFiles(dir, endpoints string, servers int) error {
	own := []jsonl.Output{
		{Flag: "--state-dir's status file", Path: filepath.Join(dir, stateName), Kept: true},
		{Flag: "--state-dir's lock", Path: filepath.Join(dir, lockName), Kept: true},
	}
	sidecars := []string{filepath.Join(dir, lockName), filepath.Join(dir, logsName)}
	for i := range servers {
		log := filepath.Join(dir, logsName, fmt.Sprintf("server-%d.log", i))
		own = append(own, jsonl.Output{Flag: fmt.Sprintf("server %d's log", i), Path: log, Kept: true})
		sidecars = append(sidecars, log)
	}
	for _, path := range sidecars {
		if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(path)
			return cli.Usagef("%q is a symbolic link (to %q): serve never writes through a link at a file of its own; remove the link", path, target)
		}
	}
	if st, err := os.Lstat(filepath.Join(dir, logsName)); err == nil && !st.IsDir() {
		return cli.Usagef("%q is not a directory: serve keeps the servers' logs there", filepath.Join(dir, logsName))
	}
	for _, f := range append([]jsonl.Output{{Flag: "--endpoints-file", Path: endpoints}}, own...) {
		if err := replaceable(f.Path); err != nil {
			return cli.Usagef("%s: %v", f.Flag, err)
		}
	}
	return jsonl.CheckPaths(nil, append([]jsonl.Output{{Flag: "--endpoints-file", Path: endpoints, Kept: true}}, own...), false)
}

// replaceable refuses a file serve would have to write into rather than
// replace: a FIFO (whose open waits for a reader: serve blocked there,
// deaf to signals), a device, a socket, or a link to one. Absent, or a
// regular file (a link to one is replaced, not followed), it is nil.
func replaceable(path string) error {
	st, err := os.Stat(path)
	if err != nil || st.Mode().IsRegular() || st.IsDir() {
		return nil // a directory is refused by the writer, naming it
	}
	kind := "not a regular file"
	switch m := st.Mode(); {
	case m&os.ModeNamedPipe != 0:
		kind = "a FIFO"
	case m&os.ModeDevice != 0:
		kind = "a device"
	case m&os.ModeSocket != 0:
		kind = "a socket"
	}
	return fmt.Errorf("%q is %s: serve writes its own files whole, never into a FIFO (whose open waits for a reader) or a device, so it must be a regular file or not exist yet", path, kind)
}

func writeAtomic(path string, b []byte) error {
	if err := replaceable(path); err != nil {
		return err
	}
	return jsonl.WriteFile(path, jsonl.CreateFileOptions{Replace: true}, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

// endpointsText is the endpoints file: the URLs of the servers ready now,
// one a line, after a comment saying whose and when.
func endpointsText(st *State) []byte {
	var b bytes.Buffer
	ready := 0
	for _, s := range st.Servers {
		if s.State == stateReady {
			ready++
		}
	}
	fmt.Fprintf(&b, "# serve (pid %d) on %s: %d of %d servers ready at %s\n", st.PID, st.Host, ready, len(st.Servers), st.Updated.Format(time.RFC3339))
	for _, s := range st.Servers {
		if s.State == stateReady {
			b.WriteString(s.URL + "\n")
		}
	}
	return b.Bytes()
}

// leftovers are the servers of st whose processes still run: a serve
// that was killed (-9) could not stop them.
func leftovers(st *State) []Server {
	var out []Server
	for _, s := range st.Servers {
		if stillRuns(st, s) {
			out = append(out, s)
		}
	}
	return out
}

// stillRuns reports whether a process of server s of st runs: its
// leader (a process that has the pid since is another's, and so is its
// group: a pid is not given again while a group has its number), the
// workers of a leader that is gone, or what is left in its cgroup or
// carries its mark (leftFamily).
func stillRuns(st *State, s Server) bool {
	switch {
	case s.PID <= 0:
		return false
	case procgroup.Running(s.PID, 0) && !procgroup.Running(s.PID, s.PIDStart):
		return false
	}
	return len(leftFamily(st, s).members()) > 0
}

// leftFamily is server s of a serve that no longer runs, as serve stop
// and the next serve find it: its group, its cgroup, and the processes
// (init's now) that carry its mark.
func leftFamily(st *State, s Server) *family {
	f := &family{pgid: s.PID, marker: fmt.Sprintf("%s%d:", serveMark(st.PID, st.PIDStart), s.Index), anyParent: true, seen: map[int]uint64{}}
	if s.Cgroup != "" {
		f.cg = &cgroup{dir: s.Cgroup, fd: -1}
	}
	return f
}

// describe names servers for a message: "server 0 (pid 123, port 30000)".
func describe(ss []Server) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = fmt.Sprintf("server %d (pid %d, port %d)", s.Index, s.PID, s.Port)
	}
	return strings.Join(parts, ", ")
}

// claim takes the state directory for a new serve: its lock, after
// checking that no serve runs there, that no server of a previous one
// still runs, and that every port is free. It writes nothing else.
func claim(dir string, specs []spec) (*jsonl.Flock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--state-dir: %w", err)
	}
	f, ok, err := lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("--state-dir %s: %w", dir, err)
	}
	if !ok {
		pid := "?"
		if st, err := readState(dir); err == nil {
			pid = strconv.Itoa(st.PID)
		}
		return nil, fmt.Errorf("another serve (pid %s) runs with --state-dir %s: see serve status --state-dir %s, or stop it with serve stop --state-dir %s", pid, dir, dir, dir)
	}
	fail := func(err error) (*jsonl.Flock, error) {
		f.Close()
		return nil, err
	}
	if st, err := readState(dir); err == nil {
		if left := leftovers(st); len(left) > 0 {
			return fail(fmt.Errorf("%s of a previous serve (pid %d, which did not stop them: killed?) still run: serve stop --state-dir %s stops them",
				describe(left), st.PID, dir))
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	for _, s := range specs {
		if err := portFree(s.host, s.port); err != nil {
			return fail(fmt.Errorf("server %d: %w: stop what uses it, or choose another --port", s.index, err))
		}
	}
	return f, nil
}

// portFree checks that nothing listens on port, on any address (a bind
// of every address fails while one listens) nor where infer will reach
// it.
func portFree(host string, port int) error {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("port %d is in use: something answers at %s (a server started otherwise, or a serve with another --state-dir)", port, addr)
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return fmt.Errorf("port %d is in use (%v)", port, err)
	}
	return ln.Close()
}
