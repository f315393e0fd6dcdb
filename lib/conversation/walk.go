// Package conversation regenerates a conversation record's assistant
// turns (infer --regenerate): the walk that builds each turn's request
// from the history regenerated so far, pairs the answers' tool calls with
// the record's cached results and ends a conversation early, and the turn
// journal a killed run resumes from.
package conversation

import (
	"fmt"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/openai"
	"tokenmill/lib/record"
)

// Regenerating a conversation (--regenerate). The record's messages are
// walked in order, the top-level system first by the one-slot rule:
//
//   - system and user turns (and any role but assistant and tool) are kept;
//   - an assistant turn before the first user turn is kept as it is: it
//     answers nothing;
//   - an assistant turn of weight 0 (record.Message.IsContext) where an
//     exchange would start is context, not a target: it is kept as it is,
//     weight included, and so are the tool results that follow it; the
//     walk goes on at the next assistant turn. Inside an exchange being
//     regenerated it is replaced with the rest of the exchange;
//   - at any other assistant turn the history so far, with the answers
//     regenerated in place of the originals, is sent with the record's
//     tools, and the answer takes the turn's place. The original's whole
//     exchange up to the next user turn (its assistant turns and tool
//     results) is replaced by what the model does:
//   - an answer without tool calls ends the exchange: whatever the original
//     still had before the next user turn is skipped;
//   - an answer with tool calls is answered from the original's cached tool
//     results of the same exchange: each call, in order, takes the next
//     unused result of the same function (a result whose function is not
//     known pairs with any call), re-addressed to the new call's id; then
//     the model answers again. A call that cannot be paired (the results
//     are used up, another function, more parallel calls than the original
//     made) ends the conversation truncated (tool_unpaired), the answer
//     that made it kept as the last turn; so does a call past --tool-rounds
//     rounds of results in one exchange (tool_rounds);
//   - a conversation that ends with a user turn gets a final answer;
//   - user turns in a row get one answer after the last of them, where
//     the original had one; but in a question list (a record marked
//     "question_list": true, see QuestionListField) each of them is
//     answered in turn: a user turn that follows a user turn is asked
//     for only once the one before it has its answer, whose history
//     holds the answers before it.
//
// The walk is a pure function of the record and the answers, so a
// conversation resumed from the journal replays its answers to the state
// it had when it was killed.

// QuestionListField is the field that marks a conversation record as a
// list of questions with no answers (MT-Bench's turns, as extract --turns
// all writes them): "question_list": true. Its later questions refer to
// the answers of the earlier ones, so each user turn is answered in
// turn; without the mark, user turns in a row (a user who wrote twice
// before the answer came) get one answer.
const QuestionListField = "question_list"

// IsQuestionList reads the mark of a raw conversation record: true when
// it holds "question_list": true, false when the field is absent, null or
// false; an error for any other value.
func IsQuestionList(raw []byte) (bool, error) {
	v, err := record.FieldValue(raw, QuestionListField)
	if err != nil {
		return false, err
	}
	switch string(v) {
	case "", "null", "false":
		return false, nil
	case "true":
		return true, nil
	}
	shown := v
	if len(shown) > 40 {
		shown = append(shown[:40:40], "..."...)
	}
	return false, fmt.Errorf("%q is %s: true marks a list of questions to answer one by one, false (or no field) a conversation", QuestionListField, shown)
}

// cachedResult is one tool result of the original conversation, with the
// function it answered ("" when the record does not say).
type cachedResult struct {
	name string
	msg  record.Message
}

// Walk is the regeneration of one (conversation, sample).
type Walk struct {
	src       []record.Message
	prompt    record.Prompt // tools, tool_choice and params; Messages is set per turn
	paramSeed *int64
	maxRounds int
	questions bool // a question list: user turns in a row are answered each

	out       []record.Message
	turns     []record.Turn
	truncated *record.Truncation
	usage     record.TurnUsage
	model     string
	replayed  int // turns taken from the journal
	paired    int // tool calls answered from cached results

	pos        int  // next message of src to walk
	seenUser   bool // a user turn has been walked: assistant turns are answers
	answering  bool // inside an exchange: the next step asks for an answer
	finalAsked bool
	done       bool
	pool       []cachedResult
	used       []bool
	rounds     int
	// callNames maps the original calls' ids to their functions.
	callNames map[string]string
}

// New prepares the walk of p's conversation, with the seed of its params
// (if any), at most maxRounds rounds of tool results in one exchange, and
// whether it is a question list (IsQuestionList); false when it has
// nothing to regenerate (no assistant turn after a user turn, no user
// turn at the end, and, in a question list, no user turns in a row).
func New(p *record.Prompt, paramSeed *int64, maxRounds int, questionList bool) (*Walk, bool) {
	c := &Walk{src: openai.ChatMessages(p), paramSeed: paramSeed, maxRounds: maxRounds, questions: questionList}
	c.prompt = record.Prompt{Tools: p.Tools, ToolChoice: p.ToolChoice, ParallelToolCalls: p.ParallelToolCalls, Params: p.Params}
	c.out = make([]record.Message, 0, 2*len(c.src)+1)
	user, answers := false, false
	for i, m := range c.src {
		switch m.Role {
		case "user":
			user = true
			answers = answers || (questionList && i > 0 && c.src[i-1].Role == "user")
		case "assistant":
			answers = answers || (user && !m.IsContext())
			calls, _ := openai.ToolCalls(m.ToolCalls)
			for _, call := range calls {
				if call.ID != "" {
					if c.callNames == nil {
						c.callNames = map[string]string{}
					}
					c.callNames[call.ID] = call.Function.Name
				}
			}
		}
	}
	last := ""
	if len(c.src) > 0 {
		last = c.src[len(c.src)-1].Role
	}
	return c, answers || last == "user"
}

// Next walks on to the next answer to ask for: true when one is wanted
// (Request is its prompt), false when the conversation is complete.
func (c *Walk) Next() bool {
	if c.done {
		return false
	}
	if c.answering {
		return true
	}
	for c.pos < len(c.src) {
		m := c.src[c.pos]
		if c.questions && m.Role == "user" && c.lastIsUser() {
			// A question list: the question before this one is answered
			// first (the walk comes back to this turn once it is).
			c.startExchange(nil)
			return true
		}
		if m.Role != "assistant" || !c.seenUser || m.IsContext() {
			c.seenUser = c.seenUser || m.Role == "user"
			c.out = append(c.out, m)
			c.pos++
			continue
		}
		end := c.pos
		for end < len(c.src) && (c.src[end].Role == "assistant" || c.src[end].Role == "tool") {
			end++
		}
		c.startExchange(c.src[c.pos:end])
		c.pos = end
		return true
	}
	if !c.finalAsked && c.lastIsUser() {
		c.finalAsked = true
		c.startExchange(nil)
		return true
	}
	c.done = true
	return false
}

// lastIsUser says whether the conversation so far ends with a user turn.
func (c *Walk) lastIsUser() bool {
	return len(c.out) > 0 && c.out[len(c.out)-1].Role == "user"
}

// startExchange begins the answer to a user turn, with the original's
// exchange (assistant turns and tool results) as the cache of results.
func (c *Walk) startExchange(orig []record.Message) {
	c.answering, c.rounds = true, 0
	c.pool, c.used = c.pool[:0], c.used[:0]
	var lastCalls []record.ToolCall
	k := 0
	for i, m := range orig {
		switch m.Role {
		case "assistant":
			lastCalls, _ = openai.ToolCalls(m.ToolCalls)
			k = 0
		case "tool":
			results := []record.Message{m}
			if last := i+1 == len(orig) || orig[i+1].Role != "tool"; last && len(lastCalls)-k > 1 {
				results = splitResults(m, len(lastCalls)-k)
			}
			for _, r := range results {
				name, ok := c.callNames[r.ToolCallID]
				switch {
				case ok && len(results) == 1:
				case r.Name != "":
					name = r.Name
				case k < len(lastCalls):
					name = lastCalls[k].Function.Name
				}
				k++
				c.pool = append(c.pool, cachedResult{name: name, msg: r})
				c.used = append(c.used, false)
			}
		}
	}
}

// splitResults makes the last tool turn after a turn of parallel calls,
// n of them still without a result, the results of those n: one turn that
// holds them all (LLaMA-Factory's layouts write a single observation for
// a list of calls). A JSON list of n results is split, each result its own
// turn; any other text answers all n as one, the same text each.
func splitResults(m record.Message, n int) []record.Message {
	var list []json.RawMessage
	if err := json.Unmarshal([]byte(m.Content), &list); err != nil || len(list) != n {
		list = nil
	}
	out := make([]record.Message, n)
	for i := range out {
		out[i] = record.Message{Role: m.Role, Content: m.Content, Name: m.Name}
		if list == nil {
			continue
		}
		var text string
		if json.Unmarshal(list[i], &text) != nil {
			text = string(list[i]) // an object or a number: its JSON
		}
		out[i].Content, out[i].Name = text, ""
	}
	if m.ToolCallID != "" {
		out[0].ToolCallID = m.ToolCallID
	}
	return out
}

// Request is the prompt of the answer c asks for now.
func (c *Walk) Request() *record.Prompt {
	p := c.prompt
	p.Messages = c.out
	return &p
}

// Answer is one regenerated assistant turn.
type Answer struct {
	Message record.Message // role assistant: content, reasoning_content, tool_calls
	Turn    record.Turn
	Model   string
	// Readdressed counts the calls whose id repeated an earlier call's in
	// the answer, given one of their own (record.AddressCalls).
	Readdressed int
	calls       []record.ToolCall
}

// NewAnswer makes the turn of a completion; every call gets an id of its
// own (record.AddressCalls: call_<m>_<k>, m the turn's 1-based place in
// the conversation, for a call without one or one repeating another's).
func (c *Walk) NewAnswer(comp *openai.Completion, turn record.Turn) (Answer, error) {
	a := Answer{Message: record.Message{Role: "assistant", Content: comp.Text, ReasoningContent: comp.Reasoning}, Turn: turn, Model: comp.Model}
	if len(comp.ToolCalls) > 0 {
		a.calls = append([]record.ToolCall(nil), comp.ToolCalls...)
		a.Readdressed = record.AddressCalls(a.calls, len(c.out)+1)
		raw, err := json.Marshal(a.calls)
		if err != nil {
			return a, err
		}
		a.Message.ToolCalls = raw
	}
	return a, nil
}

// Apply takes the answer c asked for: it becomes the next turn, and its
// tool calls are answered from the cache or end the conversation.
func (c *Walk) Apply(a Answer) {
	a.Turn.Message = len(c.out)
	c.out = append(c.out, a.Message)
	c.turns = append(c.turns, a.Turn)
	c.usage.PromptTokens += a.Turn.Usage.PromptTokens
	c.usage.CompletionTokens += a.Turn.Usage.CompletionTokens
	c.usage.AddCached(a.Turn.Usage.CachedTokens)
	if c.model == "" {
		c.model = a.Model
	}
	turn := len(c.turns) - 1
	if len(a.calls) == 0 {
		c.answering = false
		return
	}
	if c.rounds >= c.maxRounds {
		c.Truncate(record.TruncToolRounds, turn, fmt.Sprintf("the answer calls %s after %d rounds of tool results in this exchange (--tool-rounds)", a.calls[0].Function.Name, c.rounds))
		return
	}
	picks := make([]int, len(a.calls))
	for k, call := range a.calls {
		picks[k] = -1
		for i, r := range c.pool {
			if !c.used[i] && (r.name == "" || r.name == call.Function.Name) {
				picks[k] = i
				c.used[i] = true
				break
			}
		}
		if picks[k] < 0 {
			for _, i := range picks[:k] {
				c.used[i] = false
			}
			c.Truncate(record.TruncToolUnpaired, turn, c.unpairedDetail(k, a.calls))
			return
		}
	}
	for k, call := range a.calls {
		r := c.pool[picks[k]].msg
		c.out = append(c.out, record.Message{Role: "tool", Content: r.Content, Name: r.Name, ToolCallID: call.ID})
	}
	c.paired += len(a.calls)
	c.rounds++
}

// unpairedDetail says why call k of calls found no cached result.
func (c *Walk) unpairedDetail(k int, calls []record.ToolCall) string {
	name := calls[k].Function.Name
	what := fmt.Sprintf("call %d of %d (%s)", k+1, len(calls), name)
	if len(calls) == 1 {
		what = "the call to " + name
	}
	switch {
	case len(c.pool) == 0:
		return what + ": the original made no tool call here"
	case !c.hasResultOf(name):
		return what + ": the original called no " + name + " here"
	}
	return what + ": the original's results of " + name + " here are used up"
}

func (c *Walk) hasResultOf(name string) bool {
	for _, r := range c.pool {
		if r.name == name || r.name == "" {
			return true
		}
	}
	return false
}

// Truncate ends the conversation early for reason (a record.Trunc*) at
// turn, keeping the turns done; the output ends with the last of them (a
// question no answer was asked for is left out).
func (c *Walk) Truncate(reason string, turn int, detail string) {
	c.truncated = &record.Truncation{Reason: reason, Turn: turn, Detail: detail}
	c.answering, c.done = false, true
	if n := len(c.turns); n > 0 {
		c.out = c.out[:c.turns[n-1].Message+1]
	}
}

// Output is the conversation's generation record output, naming
// fallbackModel where no answer named its model.
func (c *Walk) Output(sample int, fallbackModel string) *record.ConversationOutput {
	o := &record.ConversationOutput{Messages: c.out, Turns: c.turns, Truncated: c.truncated, Usage: c.usage, Model: c.model, Sample: sample}
	if o.Model == "" {
		o.Model = fallbackModel
	}
	if o.Turns == nil {
		o.Turns = []record.Turn{}
	}
	for _, t := range c.turns {
		o.LatencyMS += t.LatencyMS
		o.Attempts = max(o.Attempts, t.Attempts)
	}
	if n := len(c.turns); n > 0 {
		o.FinishReason = c.turns[n-1].FinishReason
		o.Endpoint = c.turns[0].Endpoint
	}
	return o
}

// Messages is the conversation so far: the regenerated history.
func (c *Walk) Messages() []record.Message { return c.out }

// Turns are the regenerated turns so far.
func (c *Walk) Turns() []record.Turn { return c.turns }

// Truncated says why the conversation ended early; nil when it did not.
func (c *Walk) Truncated() *record.Truncation { return c.truncated }

// Usage is the tokens of the turns so far.
func (c *Walk) Usage() record.TurnUsage { return c.usage }

// ParamSeed is the seed of the record's params, as New was given it.
func (c *Walk) ParamSeed() *int64 { return c.paramSeed }

// Replayed is how many turns were taken from the journal.
func (c *Walk) Replayed() int { return c.replayed }

// Paired is how many tool calls were answered from cached results.
func (c *Walk) Paired() int { return c.paired }

// Replay takes a resumed conversation's journaled turns in order, and
// returns the endpoint the last one taken went to.
func (c *Walk) Replay(lines []JournalLine) (endpoint string, err error) {
	for i := range lines {
		l := &lines[i]
		if !c.Next() {
			return endpoint, fmt.Errorf("turn %d is past the conversation's end", l.Turn)
		}
		a := Answer{Message: l.Answer, Turn: l.Meta, Model: l.Model}
		if len(l.Answer.ToolCalls) > 0 {
			if err := json.Unmarshal(l.Answer.ToolCalls, &a.calls); err != nil {
				return endpoint, fmt.Errorf("turn %d: %w", l.Turn, err)
			}
		}
		c.Apply(a)
		c.replayed++
		endpoint = l.Meta.Endpoint
	}
	return endpoint, nil
}
