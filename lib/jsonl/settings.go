package jsonl

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"

	"tokenmill/lib/record"
)

// ReadSettings adds the lines of the settings sidecar at path (infer's,
// see record.Settings) to x, and returns how many lines it skipped: lines
// that are not settings lines, and a last line without its newline (an
// interrupted write). A missing file holds none; found tells whether
// there was one.
func ReadSettings(path string, x *record.SettingsIndex) (found bool, skipped int, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return false, 0, err // a FIFO or device is not read: it would be drained
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if t := bytes.TrimSpace(line); len(t) > 0 {
				if l, perr := record.ParseSettingsLine(t); perr == nil {
					x.Add(l)
				} else {
					skipped++
				}
			}
		} else if len(bytes.TrimSpace(line)) > 0 {
			skipped++
		}
		if err == io.EOF {
			return true, skipped, nil
		}
		if err != nil {
			return true, skipped, err
		}
	}
}

// ReadSettingsBeside adds to x the settings sidecars beside the named
// files (record.SettingsPath of each regular file among them), and
// returns the files beside which it found one.
func ReadSettingsBeside(names []string, x *record.SettingsIndex) ([]string, error) {
	var found []string
	for _, name := range names {
		if name == "" || name == "-" {
			continue
		}
		if st, err := os.Stat(name); err != nil || !st.Mode().IsRegular() {
			continue
		}
		ok, _, err := ReadSettings(record.SettingsPath(name), x)
		if err != nil {
			return found, err
		}
		if ok {
			found = append(found, name)
		}
	}
	return found, nil
}
