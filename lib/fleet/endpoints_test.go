package fleet

import (
	"fmt"
	"strings"
	"testing"
)

func urls(ts []Target) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.URL)
	}
	return strings.Join(s, " ")
}

func TestParseEndpoints(t *testing.T) {
	tests := []struct {
		in   string
		want string
		err  string
	}{
		{"127.0.0.1:30000", "http://127.0.0.1:30000", ""},
		{"127.0.0.1:30000-30002,gpu2:30000", "http://127.0.0.1:30000 http://127.0.0.1:30001 http://127.0.0.1:30002 http://gpu2:30000", ""},
		{" a:1 , ,b:2 ", "http://a:1 http://b:2", ""},
		{"https://api.example.com", "https://api.example.com:443", ""},
		{"http://gpu3", "http://gpu3:80", ""},
		{"HTTPS://h:8443/sglang/", "https://h:8443/sglang", ""},
		{"http://h:8000/v1", "http://h:8000", ""},
		{"http://h:8000/proxy/v1/", "http://h:8000/proxy", ""},
		{"http://h:30000-30001/p", "http://h:30000/p http://h:30001/p", ""},
		{"[::1]:30000-30001", "http://[::1]:30000 http://[::1]:30001", ""},
		{"", "", ""},
		{"gpu2", "", "missing port"},
		{"ftp://h:1", "", "scheme"},
		{"h:0", "", "bad port"},
		{"h:70000", "", "bad port"},
		{"h:x", "", "bad port"},
		{"h:", "", "empty port"},
		{":30000", "", "missing host"},
		{"h:30005-30000", "", "backwards"},
		{"h:1-1000", "", "more than"},
		{"::1:30000", "", "brackets"},
		{"[::1:30000", "", "unclosed"},
		{"[zz]:1", "", "IPv6"},
		{"h:1?x=1", "", "query"},
		{"bad host:1", "", "bad character"},
		{"http://h:1/a\x1b]0;x\x07", "", "a control character"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseEndpoints(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if urls(got) != tt.want {
				t.Errorf("got %q, want %q", urls(got), tt.want)
			}
		})
	}
}

// Credentials in an endpoint's URL are sent as basic auth and never shown:
// the URL, every message and a %+v of the target carry *** instead.
func TestEndpointCredentials(t *testing.T) {
	ts, err := ParseEndpoints("http://admin:s%3Acr%40t@gpu1:8000-8001/p,https://bob@h:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := urls(ts); got != "http://admin:***@gpu1:8000/p http://admin:***@gpu1:8001/p https://bob@h:1" {
		t.Errorf("URLs %q", got)
	}
	if ts[0].User != "admin" || ts[0].Password != "s:cr@t" || ts[0].Addr != "gpu1:8000" || ts[0].Path != "/p" {
		t.Errorf("target %#v", ts[0])
	}
	if auth := ts[0].Authorization("key"); auth != "Basic YWRtaW46czpjckB0" { // admin:s:cr@t
		t.Errorf("authorization %q", auth)
	}
	if auth := ts[2].Authorization(""); auth != "Basic Ym9iOg==" {
		t.Errorf("a user alone: %q", auth)
	}
	if auth := (Target{}).Authorization("key"); auth != "Bearer key" {
		t.Errorf("no credentials: %q", auth)
	}
	for _, shown := range []string{fmt.Sprintf("%v %+v %#v %s", ts[0], ts[0], ts[0], ts[0].Password), fmt.Sprint([]Target{ts[0]})} {
		if strings.Contains(shown, "cr@t") || strings.Contains(shown, "s:cr") {
			t.Errorf("the password shows: %s", shown)
		}
	}
	// A mistake in such an endpoint is reported without the password.
	for _, bad := range []string{"http://admin:SECRET@gpu1:x", "http://admin:SECRET@", "admin:SECRET@bad host:1", "ftp://admin:SECRET@h:1", "http://admin:SECRET@h:1?x"} {
		_, err := ParseEndpoints(bad)
		if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), "admin:***@") {
			t.Errorf("%s: %v", Redact(bad), err)
		}
	}
	if got := Redact(`-e "http://a:p1@h:1,https://b:p2@g:2" and x@y`); got != `-e "http://a:***@h:1,https://b:***@g:2" and x@y` {
		t.Errorf("Redact: %s", got)
	}
	// Two names of one server are one endpoint.
	same, _ := ParseEndpoints("http://a:1@h:1,http://b:2@h:1")
	if err := CheckTargets(same); err == nil {
		t.Error("the same server under two credentials is accepted twice")
	}
}

func TestTargetFields(t *testing.T) {
	ts, err := ParseEndpoints("https://h:8443/p")
	if err != nil {
		t.Fatal(err)
	}
	want := Target{URL: "https://h:8443/p", Addr: "h:8443", TLS: true, Path: "/p"}
	if ts[0] != want {
		t.Errorf("got %+v, want %+v", ts[0], want)
	}
}

func TestReadEndpointsFile(t *testing.T) {
	in := "# the fleet\n127.0.0.1:30000-30001  # two GPUs\n\ngpu2:30000,gpu3:30000\n"
	ts, err := ReadEndpointsFile(strings.NewReader(in), "fleet.txt")
	if err != nil {
		t.Fatal(err)
	}
	if got := urls(ts); got != "http://127.0.0.1:30000 http://127.0.0.1:30001 http://gpu2:30000 http://gpu3:30000" {
		t.Errorf("got %q", got)
	}
	_, err = ReadEndpointsFile(strings.NewReader("a:1\nb\n"), "fleet.txt")
	if err == nil || !strings.Contains(err.Error(), "fleet.txt:2") {
		t.Errorf("error %v, want it to name fleet.txt:2", err)
	}
}

func TestCheckTargets(t *testing.T) {
	ts, _ := ParseEndpoints("a:1,a:1")
	if err := CheckTargets(ts); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate: %v", err)
	}
	if err := CheckTargets(nil); err == nil {
		t.Error("empty list accepted")
	}
}

func FuzzParseEndpoints(f *testing.F) {
	for _, s := range []string{"127.0.0.1:30000-30007,gpu2:30000", "https://h:8443/sglang/v1", "[::1]:1-2", "h:", "a:1,,b:2", "http://u:p@h:1", "u@h:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseEndpoints(s)
		if err != nil {
			return
		}
		for _, tg := range ts {
			if !strings.HasPrefix(tg.URL, "http://") && !strings.HasPrefix(tg.URL, "https://") {
				t.Fatalf("%q: URL %q has no scheme", s, tg.URL)
			}
			if !strings.Contains(tg.URL, tg.Addr) || tg.Addr == "" {
				t.Fatalf("%q: addr %q not in URL %q", s, tg.Addr, tg.URL)
			}
			if tg.Password != "" && !strings.Contains(tg.URL, ":***@") {
				t.Fatalf("%q: URL %q does not hide the password", s, tg.URL)
			}
			if tg.Password != "" {
				continue // the URL shows *** instead: it does not parse back to the same target
			}
			again, err := ParseEndpoints(tg.URL)
			if err != nil || len(again) != 1 || again[0] != tg {
				t.Fatalf("%q: %q does not parse back to itself: %v %+v", s, tg.URL, err, again)
			}
		}
	})
}

// FuzzReadEndpointsFile: an accepted --endpoints-file lists URLs that,
// written one per line, read back as the same endpoints.
func FuzzReadEndpointsFile(f *testing.F) {
	for _, s := range []string{"127.0.0.1:30000-30007\n# gpu2\ngpu2:30000, gpu2:30001\n", "https://h:8443/sglang/v1 # tls\n", "\n\n#\n", "h:1-\n", "a:1\r\nb:2\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ReadEndpointsFile(strings.NewReader(s), "fuzz")
		if err != nil {
			return
		}
		for _, tg := range ts {
			if tg.Password != "" {
				return // shown as ***: not written back
			}
		}
		var urls []string
		for _, tg := range ts {
			urls = append(urls, tg.URL)
		}
		again, err := ReadEndpointsFile(strings.NewReader(strings.Join(urls, "\n")), "again")
		if err != nil || len(again) != len(ts) {
			t.Fatalf("%q gave %q, which reads back as %v, %v", s, urls, again, err)
		}
		for i := range ts {
			if again[i] != ts[i] {
				t.Fatalf("%q: %+v reads back as %+v", s, ts[i], again[i])
			}
		}
	})
}
