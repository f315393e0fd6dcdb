package merge

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/segmentio/encoding/json"
	"github.com/zeebo/xxh3"

	"tokenmill/lib/jsonl"
	"tokenmill/lib/record"
)

// Ranks order the records of one (id, sample): the higher rank wins, and
// among equal ranks the record read last. A regenerated conversation ranks
// by its worst turn, and a truncated one below every complete one. One
// that a tool call nobody answered ended (tool_unpaired, tool_rounds) ranks,
// unless --keep-truncated, by what is left of it once cut to its last
// complete exchange (parsed.cutRank).
const (
	rankNone        uint8 = iota // no answer: a prompt record only
	rankError                    // an error record
	rankDropped                  // an answer filter rejected, read without its reject field
	rankRejected                 // filter's reject record of an answer (it carries the reason)
	rankEmpty                    // an empty answer, with --drop-empty
	rankAbort                    // finish_reason abort, or one merge does not know (of any turn)
	rankTruncLength              // a truncated conversation with a turn cut at the token limit
	rankTruncStop                // a truncated conversation whose turns all finished stop
	rankCutLength                // a tool-truncated conversation cut to its last complete exchange, a turn of it cut at the token limit
	rankCutStop                  // the same, its turns all finished stop (or in tool calls)
	rankLength                   // finish_reason length: cut at the token limit (of any turn)
	rankStop                     // finish_reason stop or tool_calls: a complete answer (of every turn)
)

// Reject reasons of merge, beside the shared ones in jsonl.
const (
	ReasonNoID           = "no_id"
	ReasonBadID          = "bad_id"
	ReasonBadRecord      = "bad_record"
	ReasonNotAGeneration = "not_a_generation"
	ReasonNoPrompt       = "no_prompt"
)

// maxSample bounds sample numbers (record.MaxSample).
const maxSample = record.MaxSample

// rejection is why a record cannot be merged.
type rejection struct {
	reason, detail string
}

func reject(reason, format string, args ...any) *rejection {
	return &rejection{reason, fmt.Sprintf(format, args...)}
}

// parsed is what merge needs of a record: its key and how good it is.
type parsed struct {
	id     record.ID
	sample int // the answer's sample (output.sample, error.sample), else the top-level one
	rank   uint8
	// topSample tells a prompt record expanded per sample (it carries a
	// top-level "sample") from one that stands for all its samples.
	topSample bool
	// digest identifies the answer: the xxh3 hash of its raw output
	// value, which filter's reject record keeps byte for byte.
	digest uint64
	// output is the raw output value.
	output []byte
	// conversation marks a regenerated conversation (output.messages).
	conversation bool
	// toolCut marks a conversation that a tool call nobody answered ended
	// (tool_unpaired, tool_rounds): unless --keep-truncated it counts as
	// what is left once cut to its last complete exchange, cutRank
	// (rankNone when nothing is left), leaving out the cut turns and the
	// tool calls they made.
	toolCut bool
	cutRank uint8
	cut     cutCounts
	// settings and family are output.settings and output.settings_family
	// (raw JSON values, aliasing the record): see settings.go.
	settings, family []byte
}

// cutCounts is what cutting a conversation to its last complete exchange
// leaves out: regenerated assistant turns, and the tool calls they made.
type cutCounts struct {
	turns, calls uint32
}

// parseRecord reads the key and rank of a prompt, generation or error
// record (as record.Generation.Kind tells them apart) without decoding its
// texts: the object is validated, then only the few fields merge needs are
// looked at. A generation record that carries a reject field is filter's
// record of an answer it found unfit: rankRejected.
func parseRecord(data []byte) (parsed, *rejection) {
	var p parsed
	// Field names match exactly, as the record contract spells them and
	// every stage reads them; a repeated field's last value wins. One
	// checking scan (record.Object) finds them in the common line; a line
	// it leaves (malformed, an escaped key) goes through the checks that
	// say why.
	var f topFields
	if !f.scan(data) {
		if !json.Valid(data) {
			return p, reject(jsonl.ReasonMalformedJSON, "not valid JSON")
		}
		if b := bytes.TrimSpace(data); len(b) == 0 || b[0] != '{' {
			return p, reject(jsonl.ReasonNotObject, "a record must be a JSON object")
		}
		f = topFields{}
		if err := record.EachField(data, func(key string, value []byte) error {
			f.set(key, value)
			return nil
		}); err != nil {
			return p, reject(jsonl.ReasonMalformedJSON, "%v", err)
		}
	}
	idRaw, sampleRaw, outRaw, errRaw, rejRaw := f.id, f.sample, f.output, f.err, f.reject
	var err error
	if idRaw != nil {
		if err := p.id.UnmarshalJSON(idRaw); err != nil {
			return p, reject(ReasonBadID, "%v", err)
		}
	}
	if p.id.IsZero() {
		return p, reject(ReasonNoID, "the record has no id to merge by")
	}
	if isNull(sampleRaw) {
		sampleRaw = nil
	}
	if p.sample, err = sampleValue(sampleRaw); err != nil {
		return p, reject(ReasonBadRecord, "sample: %v", err)
	}
	p.topSample = sampleRaw != nil
	switch {
	case !isNull(outRaw):
		var a answerView
		if a, err = answerFields(outRaw, true); err != nil {
			return p, reject(ReasonBadRecord, "output: %v", err)
		}
		p.sample, p.rank = a.sample, finishRank(a.finish)
		if p.conversation = isConversation(a.messages); p.conversation {
			if err = p.rankConversation(a.messages, a.turns, a.truncated); err != nil {
				return p, reject(ReasonBadRecord, "output.%v", err)
			}
		}
		p.output, p.digest = outRaw, xxh3.Hash(outRaw)
		p.settings, p.family = a.settings, a.family
		if !isNull(rejRaw) {
			p.rank = rankRejected
		}
	case !isNull(errRaw):
		var a answerView
		if a, err = answerFields(errRaw, false); err != nil {
			return p, reject(ReasonBadRecord, "error: %v", err)
		}
		p.sample, p.rank = a.sample, rankError
	}
	return p, nil
}

// topFields are the raw top-level values merge reads.
type topFields struct {
	id, sample, output, err, reject []byte
}

func (f *topFields) set(key string, value []byte) {
	switch key {
	case "id":
		f.id = value
	case "sample":
		f.sample = value
	case "output":
		f.output = value
	case "error":
		f.err = value
	case "reject":
		f.reject = value
	}
}

// scan reads the fields of a line record.Object checks whole, and
// reports whether it could.
func (f *topFields) scan(data []byte) bool {
	var o record.Object
	o.Scan(data)
	for key, v, more := o.Next(); more; key, v, more = o.Next() {
		switch string(key) {
		case "id", "sample", "output", "error", "reject":
			f.set(string(key), v)
		}
	}
	return o.Valid()
}

func isNull(v []byte) bool { return v == nil || string(v) == "null" }

// answerView is what merge reads of an output or error object: raw
// values, but for the sample.
type answerView struct {
	sample                             int
	finish, messages, turns, truncated []byte
	settings, family                   []byte
}

// answerFields reads the sample of an output or error object, and of an
// output its finish_reason and a conversation's messages, turns and
// truncated.
func answerFields(obj []byte, output bool) (answerView, error) {
	var a answerView
	if obj[0] != '{' {
		return a, fmt.Errorf("must be an object, not %.20s", obj)
	}
	var sampleRaw []byte
	err := record.EachField(obj, func(key string, value []byte) error {
		switch {
		case key == "sample":
			sampleRaw = value
		case !output:
		case key == "finish_reason":
			a.finish = value
		case key == "messages":
			a.messages = value
		case key == "turns":
			a.turns = value
		case key == "truncated":
			a.truncated = value
		case key == "settings":
			a.settings = value
		case key == "settings_family":
			a.family = value
		}
		return nil
	})
	if err != nil {
		return a, err
	}
	if isNull(sampleRaw) {
		sampleRaw = nil
	}
	a.sample, err = sampleValue(sampleRaw)
	return a, err
}

// isConversation tells a regenerated conversation by its output.messages,
// as filter and stats tell it (lib/quality).
func isConversation(messages []byte) bool {
	return !isNull(messages) && string(messages) != "[]"
}

// convTurn is what ranking reads of one entry of output.turns.
type convTurn struct {
	Message      *int            `json:"message"`
	FinishReason json.RawMessage `json:"finish_reason"`
}

// convRole is what ranking reads of one message of output.messages: its
// role and how many tool calls it makes.
type convRole struct {
	Role      string     `json:"role"`
	ToolCalls []struct{} `json:"tool_calls"`
}

// convTruncation is what ranking reads of output.truncated.
type convTruncation struct {
	Reason string `json:"reason"`
}

// rankConversation ranks a regenerated conversation by its worst turn
// (abort, then length, then stop), a truncated one below every complete
// one. One with no regenerated turn has no answer to train on: abort. The
// turns must point at assistant messages, as filter requires. A
// conversation a tool call ended also gets the rank of what is left of it
// once cut to its last complete exchange.
func (p *parsed) rankConversation(messages, turns, truncated []byte) error {
	var roles []convRole
	if err := record.Decode(messages, &roles); err != nil {
		return fmt.Errorf("messages: %v", err)
	}
	var ts []convTurn
	if !isNull(turns) {
		if err := record.Decode(turns, &ts); err != nil {
			return fmt.Errorf("turns: %v", err)
		}
	}
	cut := !isNull(truncated)
	if cut && truncated[0] != '{' {
		return fmt.Errorf("truncated must be an object, not %.20s", truncated)
	}
	var why convTruncation
	if cut {
		if err := record.Decode(truncated, &why); err != nil {
			return fmt.Errorf("truncated: %v", err)
		}
	}
	for i, t := range ts {
		if t.Message == nil || *t.Message < 0 || *t.Message >= len(roles) {
			return fmt.Errorf("turns[%d].message is not an index into output.messages", i)
		}
		if role := roles[*t.Message].Role; role != "assistant" {
			return fmt.Errorf("turns[%d] points at a %q message, not an assistant one", i, role)
		}
	}
	calls := func(i int) int { return len(roles[*ts[i].Message].ToolCalls) }
	p.rank = turnsRank(ts, cut, rankTruncStop, rankTruncLength)
	if p.toolCut = cut && isToolTruncation(why.Reason); p.toolCut {
		k := completeTurns(len(ts), calls)
		p.cutRank = rankNone
		if k > 0 {
			p.cutRank = turnsRank(ts[:k], true, rankCutStop, rankCutLength)
		}
		p.cut.turns = uint32(len(ts) - k)
		for i := k; i < len(ts); i++ {
			p.cut.calls += uint32(calls(i))
		}
	}
	return nil
}

// turnsRank ranks turns by the worst of them: abort when there are none or
// one aborted; otherwise stop or length, or when cut, stop or length.
func turnsRank(ts []convTurn, cut bool, stop, length uint8) uint8 {
	worst := rankStop
	for _, t := range ts {
		worst = min(worst, finishRank(t.FinishReason))
	}
	switch {
	case len(ts) == 0 || worst == rankAbort:
		return rankAbort
	case cut && worst == rankStop:
		return stop
	case cut:
		return length
	}
	return worst
}

// isToolTruncation tells the truncations a tool call nobody answered
// ends a conversation with.
func isToolTruncation(reason string) bool {
	return reason == record.TruncToolUnpaired || reason == record.TruncToolRounds
}

// completeTurns is how many of a tool-truncated conversation's n turns
// its last complete exchange ends with: up to its last turn that made no
// tool call (the answer that closed an exchange), leaving out the calls
// after it, the one nobody answered last among them. calls(i) is how many
// tool calls turn i made.
func completeTurns(n int, calls func(i int) int) int {
	for k := n; k > 0; k-- {
		if calls(k-1) == 0 {
			return k
		}
	}
	return 0
}

// sampleValue is a sample number: absent means 0.
func sampleValue(raw []byte) (int, error) {
	if raw == nil {
		return 0, nil
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 0 || n > maxSample {
		return 0, fmt.Errorf("want a sample number from 0, not %.20s", raw)
	}
	return n, nil
}

// finishRank ranks a raw JSON finish_reason. An answer that ends in tool
// calls is complete, as one that stops is; reasons other than stop,
// tool_calls and length (abort, content filters, none) mark an answer not
// to train on.
func finishRank(raw []byte) uint8 {
	if len(raw) < 2 || raw[0] != '"' {
		return rankAbort
	}
	text := raw[1 : len(raw)-1]
	if bytes.IndexByte(text, '\\') >= 0 {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return rankAbort
		}
		text = []byte(s)
	}
	switch {
	case string(text) == record.FinishStop || string(text) == record.FinishToolCalls:
		return rankStop
	case string(text) == record.FinishLength:
		return rankLength
	}
	return rankAbort
}
