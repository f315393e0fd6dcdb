package metrics

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// What collect lists is what a scrape reads, under the prefix, as it is
// at each scrape; after stop nothing is served.
func TestServe(t *testing.T) {
	var n atomic.Int64
	stop, addr, err := Serve("127.0.0.1:0", "test_", func(s *Scrape) {
		s.Counter("things_total", "Things.", n.Load(), "kind", "a")
		s.Counter("things_total", "Things.", 2*n.Load(), "kind", "b")
		s.Gauge("level", "A level.", 0.5)
	})
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		return string(b)
	}
	for _, v := range []int64{0, 7} {
		n.Store(v)
		body := scrape()
		for _, want := range []string{
			"# HELP test_things_total Things.\n# TYPE test_things_total counter\n",
			`test_things_total{kind="a"} ` + strconv.FormatInt(v, 10) + "\n",
			`test_things_total{kind="b"} ` + strconv.FormatInt(2*v, 10) + "\n",
			"# TYPE test_level gauge\ntest_level 0.5\n",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("scrape lacks %q:\n%s", want, body)
			}
		}
	}
	stop()
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		resp.Body.Close()
		t.Error("served after stop")
	}
}
