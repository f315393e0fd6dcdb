package shard

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// pattern is an output name with one shard-number placeholder: {i} for the
// plain number, {i:0W} for the number zero-padded to W digits.
type pattern struct {
	dir    string // directory part, without the placeholder
	prefix string // file name before the placeholder
	suffix string // file name after it
	width  int
}

func parsePattern(s string) (pattern, error) {
	dir, base := filepath.Split(s)
	if strings.Contains(dir, "{i") {
		return pattern{}, fmt.Errorf("-o %q: the {i} placeholder must be in the file name, not the directory", s)
	}
	start := strings.Index(base, "{i")
	if start < 0 {
		return pattern{}, fmt.Errorf("-o %q: the name needs a {i} placeholder for the shard number, e.g. 'shards/part-{i}.jsonl.zst'", s)
	}
	end := strings.IndexByte(base[start:], '}')
	if end < 0 {
		return pattern{}, fmt.Errorf("-o %q: unterminated placeholder", s)
	}
	end += start
	p := pattern{dir: dir, prefix: base[:start], suffix: base[end+1:]}
	if strings.Contains(p.suffix, "{i") {
		return pattern{}, fmt.Errorf("-o %q: only one {i} placeholder is allowed", s)
	}
	switch spec := base[start+2 : end]; {
	case spec == "":
	case len(spec) >= 3 && spec[0] == ':' && spec[1] == '0':
		w, err := strconv.Atoi(spec[2:])
		if err != nil || w < 1 || w > 9 {
			return pattern{}, fmt.Errorf("-o %q: padding must be {i:0W} with W from 1 to 9", s)
		}
		p.width = w
	default:
		return pattern{}, fmt.Errorf("-o %q: unknown placeholder {i%s}; use {i} or {i:03}", s, spec)
	}
	return p, nil
}

// name is the file name of shard i.
func (p pattern) name(i int) string {
	return fmt.Sprintf("%s%s%0*d%s", p.dir, p.prefix, p.width, i, p.suffix)
}

// existing lists the shard numbers whose files are already present, so a
// run can refuse to mix its shards with an earlier run's.
func (p pattern) existing() (map[int]string, error) {
	dir := p.dir
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	found := map[int]string{}
	for _, e := range entries {
		if i, ok := p.index(e.Name()); ok {
			found[i] = p.dir + e.Name()
		}
	}
	return found, nil
}

// index reads the shard number back from a file name (without directory),
// padded or not.
func (p pattern) index(name string) (int, bool) {
	if len(name) <= len(p.prefix)+len(p.suffix) || !strings.HasPrefix(name, p.prefix) || !strings.HasSuffix(name, p.suffix) {
		return 0, false
	}
	digits := name[len(p.prefix) : len(name)-len(p.suffix)]
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(digits)
	return i, err == nil
}
