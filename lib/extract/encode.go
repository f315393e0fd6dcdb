package extract

import (
	"strconv"

	"tokenmill/lib/record"
)

// conversation checks, filters and encodes the whole conversation as one
// record (--turns all): every turn as read, the answers and the turns
// after the last user turn included, for regenerating the answers. Every
// user turn must have text; a user turn that follows another is kept.
// A record of a layout that is a list of questions with no answers
// (MT-Bench's turns) is marked a question list ("question_list": true),
// so that a regeneration answers each question in turn; user turns in a
// row of any other layout are a user who wrote twice, and get one answer.
func (x *Extractor) conversation(id datasetID) {
	for k, u := range x.users {
		if blankToken(x.msgs[u].content) {
			x.addCandidate(Candidate{Reason: ReasonEmpty, Detail: x.turnName(k) + " has no text"})
			return
		}
	}
	x.encodeAs(id, x.msgs, 0, x.format == FormatMTBench)
}

// candidate checks, filters and encodes the prompt that ends at user turn
// number u (0-based; -1 for a completion prompt). turn is the 1-based
// turn number put after the dataset id with --turns each, 0 otherwise.
func (x *Extractor) candidate(id datasetID, u, turn int) {
	var msgs []message
	var last []byte
	if u >= 0 {
		end := x.users[u]
		msgs = x.msgs[:end+1]
		last = msgs[end].content
		if blankToken(last) {
			x.addCandidate(Candidate{Reason: ReasonEmpty, Detail: x.turnName(u) + " has no text"})
			return
		}
		if k := x.unanswered(u); k >= 0 {
			x.addCandidate(Candidate{Reason: ReasonUnansweredTurn,
				Detail: "user turn " + strconv.Itoa(k+1) + " has no assistant answer before user turn " + strconv.Itoa(u+1)})
			return
		}
	} else {
		last = x.completion
		if blankToken(last) {
			x.addCandidate(Candidate{Reason: ReasonEmpty, Detail: "the prompt has no text"})
			return
		}
	}
	x.encode(id, msgs, turn)
}

// encode filters and writes a prompt record of msgs (nil: the completion
// prompt).
func (x *Extractor) encode(id datasetID, msgs []message, turn int) {
	x.encodeAs(id, msgs, turn, false)
}

// encodeAs is encode, marking the record a question list when questions
// is set (see conversation).
func (x *Extractor) encodeAs(id datasetID, msgs []message, turn int, questions bool) {
	if reason, detail := x.filter(msgs); reason != "" {
		x.addCandidate(Candidate{Reason: reason, Detail: detail, Filtered: true})
		return
	}
	start := len(x.out)
	x.out = append(x.out, `{"id":`...)
	x.out = x.appendID(x.out, id, msgs, turn)
	if msgs == nil {
		x.out = append(x.out, `,"prompt":`...)
		x.out = append(x.out, x.completion...)
	} else {
		x.out = appendMessages(x.out, msgs)
	}
	questions = questions && msgs != nil
	if questions {
		// infer reads it as conversation.QuestionListField.
		x.out = append(x.out, `,"question_list":true`...)
	}
	if x.tools != nil {
		x.out = append(x.out, `,"tools":`...)
		x.out = append(x.out, x.tools...)
		if x.toolChoice != nil {
			x.out = append(x.out, `,"tool_choice":`...)
			x.out = append(x.out, x.toolChoice...)
		}
		if x.parallel != nil {
			x.out = append(x.out, `,"parallel_tool_calls":`...)
			x.out = append(x.out, x.parallel...)
		}
	}
	if x.source != nil {
		x.out = append(x.out, `,"source":`...)
		x.out = append(x.out, x.source...)
	}
	x.out = x.appendMeta(x.out)
	x.out = append(x.out, '}')
	x.addCandidate(Candidate{Out: x.out[start:], QuestionList: questions})
}

func (x *Extractor) addCandidate(c Candidate) { x.cands = append(x.cands, c) }

func (x *Extractor) turnName(u int) string {
	if len(x.users) == 1 {
		return "the user turn"
	}
	return "user turn " + strconv.Itoa(u+1)
}

// unanswered returns the first user turn before user turn u that no
// assistant turn answers (another user turn comes first), or -1. Such a
// history would show the model a conversation that never happened, as in
// MT-Bench, whose second question follows an answer the dataset lacks.
func (x *Extractor) unanswered(u int) int {
	for k := 0; k < u; k++ {
		answered := false
		for _, m := range x.msgs[x.users[k]+1 : x.users[k+1]] {
			if m.role == roleAssistant && (!blankToken(m.content) || m.toolCalls != nil) {
				answered = true
				break
			}
		}
		if !answered {
			return k
		}
	}
	return -1
}

// filter applies --lang, --min-chars and --max-chars. The length of a
// prompt is the number of characters (Unicode code points) in the contents
// of all its messages, system and history included, or in its completion
// prompt.
func (x *Extractor) filter(msgs []message) (string, string) {
	if x.lang != nil {
		l := x.f.Langdetect
		if !isString(l) {
			return FilterLang, "no langdetect field"
		}
		if !x.lang[string(tokenText(x.scratch[:0], l))] {
			return FilterLang, "langdetect " + string(l)
		}
	}
	if x.opts.MinChars <= 0 && x.opts.MaxChars <= 0 {
		return "", ""
	}
	n := 0
	if msgs == nil {
		n = tokenChars(x.completion)
	}
	for _, m := range msgs {
		n += tokenChars(m.content)
	}
	switch {
	case n < x.opts.MinChars:
		return FilterTooShort, strconv.Itoa(n) + " characters"
	case x.opts.MaxChars > 0 && n > x.opts.MaxChars:
		return FilterTooLong, strconv.Itoa(n) + " characters"
	}
	return "", ""
}

// appendID writes the id: the dataset's own, with --id-prefix before it
// and "#<turn>" after it with --turns each (either makes an integer id a
// string), else the content hash of the prompt.
func (x *Extractor) appendID(dst []byte, id datasetID, msgs []message, turn int) []byte {
	if id.kind == idNumber && x.prefix == nil && turn == 0 {
		return append(dst, id.tok...)
	}
	if id.kind == idString && x.prefix == nil && turn == 0 {
		return append(dst, id.tok...)
	}
	dst = append(dst, '"')
	dst = append(dst, x.prefix...)
	switch id.kind {
	case idString:
		dst = append(dst, id.tok[1:len(id.tok)-1]...)
	case idNumber:
		dst = append(dst, id.tok...)
	default:
		dst = append(dst, record.ContentID(x.canonical(msgs))...)
		turn = 0 // each turn's prompt hashes differently already
	}
	if turn > 0 {
		dst = append(dst, '#')
		dst = strconv.AppendInt(dst, int64(turn), 10)
	}
	return append(dst, '"')
}

// canonical is the prompt's canonical form as record.Prompt defines it,
// so ids made here equal those any later stage computes from the output.
func (x *Extractor) canonical(msgs []message) []byte {
	var p record.Prompt
	if msgs == nil {
		s := string(tokenText(nil, x.completion))
		p.Prompt = &s
	} else {
		x.recMsgs = x.recMsgs[:0]
		for _, m := range msgs {
			rm := record.Message{Role: m.role, Content: string(tokenText(nil, m.content)), ToolCalls: m.toolCalls}
			if m.toolCallID != nil {
				rm.ToolCallID = string(tokenText(nil, m.toolCallID))
			}
			x.recMsgs = append(x.recMsgs, rm)
		}
		p.Messages = x.recMsgs
	}
	p.Tools = x.tools
	x.canon = p.AppendCanonical(x.canon[:0])
	return x.canon
}

func appendMessages(dst []byte, msgs []message) []byte {
	dst = append(dst, `,"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"role":"`...)
		dst = append(dst, m.role...)
		dst = append(dst, `","content":`...)
		dst = append(dst, m.content...)
		if m.reasoning != nil {
			dst = append(dst, `,"reasoning_content":`...)
			dst = append(dst, m.reasoning...)
		}
		if m.name != nil {
			dst = append(dst, `,"name":`...)
			dst = append(dst, m.name...)
		}
		if m.toolCalls != nil {
			dst = append(dst, `,"tool_calls":`...)
			dst = append(dst, m.toolCalls...)
		}
		if m.toolCallID != nil {
			dst = append(dst, `,"tool_call_id":`...)
			dst = append(dst, m.toolCallID...)
		}
		if m.weight != nil {
			dst = append(dst, `,"weight":`...)
			dst = append(dst, m.weight...)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendMeta writes the --keep fields the record has (in --keep order), and
// an MT-Bench question's category.
func (x *Extractor) appendMeta(dst []byte) []byte {
	start := len(dst)
	field := func(name, value []byte) {
		if len(dst) == start {
			dst = append(dst, `,"meta":{`...)
		} else {
			dst = append(dst, ',')
		}
		dst = append(dst, name...)
		dst = append(dst, ':')
		dst = append(dst, value...)
	}
	keptCategory := false
	for i, v := range x.keep {
		if present(*v) {
			field(x.keepNames[i], *v)
		}
		keptCategory = keptCategory || x.opts.Keep[i] == "category"
	}
	if x.format == FormatMTBench && !keptCategory && present(x.f.Category) {
		field([]byte(`"category"`), x.f.Category)
	}
	if len(dst) > start {
		dst = append(dst, '}')
	}
	return dst
}
