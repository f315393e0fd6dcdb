package ledger

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"

	"github.com/zeebo/xxh3"

	"tokenmill/lib/cli"
	"tokenmill/lib/conversation"
	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// Refusals are the refusals (a 4xx, not retriable) the errors file of the
// run being continued records, by (id, sample): a resume sends those
// prompts again (a server may have changed), and one refused again the
// same way is the prompt's own refusal, seen before: it is written to the
// errors file again and never taken for a systematic refusal of the run
// (which would stop the resume, and every resume after it, on the same
// prompts).
type Refusals map[xxh3.Uint128]uint64

func (k Refusals) add(id string, sample, status int, message string) {
	k[conversation.Key(id, sample)] = refusalHash(status, message)
}

func refusalHash(status int, message string) uint64 {
	return xxh3.HashString(strconv.Itoa(status) + "\x00" + message)
}

// Again reports whether (id, sample) was refused before with this status
// and message.
func (k Refusals) Again(id string, sample, status int, message string) bool {
	h, ok := k[conversation.Key(id, sample)]
	return ok && h == refusalHash(status, message)
}

// ReadErrors refuses an --errors file that is not infer's own: the run
// rewrites its errors file, so every line of an existing one must be an
// error record (a prompt record with an "error" object), or the file
// empty. A file that is anything else is never touched. With resume (a
// run that continues its output), it returns the refusals the file
// records.
func ReadErrors(path string, resume bool) (Refusals, error) {
	if path == "" {
		return nil, nil
	}
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) || err == nil && (!st.Mode().IsRegular() || st.Size() == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var known Refusals
	if resume {
		known = Refusals{}
	}
	rd := jsonl.NewReader(context.Background(), nil, []string{path}, nil, jsonl.Options{}) // a regular file: no wait to end or explain
	defer rd.Close()
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return known, nil
		}
		var e struct {
			ID    record.ID `json:"id"`
			Error *struct {
				Message   *string `json:"message"`
				Status    int     `json:"status"`
				Retriable bool    `json:"retriable"`
				Sample    int     `json:"sample"`
			} `json:"error"`
		}
		if err == nil {
			err = record.Decode(rec.Data, &e)
		}
		if err == nil && (e.Error == nil || e.Error.Message == nil) {
			err = errors.New("not an error record")
		}
		if err != nil {
			line := rec.Line
			var ie *jsonl.InputError
			if errors.As(err, &ie) {
				line = ie.Line
			}
			return nil, cli.Usagef("--errors %q is not an infer errors file (line %d: %v), and infer rewrites its errors file: name another --errors", path, line, err)
		}
		if known != nil && !e.Error.Retriable && e.Error.Status >= 400 && e.Error.Status < 500 {
			known.add(e.ID.Text, e.Error.Sample, e.Error.Status, *e.Error.Message)
		}
	}
}
