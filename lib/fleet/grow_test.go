package fleet

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
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
// being written beside them, which has another name, is not), and a
// mistake names its file and line.
func TestLoadEndpointsDirectory(t *testing.T) {
	dir := t.TempDir()
	writeList(t, filepath.Join(dir, "node2.txt"), "# node2", "node2:30000-30001")
	writeList(t, filepath.Join(dir, "node1.txt"), "node1:30000")
	writeList(t, filepath.Join(dir, "node3.txt.tmp-1234"), "half-written:1")
	ts, seen, err := LoadEndpoints(dir)
	if err != nil || urls(ts) != "http://node1:30000 http://node2:30000 http://node2:30001" || len(seen) == 0 {
		t.Fatalf("%s, %v", urls(ts), err)
	}
	empty := t.TempDir()
	if ts, seen, err := LoadEndpoints(empty); err != nil || len(ts) != 0 || seen == nil {
		t.Errorf("an empty directory: %v %q %v", ts, seen, err)
	}
	writeList(t, filepath.Join(dir, "node4.txt"), "node4:30000", "node4:x")
	if _, _, err := LoadEndpoints(dir); err == nil || !strings.Contains(err.Error(), "node4.txt:2") {
		t.Errorf("a bad line: %v", err)
	}
}
