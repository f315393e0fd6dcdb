package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"tokenmill/lib/cli"
	"tokenmill/lib/jsonl"
)

// A fleet that changes while a run goes: servers listed in an endpoints
// file that is rewritten as they come and go (serve writes one). Add puts
// new ones into the pool; Follow re-reads the file; Check is the probes'
// readiness rule asked once, for a supervisor that watches its servers.

// Add puts the targets not in the pool yet into it, starting, and probes
// them until they are ready, as Start does; it returns those added. An
// endpoint is never taken out: one that is no longer listed leaves
// service by its failures, as any other.
func (p *Pool) Add(targets []Target) []*Endpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	have := make(map[string]bool, len(p.eps))
	for _, ep := range p.eps {
		have[targetKey(ep.t)] = true
	}
	var added []*Endpoint
	// A new slice, so that one Endpoints returned before stays as it was.
	eps := append([]*Endpoint(nil), p.eps...)
	for _, t := range targets {
		if have[targetKey(t)] {
			continue
		}
		have[targetKey(t)] = true
		ep := p.newEndpoint(len(eps), t)
		eps = append(eps, ep)
		added = append(added, ep)
	}
	p.eps = eps
	for _, ep := range added {
		p.probeLocked(ep, 0, min(p.cfg.ProbeInterval, 250*time.Millisecond))
	}
	if len(added) > 0 {
		p.broadcastLocked()
	}
	return added
}

// targetKey is what makes two targets the same server (CheckTargets').
func targetKey(t Target) string {
	return t.Addr + t.Path + "|" + strconv.FormatBool(t.TLS)
}

// Follow re-reads the endpoints file at path every interval until the
// pool's context ends, and adds the endpoints that appear in it (Add).
// A file that cannot be read or parsed is reported once per content and
// changes nothing. It returns at once.
//
// From then on an endpoint the file has listed comes into service (at
// start, or back after failures) only while the file lists it: serve
// lists a server once it has seen it ready and takes it off when it
// exits, so a server it is restarting is not sent work before serve has
// seen it up (a server that crashed again at once, unseen, would count
// as a start that failed). Endpoints named otherwise (--endpoints) are
// not held to the file.
func (p *Pool) Follow(path string, every time.Duration) {
	var managed sync.Map // targetKey -> true: listed in the file once
	said := map[string]bool{}
	warn := func(warnings []string) {
		for _, w := range warnings {
			if !said[w] {
				said[w] = true
				p.cfg.Logf("--endpoints-file %s", w)
			}
		}
	}
	// What the file holds now is read here, not in the goroutine, so that a
	// change made as soon as Follow returns is seen as one.
	ts, last, warnings, _ := LoadEndpoints(path)
	warn(warnings)
	for _, t := range ts {
		managed.Store(targetKey(t), true)
	}
	gate := func(t Target) (bool, string) {
		if _, ok := managed.Load(targetKey(t)); !ok {
			return true, ""
		}
		now, _, _, err := LoadEndpoints(path)
		if err != nil {
			return true, "" // unreadable for a moment: its last word stands
		}
		for _, n := range now {
			if targetKey(n) == targetKey(t) {
				return true, ""
			}
		}
		return false, "not listed in " + path + " (yet)"
	}
	p.listed.Store(&gate)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		var failed []byte
		for {
			p.sleep(every)
			if p.ctx.Err() != nil {
				return
			}
			ts, b, warnings, err := LoadEndpoints(path)
			if b == nil || bytes.Equal(b, last) {
				continue // nothing there: a file being replaced is there again at the next look
			}
			if err != nil {
				if !bytes.Equal(b, failed) {
					p.cfg.Logf("--endpoints-file changed but cannot be read (%v); the endpoints stay as they are", err)
					failed = b
				}
				continue
			}
			last = b
			warn(warnings)
			for _, t := range ts {
				managed.Store(targetKey(t), true)
			}
			if added := p.Add(ts); len(added) > 0 {
				names := make([]string, len(added))
				for i, ep := range added {
					names[i] = ep.name
				}
				p.cfg.Logf("%s lists %s: probing until ready", path, joinNames(names))
			}
		}
	}()
}

// Bounds of what an endpoints file may hold: far past any fleet (a line
// is an endpoint or a port range of up to 256), and short of what would
// cost memory or time to read on every probe.
const (
	maxEndpointsFile  = 1 << 20  // one file
	maxEndpointsTotal = 16 << 20 // every file of a directory together
	maxEndpointsFiles = 4096     // files of a directory
)

// LoadEndpoints reads --endpoints-file: a file (ReadEndpointsFile), or a
// directory whose *.txt files are read in name order, each as one (every
// node's serve writes its own into a directory they share). Only regular
// files are read, each at most maxEndpointsFile bytes and never waited
// on: a FIFO, a device (a link to /dev/zero), a socket or a directory is
// refused at once. A file of a directory that cannot be read or parsed
// is left out, said in warnings, and the others are read: one stray file
// in a shared directory does not hide the nodes listed beside it. The
// second result is what was read, names and contents, to tell a change
// by; nil when nothing could be read.
func LoadEndpoints(path string) (ts []Target, seen []byte, warnings []string, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, nil, err
	}
	if !st.IsDir() {
		b, err := readEndpointsFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, nil, err
		}
		if err != nil {
			return nil, []byte("\x00unreadable\x00" + err.Error()), nil, err
		}
		ts, err := ReadEndpointsFile(bytes.NewReader(b), path)
		if err != nil {
			return nil, b, nil, err
		}
		return ts, b, nil, nil
	}
	files, err := filepath.Glob(filepath.Join(path, "*.txt"))
	if err != nil {
		return nil, nil, nil, err
	}
	sort.Strings(files)
	var read bytes.Buffer
	var total int64
	for i, f := range files {
		if i == maxEndpointsFiles || total >= maxEndpointsTotal {
			warnings = append(warnings, fmt.Sprintf("%s: %d more *.txt files left out: at most %d files and %s are read from an endpoints directory",
				path, len(files)-i, maxEndpointsFiles, cli.Size(maxEndpointsTotal)))
			fmt.Fprintf(&read, "%d more\x00", len(files)-i)
			break
		}
		b, err := readEndpointsFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // replaced between the listing and the read: the next look finds it
		}
		if err == nil {
			total += int64(len(b))
			var more []Target
			if more, err = ReadEndpointsFile(bytes.NewReader(b), f); err == nil {
				fmt.Fprintf(&read, "%s\x00%d\x00", f, len(b))
				read.Write(b)
				ts = append(ts, more...)
				continue
			}
		}
		// Left out; what it held (or that it is not a file) is part of what
		// was read, so that it is said again only once it changes.
		warnings = append(warnings, fmt.Sprintf("%v: left out, the other files of %s are read", err, path))
		fmt.Fprintf(&read, "%s\x00bad\x00%v\x00", f, err)
		read.Write(b)
	}
	if read.Len() == 0 {
		read.WriteString("\x00none") // an empty directory is something read
	}
	return ts, read.Bytes(), warnings, nil
}

// readEndpointsFile reads one endpoints file: a regular file of at most
// maxEndpointsFile bytes (jsonl.ReadRegular). Its errors quote nothing
// of the file.
func readEndpointsFile(name string) ([]byte, error) {
	b, err := jsonl.ReadRegular(name, maxEndpointsFile)
	if errors.Is(err, jsonl.ErrNotRegular) {
		return nil, fmt.Errorf("%w: an endpoints file must be a regular file (never a FIFO or a device, which could block or never end)", err)
	}
	return b, err
}

func joinNames(names []string) string {
	if len(names) == 1 {
		return "a new endpoint, " + names[0]
	}
	return fmt.Sprintf("%d new endpoints, %s", len(names), strings.Join(names, ", "))
}

// admit is r, a ready answer of ep's, unless the endpoints file keeps ep
// out of service for now (Follow).
func (p *Pool) admit(ep *Endpoint, r readiness) readiness {
	gate := p.listed.Load()
	if gate == nil {
		return r
	}
	if ok, why := (*gate)(ep.t); !ok {
		return readiness{note: r.note + "; " + why, path: r.path}
	}
	return r
}

// Check asks endpoint i once whether it is ready, by the probes' rule
// (--health-path, else /health, else /v1/models where a server has no
// /health), and says what it saw ("/health 503 (starting)"). It probes
// nothing else and puts nothing into service: a supervisor of the
// servers (serve) calls it without Start, on its own schedule.
func (p *Pool) Check(i int) (ready bool, note string) {
	p.mu.Lock()
	ep := p.eps[i]
	p.mu.Unlock()
	r := p.checkReady(ep)
	p.mu.Lock()
	p.noteProbeLocked(ep, r)
	p.mu.Unlock()
	return r.ready, r.note
}
