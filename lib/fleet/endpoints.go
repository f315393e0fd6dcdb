package fleet

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"
)

// Target is one server to send requests to, as written on the command line
// or in an endpoints file.
type Target struct {
	// URL is the base every API path is appended to, e.g.
	// "http://127.0.0.1:30000" or "https://gpu2.example:8443/sglang". It is
	// the endpoint's name in every message, record and metric, so a
	// password written in the URL shows as *** ("http://admin:***@h:1").
	URL  string
	Addr string // host:port to dial
	TLS  bool
	Path string // prefix before the API paths, "" or "/something"
	// User and Password are credentials written in the URL
	// (http://user:password@host:port), sent as HTTP basic auth.
	User     string
	Password Secret
	// Trimmed is the API path the URL as given ended with, dropped to make
	// it the base ("/v1/chat/completions"; "" none).
	Trimmed string
}

// Secret is a password: it prints as *** whatever the verb, so a Target
// in a message, a %+v or a panic never shows it.
type Secret string

func (Secret) String() string   { return "***" }
func (Secret) GoString() string { return `"***"` }

// Authorization is the Authorization header for requests to t: basic auth
// with the URL's credentials when it has them (they name this server
// alone), else apiKey as a bearer token; "" for none.
func (t Target) Authorization(apiKey string) string {
	if t.User != "" || t.Password != "" {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(t.User+":"+string(t.Password)))
	}
	if apiKey != "" {
		return "Bearer " + apiKey
	}
	return ""
}

// Redact hides the password of every URL with credentials in s (a list of
// endpoints as given, or a message quoting one): "http://admin:***@h:1".
func Redact(s string) string {
	var b strings.Builder
	for {
		at := strings.IndexByte(s, '@')
		if at < 0 {
			b.WriteString(s)
			return b.String()
		}
		// The user info runs back from the @ to the start of the authority:
		// after "://", a comma, a space or a quote.
		start := strings.LastIndexAny(s[:at], ", \t\"'(")
		if i := strings.LastIndex(s[:at], "://"); i >= 0 && i+3 > start {
			start = i + 2
		}
		info := s[start+1 : at]
		if colon := strings.IndexByte(info, ':'); colon >= 0 && !strings.ContainsAny(info, "/?#") {
			b.WriteString(s[:start+1+colon+1])
			b.WriteString("***@")
		} else {
			b.WriteString(s[:at+1])
		}
		s = s[at+1:]
	}
}

// maxRange bounds one port range, so a typo such as 30000-39999 is caught
// instead of opening ten thousand endpoints.
const maxRange = 256

// ParseEndpoints reads a comma-separated list of endpoints. Each is
// host:port, host:first-last (a port range), or a URL with http:// or
// https:// (which may carry a port range and a path prefix). http:// is
// the default. A path ending in /v1, /v1/chat/completions or
// /v1/completions is taken as its base (Target.Trimmed says what was
// dropped), since infer adds the API paths itself.
func ParseEndpoints(list string) ([]Target, error) {
	var out []Target
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		ts, err := parseEndpoint(item)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	return out, nil
}

// ReadEndpointsFile reads endpoints one (or a comma-separated list) per
// line; blank lines and # comments are skipped. A line that is not a list
// of endpoints is refused by its file, line and what is wrong, quoting
// nothing of it: a file named by mistake (a link to a token file, a
// notes file in a shared directory) may hold a secret on any line.
func ReadEndpointsFile(r io.Reader, name string) ([]Target, error) {
	var out []Target
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		ts, err := ParseEndpoints(text)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: not an endpoint: %s (the line is not shown)", name, line, bareReason(err))
		}
		out = append(out, ts...)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: a line longer than %d bytes: not a list of endpoints", name, line+1, bufio.MaxScanTokenSize)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// endpointError is an endpoint that does not parse: the endpoint as
// given (its password hidden) and why.
type endpointError struct {
	shown string
	err   error
}

func (e *endpointError) Error() string { return fmt.Sprintf("endpoint %q: %v", e.shown, e.err) }
func (e *endpointError) Unwrap() error { return e.err }

// quotingError is a reason that quotes a piece of the endpoint
// (Error), with the same reason in words alone (bare).
type quotingError struct{ msg, bare string }

func (e *quotingError) Error() string { return e.msg }

// bareReason is why an endpoint did not parse, without any of its text.
func bareReason(err error) string {
	var q *quotingError
	if errors.As(err, &q) {
		return q.bare
	}
	var ee *endpointError
	if errors.As(err, &ee) {
		return ee.err.Error()
	}
	return "it does not parse"
}

// CheckTargets refuses an empty list and an endpoint listed twice (which
// would silently double its share of the work).
func CheckTargets(ts []Target) error {
	if len(ts) == 0 {
		return fmt.Errorf("no endpoints given (--endpoints host:port,... or --endpoints-file)")
	}
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		key := targetKey(t)
		if seen[key] {
			return fmt.Errorf("endpoint %s is listed twice", t.URL)
		}
		seen[key] = true
	}
	return nil
}

func parseEndpoint(raw string) ([]Target, error) {
	ts, err := parseOne(raw)
	if err != nil {
		// Every message quotes the endpoint without its password.
		return nil, &endpointError{shown: Redact(raw), err: err}
	}
	return ts, nil
}

func parseOne(raw string) ([]Target, error) {
	scheme, rest := "http", raw
	explicit := false
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest, explicit = strings.ToLower(raw[:i]), raw[i+3:], true
		if scheme != "http" && scheme != "https" {
			return nil, errors.New("scheme must be http or https")
		}
	}
	user, password, rest, err := splitUserInfo(rest)
	if err != nil {
		return nil, err
	}
	path := ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		if rest[i] != '/' {
			return nil, errors.New("a query or fragment is not allowed")
		}
		rest, path = rest[:i], rest[i:]
	}
	path = strings.TrimRight(path, "/")
	trimmed := ""
	for _, api := range apiSuffixes {
		if strings.HasSuffix(path, api) {
			path, trimmed = strings.TrimSuffix(path, api), api
			break
		}
	}
	if strings.ContainsAny(path, " \t") {
		return nil, errors.New("white space in the path")
	}
	// The endpoint's name is printed in every message and the live display.
	if strings.ContainsFunc(raw, unicode.IsControl) {
		return nil, errors.New("a control character")
	}
	host, ports, err := splitHostPorts(rest)
	if err != nil {
		return nil, err
	}
	if ports == "" {
		if !explicit {
			return nil, errors.New("missing port (host:port, or a URL with http:// or https://)")
		}
		ports = "80"
		if scheme == "https" {
			ports = "443"
		}
	}
	first, last, err := parsePorts(ports)
	if err != nil {
		return nil, err
	}
	shown := ""
	switch {
	case password != "":
		shown = url.PathEscape(user) + ":***@"
	case user != "":
		shown = url.PathEscape(user) + "@"
	}
	out := make([]Target, 0, last-first+1)
	for p := first; p <= last; p++ {
		addr := net.JoinHostPort(host, strconv.Itoa(p))
		out = append(out, Target{URL: scheme + "://" + shown + addr + path, Addr: addr, TLS: scheme == "https", Path: path,
			User: user, Password: Secret(password), Trimmed: trimmed})
	}
	return out, nil
}

// apiSuffixes are the API paths a URL pasted from a client's
// configuration may end with, the longest first.
var apiSuffixes = []string{"/v1/chat/completions", "/v1/completions", "/v1"}

// splitUserInfo takes "user:password@" off the front of an authority
// (percent-encoded, as in any URL).
func splitUserInfo(rest string) (user, password, host string, err error) {
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return "", "", rest, nil
	}
	info := rest[:at]
	u, p, hasPassword := strings.Cut(info, ":")
	if user, err = url.PathUnescape(u); err != nil {
		return "", "", "", fmt.Errorf("bad user name in the URL")
	}
	if password, err = url.PathUnescape(p); err != nil {
		return "", "", "", fmt.Errorf("bad password in the URL")
	}
	if user == "" && (!hasPassword || password == "") {
		return "", "", "", fmt.Errorf("empty user info before @")
	}
	return user, password, rest[at+1:], nil
}

// splitHostPorts splits "host:ports", "[v6]:ports", "host" or "[v6]".
func splitHostPorts(s string) (host, ports string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", fmt.Errorf("unclosed [ in IPv6 address")
		}
		host, rest := s[1:end], s[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return "", "", fmt.Errorf("expected :port after ]")
			}
			ports = rest[1:]
		}
		if net.ParseIP(host) == nil {
			return "", "", &quotingError{fmt.Sprintf("%q is not an IPv6 address", host), "not an IPv6 address in the brackets"}
		}
		return host, ports, nil
	}
	host = s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, ports = s[:i], s[i+1:]
		if strings.IndexByte(host, ':') >= 0 {
			return "", "", fmt.Errorf("write an IPv6 address in brackets: [addr]:port")
		}
		if ports == "" {
			return "", "", fmt.Errorf("empty port")
		}
	}
	if host == "" {
		return "", "", fmt.Errorf("missing host")
	}
	for _, c := range host {
		if !(c == '.' || c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return "", "", &quotingError{fmt.Sprintf("bad character %q in host name", c), "a character that is not allowed in a host name"}
		}
	}
	return host, ports, nil
}

func parsePorts(s string) (first, last int, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if first, err = parsePort(a); err != nil {
		return 0, 0, err
	}
	last = first
	if isRange {
		if last, err = parsePort(b); err != nil {
			return 0, 0, err
		}
		if last < first {
			return 0, 0, &quotingError{fmt.Sprintf("port range %s runs backwards", s), "a port range that runs backwards"}
		}
		if last-first+1 > maxRange {
			return 0, 0, &quotingError{fmt.Sprintf("port range %s has more than %d ports", s, maxRange), fmt.Sprintf("a port range of more than %d ports", maxRange)}
		}
	}
	return first, last, nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 || strings.TrimSpace(s) != s {
		return 0, &quotingError{fmt.Sprintf("bad port %q", s), "a port that is not a number from 1 to 65535"}
	}
	return n, nil
}
