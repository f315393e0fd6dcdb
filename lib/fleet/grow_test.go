package fleet

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"tokenmill/internal/llmsim"
)

// writeList replaces the endpoints file at path at once, as serve does.
func writeList(t *testing.T, path string, lines ...string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// An endpoints file that gains a server while the pool runs: the new one
// joins, probed until ready; a line that does not parse is reported once
// and changes nothing; a server listed again is not added twice.
func TestFollowAddsEndpoints(t *testing.T) {
	f, err := llmsim.Start(context.Background(), llmsim.Config{Instant: true, Seed: 7}, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	urls := f.URLs()
	path := filepath.Join(t.TempDir(), "endpoints.txt")
	writeList(t, path, "# one ready", urls[0])
	first, err := ParseEndpoints(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	l := &logs{}
	ctx, cancel := context.WithCancel(context.Background())
	p := NewPool(ctx, first, Config{ProbeInterval: 10 * time.Millisecond, EjectAfter: 5, Logf: l.logf})
	t.Cleanup(func() {
		cancel()
		p.Close()
	})
	p.Start()
	p.Follow(path, 10*time.Millisecond)
	if err := p.WaitReady(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	writeList(t, path, urls[0], "bad host:port:x")
	waitLog(t, l, "--endpoints-file changed but cannot be read", 1)
	writeList(t, path, urls[0], urls[1])
	waitLog(t, l, path+" lists a new endpoint, "+urls[1]+": probing until ready", 1)
	deadline := time.Now().Add(20 * time.Second)
	for {
		v := p.View()
		if len(v) == 2 && v[1].State == StateReady {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint added to the file is not ready after 20s: %+v\n%s", v, l.text())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if added := p.Add(append(first, first...)); len(added) != 0 || len(p.Endpoints()) != 2 {
		t.Errorf("adding a listed endpoint again added %d; the pool has %d", len(added), len(p.Endpoints()))
	}
	if n := strings.Count(l.text(), "cannot be read"); n != 1 {
		t.Errorf("the bad file was reported %d times, want once:\n%s", n, l.text())
	}
	ep := p.Endpoints()[1]
	if ep.Index() != 1 || ep.Name() != urls[1] {
		t.Errorf("the added endpoint is #%d %s", ep.Index(), ep.Name())
	}

	// Taken off the file, it stays out of service once it fails, though
	// its /health answers; listed again, it comes back.
	writeList(t, path, urls[0])
	p.Failed(ep, true, "connection refused")
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s not within 20s: %+v\n%s", what, p.View()[1], l.text())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the probe to see it unlisted", func() bool {
		p.mu.Lock()
		seen := ep.lastProbe
		p.mu.Unlock()
		return strings.HasSuffix(seen, "; not listed in "+path+" (yet)")
	})
	if v := p.View()[1]; v.State != StateDown {
		t.Errorf("an endpoint the file no longer lists came back: %s", v.State)
	}
	writeList(t, path, urls[0], urls[1])
	waitFor("it to come back once listed", func() bool { return p.View()[1].State == StateReady })
}

// Check is the probes' rule asked once: what each kind of server answers
// when ready, a server still loading, and no server at all.
func TestCheck(t *testing.T) {
	for _, fl := range llmsim.Flavors {
		p, _, _ := simPool(t, llmsim.Config{Flavor: fl}, 1, Config{})
		if ready, note := p.Check(0); !ready || note != flavorWant[fl].ready {
			t.Errorf("%s: Check says %v, %q; want ready, %q", fl, ready, note, flavorWant[fl].ready)
		}
	}
	loading, _, _ := simPool(t, llmsim.Config{Faults: llmsim.Faults{StartupDelay: time.Hour}}, 1, Config{})
	if ready, note := loading.Check(0); ready || note != "/health 503 (starting)" {
		t.Errorf("a server loading: %v, %q", ready, note)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // nothing listens there now
	gone, _ := ParseEndpoints(ln.Addr().String())
	none := NewPool(context.Background(), gone, Config{})
	defer none.Close()
	if ready, note := none.Check(0); ready || note != "/health: connection refused" {
		t.Errorf("no server: %v, %q", ready, note)
	}
}

// --endpoints-file DIR: every node's serve writes its own file into a
// directory they share; its *.txt files are read in name order (a file
// being written beside them, which has another name, is not). A file
// that cannot be read or parsed is left out, said with its file and line
// (never its text), and the rest is read: a stray notes.txt, a FIFO (never
// waited on), a link to /dev/zero (never read), a file past the bound,
// a directory named like a file.
func TestLoadEndpointsDirectory(t *testing.T) {
	dir := t.TempDir()
	writeList(t, filepath.Join(dir, "node2.txt"), "# node2", "node2:30000-30001")
	writeList(t, filepath.Join(dir, "node1.txt"), "node1:30000")
	writeList(t, filepath.Join(dir, "node3.txt.tmp-1234"), "half-written:1")
	ts, seen, warnings, err := LoadEndpoints(dir)
	if err != nil || urls(ts) != "http://node1:30000 http://node2:30000 http://node2:30001" || len(seen) == 0 || len(warnings) != 0 {
		t.Fatalf("%s, %v %q", urls(ts), err, warnings)
	}
	empty := t.TempDir()
	if ts, seen, _, err := LoadEndpoints(empty); err != nil || len(ts) != 0 || seen == nil {
		t.Errorf("an empty directory: %v %q %v", ts, seen, err)
	}

	const secret = "hf_S3cr3tT0k3nLine"
	writeList(t, filepath.Join(dir, "node4.txt"), "node4:30000", "node4:x")
	writeList(t, filepath.Join(dir, "notes.txt"), secret+" rotate weekly", "gpu nodes: ask ops")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.txt"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "huge.txt"), make([]byte, maxEndpointsFile+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.txt"), 0o755); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ts, seen, warnings, err = LoadEndpoints(dir)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("LoadEndpoints of a directory holding a FIFO and a link to /dev/zero did not return within 10s")
	}
	if err != nil || urls(ts) != "http://node1:30000 http://node2:30000 http://node2:30001" {
		t.Fatalf("the good files are not read beside the bad ones: %s, %v", urls(ts), err)
	}
	all := strings.Join(warnings, "\n")
	for _, want := range []string{"fifo.txt: not a regular file", "zero.txt: not a regular file", "huge.txt: 1048577 bytes, more than the 1048576",
		"node4.txt:2: not an endpoint: a port that is not a number from 1 to 65535 (the line is not shown)",
		"notes.txt:1: not an endpoint", "sub.txt: not a regular file"} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning %q in:\n%s", want, all)
		}
	}
	if len(warnings) != 6 || strings.Contains(all, secret) || strings.Contains(all, "rotate") {
		t.Errorf("%d warnings, or one quotes a file:\n%s", len(warnings), all)
	}
	if _, again, _, _ := LoadEndpoints(dir); !bytes.Equal(again, seen) {
		t.Error("reading the same directory again is seen as a change")
	}
	writeList(t, filepath.Join(dir, "node5.txt"), "node5:30000")
	if ts, again, _, _ := LoadEndpoints(dir); bytes.Equal(again, seen) || !strings.Contains(urls(ts), "http://node5:30000") {
		t.Errorf("a node added beside the bad files is not read: %s", urls(ts))
	}
}

// --endpoints-file FILE that is not a list of endpoints: a FIFO (no
// writer; refused, not waited on), a link to /dev/zero (refused, not
// read), a file past the bound, a link to a one-line token file (refused
// by its line, the token not quoted).
func TestLoadEndpointsFileRefusals(t *testing.T) {
	dir := t.TempDir()
	const secret = "hf_S3cr3tT0k3nLine"
	token := filepath.Join(dir, "token")
	mustWriteFile(t, token, secret+"\n")
	link := filepath.Join(dir, "endpoints.txt")
	if err := os.Symlink(token, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.txt")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.txt")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.txt")
	mustWriteFile(t, huge, strings.Repeat("h:1\n", maxEndpointsFile/4+1))
	for _, tt := range []struct{ path, want string }{
		{link, link + ":1: not an endpoint: missing port"},
		{fifo, fifo + ": not a regular file"},
		{zero, zero + ": not a regular file"},
		{huge, huge + ": 1048580 bytes, more than the 1048576 read from such a file"},
	} {
		done := make(chan error, 1)
		go func() {
			_, _, _, err := LoadEndpoints(tt.path)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), secret) {
				t.Errorf("%s: %v, want %q and no quote of the file", tt.path, err, tt.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: LoadEndpoints did not return within 10s", tt.path)
		}
		f := ServerFlags{EndpointsFile: tt.path}
		if _, err := f.Targets(); err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), secret) {
			t.Errorf("--endpoints-file %s: %v", tt.path, err)
		}
	}
}

func mustWriteFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
