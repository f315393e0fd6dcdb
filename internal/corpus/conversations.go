package corpus

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The conversations corpus (corpus --conversations) is multi-turn ShareGPT
// data in the glaive/LLaMA-Factory tool-calling layout, for the whole
// conversation records of extract --turns all and what reads them:
//
//	{"id": "conv-7", "system": "...", "tools": "[{\"name\": ...}]",
//	 "conversations": [{"from": "human", "value": "..."},
//	   {"from": "function_call", "value": "{\"name\": \"get_weather\", \"arguments\": {...}}"},
//	   {"from": "observation", "value": "{\"temperature\": 18, ...}"},
//	   {"from": "gpt", "value": "..."}, ...]}
//
// Each conversation has 2 to 10 turns: 1 to 5 questions, each answered,
// some of them through a function call and its observation, and one in
// eight ends with a follow-up question that has no answer yet. Answers are
// long-tailed (median 250 characters, up to 8,000) and one conversation in
// 40 opens with a pasted document of 3,000 to 15,000 characters, so the
// histories before the last answer run up to several thousand tokens. A
// third of the conversations offer tools, and half of their questions are
// answered by calling one; a fifth have a system prompt; one in six is in
// Chinese.

// Conversation is one row of the conversations corpus.
type Conversation struct {
	ID            string
	System        string // "" for none
	Tools         string // a JSON list of functions, "" for none
	Conversations []Turn // from: human, gpt, function_call, observation
	ASCII         bool   // \u-escape non-ASCII characters, as json.dumps does
}

// ConversationCounts say what the conversations generated so far hold.
type ConversationCounts struct {
	Conversations int64
	Turns         int64
	WithTools     int64
	WithSystem    int64
	Calls         int64 // function_call turns, one call each
	Observations  int64 // each answers the call just before it
	LongestChars  int   // characters in the longest conversation, system included
}

// Conversations generates conversation records; the same seed gives the
// same records.
type Conversations struct {
	rng    *rand.Rand
	n      int64
	counts ConversationCounts
	rec    Conversation
	buf    []byte
}

// NewConversations returns a conversation generator for seed.
func NewConversations(seed uint64) *Conversations {
	return &Conversations{rng: rand.New(rand.NewPCG(seed, 0x636f6e7673))}
}

// Counts returns the counts of the conversations generated so far.
func (g *Conversations) Counts() ConversationCounts { return g.counts }

// function is a tool the conversations can call, with the arguments and
// result it is called with.
type function struct {
	name string
	decl string                                     // its declaration, as JSON
	call func(rng *rand.Rand) (args, result string) // arguments and result, as JSON
}

var cities = []string{"Paris", "London", "Tokyo", "Oslo", "Lima", "Nairobi", "Sydney", "Montréal", "北京"}

var functions = []function{
	{"get_weather", `{"name": "get_weather", "description": "Get the current weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}`,
		func(rng *rand.Rand) (string, string) {
			c := jsonText(cities[rng.IntN(len(cities))])
			return `{"city": ` + c + `, "unit": "celsius"}`, `{"city": ` + c + `, "temperature": ` + strconv.Itoa(rng.IntN(40)-5) + `, "condition": "cloudy"}`
		}},
	{"convert_currency", `{"name": "convert_currency", "description": "Convert an amount between currencies", "parameters": {"type": "object", "properties": {"amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}}, "required": ["amount", "from", "to"]}}`,
		func(rng *rand.Rand) (string, string) {
			amount := rng.IntN(5000) + 1
			return `{"amount": ` + strconv.Itoa(amount) + `, "from": "USD", "to": "EUR"}`,
				`{"converted_amount": ` + strconv.FormatFloat(float64(amount)*0.92, 'f', 2, 64) + `, "currency": "EUR"}`
		}},
	{"search_recipes", `{"name": "search_recipes", "description": "Search for recipes by ingredients", "parameters": {"type": "object", "properties": {"ingredients": {"type": "array", "items": {"type": "string"}}}, "required": ["ingredients"]}}`,
		func(rng *rand.Rand) (string, string) {
			return `{"ingredients": ["chicken", "rice", "bell peppers"]}`,
				`{"recipes": [{"name": "Chicken fried rice", "minutes": ` + strconv.Itoa(15+rng.IntN(40)) + `}]}`
		}},
	{"calculate_bmi", `{"name": "calculate_bmi", "description": "Calculate the body mass index", "parameters": {"type": "object", "properties": {"weight": {"type": "number", "description": "kg"}, "height": {"type": "number", "description": "m"}}, "required": ["weight", "height"]}}`,
		func(rng *rand.Rand) (string, string) {
			w, h := 50+rng.IntN(60), 150+rng.IntN(45)
			bmi := float64(w) / (float64(h) / 100 * float64(h) / 100)
			return `{"weight": ` + strconv.Itoa(w) + `, "height": ` + strconv.FormatFloat(float64(h)/100, 'f', 2, 64) + `}`,
				`{"bmi": ` + strconv.FormatFloat(bmi, 'f', 1, 64) + `}`
		}},
	{"get_stock_price", `{"name": "get_stock_price", "description": "Get a stock's latest price", "parameters": {"type": "object", "properties": {"symbol": {"type": "string"}}, "required": ["symbol"]}}`,
		func(rng *rand.Rand) (string, string) {
			return `{"symbol": "AAPL"}`, `{"symbol": "AAPL", "price": ` + strconv.Itoa(100+rng.IntN(150)) + `.` + strconv.Itoa(10+rng.IntN(90)) + `}`
		}},
}

var systemPrompts = []string{
	"You are a helpful assistant.",
	"You are a helpful assistant with access to the following functions. Use them if required.",
	"Answer briefly and cite your assumptions.",
	"你是一个乐于助人的助手。",
}

// jsonText is s as a JSON string.
func jsonText(s string) string { return string(appendString(nil, s, false)) }

// Next returns the next conversation. It is reused by the following call.
func (g *Conversations) Next() *Conversation {
	rng := g.rng
	c := &g.rec
	c.ID = "conv-" + strconv.FormatInt(g.n, 10)
	g.n++
	c.ASCII = rng.IntN(10) == 0
	c.System, c.Tools = "", ""
	c.Conversations = c.Conversations[:0]
	chinese := rng.IntN(6) == 0
	var offered []function
	if rng.IntN(3) == 0 {
		perm := rng.Perm(len(functions))[:1+rng.IntN(3)]
		decls := make([]string, len(perm))
		for i, k := range perm {
			offered = append(offered, functions[k])
			decls[i] = functions[k].decl
		}
		c.Tools = "[" + strings.Join(decls, ", ") + "]"
		g.counts.WithTools++
	}
	if rng.IntN(5) == 0 {
		c.System = systemPrompts[rng.IntN(len(systemPrompts))]
		g.counts.WithSystem++
	}
	questions := []int{1, 1, 1, 2, 2, 2, 3, 3, 4, 5}[rng.IntN(10)]
	for q := range questions {
		room := 10 - len(c.Conversations)
		if room < 2 {
			break
		}
		c.Conversations = append(c.Conversations, Turn{From: "human", Value: g.question(q == 0, chinese)})
		if len(offered) > 0 && room >= 4 && rng.IntN(2) == 0 {
			f := offered[rng.IntN(len(offered))]
			args, result := f.call(rng)
			c.Conversations = append(c.Conversations,
				Turn{From: "function_call", Value: `{"name": "` + f.name + `", "arguments": ` + args + `}`},
				Turn{From: "observation", Value: result})
			g.counts.Calls++
			g.counts.Observations++
		}
		c.Conversations = append(c.Conversations, Turn{From: "gpt", Value: g.answer(chinese)})
	}
	if len(c.Conversations) < 10 && rng.IntN(8) == 0 {
		// Cut off after a follow-up question, as scraped chats often are.
		c.Conversations = append(c.Conversations, Turn{From: "human", Value: g.question(false, chinese)})
	}
	g.counts.Conversations++
	g.counts.Turns += int64(len(c.Conversations))
	chars := utf8.RuneCountInString(c.System)
	for _, t := range c.Conversations {
		chars += utf8.RuneCountInString(t.Value)
	}
	g.counts.LongestChars = max(g.counts.LongestChars, chars)
	return c
}

// question is a human turn: the first sometimes opens with a pasted
// document, the long tail of history lengths.
func (g *Conversations) question(first, chinese bool) string {
	t := textGen{rng: g.rng, buf: g.buf[:0]}
	n := lognormal(g.rng, 120, 0.8, 8, 2000)
	if first {
		n = lognormal(g.rng, 200, 0.8, 8, 3000)
		if g.rng.IntN(40) == 0 {
			n = 3000 + g.rng.IntN(12000)
		}
	}
	if chinese {
		t.chinese(max(8, n/2), false)
	} else {
		t.english(n, g.rng.IntN(15) == 0)
	}
	g.buf = t.buf
	return string(t.buf)
}

func (g *Conversations) answer(chinese bool) string {
	t := textGen{rng: g.rng, buf: g.buf[:0]}
	n := lognormal(g.rng, 250, 1.0, 2, 8000)
	if chinese {
		t.chinese(max(2, n/2), false)
	} else {
		t.english(n, false)
	}
	g.buf = t.buf
	return string(t.buf)
}

// AppendConversation appends c as one JSON line (without the newline) in
// the ShareGPT layout, tools as a JSON string as glaive writes them.
func AppendConversation(dst []byte, c *Conversation) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, c.ID, c.ASCII)
	if c.System != "" {
		dst = append(dst, `,"system":`...)
		dst = appendString(dst, c.System, c.ASCII)
	}
	dst = appendTurns(dst, c.Conversations, c.ASCII)
	if c.Tools != "" {
		dst = append(dst, `,"tools":`...)
		dst = appendString(dst, c.Tools, c.ASCII)
	}
	return append(dst, '}')
}
