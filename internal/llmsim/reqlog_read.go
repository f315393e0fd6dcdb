package llmsim

// LoggedRequest is a line of the request log (Config.RequestLog) as its
// readers need it: the benchmark's regenerate section reads what each
// turn of a conversation cost from it.
type LoggedRequest struct {
	Status       int    `json:"status"`
	PromptTokens int    `json:"prompt_tokens"`
	CachedTokens int    `json:"cached_tokens"`
	Outcome      string `json:"outcome"` // "" answered, else the fault or crash that took it
	Body         struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	} `json:"body"`
}

// Answered tells whether the request was answered: a 200 no fault took.
func (r *LoggedRequest) Answered() bool { return r.Status == 200 && r.Outcome == "" }

// HistoryTokens is what the request's messages up to and including its
// last assistant turn cost, as PromptTokens charges them: what the server
// saw in an earlier turn of the same conversation, and all that a prefix
// cache can serve (the new user turn is always computed).
func (r *LoggedRequest) HistoryTokens() (history int) {
	n := 0
	for _, m := range r.Body.Messages {
		n += chatTokensPerMessage + TextTokens(m.Content)
		if m.Role == "assistant" {
			history = n
		}
	}
	return history
}

// UserTurns counts the request's user messages.
func (r *LoggedRequest) UserTurns() (n int) {
	for _, m := range r.Body.Messages {
		if m.Role == "user" {
			n++
		}
	}
	return n
}
