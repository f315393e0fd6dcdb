package benchsuite

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"github.com/segmentio/encoding/json"

	"tokenmill/internal/llmsim"
	"tokenmill/lib/cli"
)

// What an llmsim fleet's prefix caches did in a run that regenerated
// conversations, read from its request log (llmsim --request-log): prompt
// tokens, cached tokens, prefill tokens computed, and the share of history
// tokens served from cache. A request's history is its messages up to and
// including the last assistant turn: what the server saw in an earlier
// turn of the same conversation, and all a prefix cache can serve (the new
// user turn is always computed). Tokens are counted as llmsim charges them
// (4 bytes a token, 4 more per message: llmsim.TextTokens and its chat
// template). renderRegen sets several runs side by side, each against the
// first, and, given the tokens each run generated (from llmsim's exit
// summary), adds what llmsim's cost model makes of them: prefill's share of
// the fleet's time without a cache, and each run's floor, the least time
// its work takes, which bounds how much faster than another run any client
// can be.

type logLine struct {
	Status       int    `json:"status"`
	PromptTokens int    `json:"prompt_tokens"`
	CachedTokens int    `json:"cached_tokens"`
	Outcome      string `json:"outcome"`
	Body         struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	} `json:"body"`
}

// Per message, llmsim's chat template adds <|im_start|>, the role, a
// newline and <|im_end|>.
const templateTokens = 4

// regenRun is what one run did, as kept in regen-results.jsonl.
type regenRun struct {
	Name            string  `json:"name"`
	Requests        int64   `json:"requests"`
	FailedRequests  int64   `json:"failed_requests"`
	LaterTurns      int64   `json:"later_turns"`
	PromptTokens    int64   `json:"prompt_tokens"`
	CachedTokens    int64   `json:"cached_tokens"`
	PrefillTokens   int64   `json:"prefill_tokens"`
	HistoryTokens   int64   `json:"history_tokens"`
	HistoryCached   int64   `json:"history_cached"`
	GeneratedTokens int64   `json:"generated_tokens,omitempty"`
	WallS           float64 `json:"wall_s"`
	SimWallS        float64 `json:"sim_wall_s"`
	CacheHitPct     float64 `json:"cache_hit_pct"`
	HistoryHitPct   float64 `json:"history_hit_pct"`
}

// regenStats reads the request log of one run: its name, its wall time in
// real seconds, llmsim's time scale and the tokens the fleet generated.
func regenStats(logPath, name string, wall, scale float64, generated int64) (regenRun, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return regenRun{}, err
	}
	defer f.Close()
	var requests, later, failed, prompt, cached, history, historyCached int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for line := 1; sc.Scan(); line++ {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return regenRun{}, fmt.Errorf("%s:%d: %v", logPath, line, err)
		}
		if l.Status != 200 || l.Outcome != "" {
			failed++
			continue
		}
		requests++
		prompt += int64(l.PromptTokens)
		cached += int64(l.CachedTokens)
		last := -1
		for i, m := range l.Body.Messages {
			if m.Role == "assistant" {
				last = i
			}
		}
		if last < 0 {
			continue
		}
		later++
		h := 0
		for _, m := range l.Body.Messages[:last+1] {
			h += templateTokens + llmsim.TextTokens(m.Content)
		}
		history += int64(h)
		historyCached += int64(min(l.CachedTokens, h))
	}
	if err := sc.Err(); err != nil {
		return regenRun{}, err
	}
	r := regenRun{Name: name, Requests: requests, FailedRequests: failed, LaterTurns: later, PromptTokens: prompt, CachedTokens: cached,
		PrefillTokens: prompt - cached, HistoryTokens: history, HistoryCached: historyCached, GeneratedTokens: generated, WallS: wall, SimWallS: wall * scale}
	if prompt > 0 {
		r.CacheHitPct = 100 * float64(cached) / float64(prompt)
	}
	if history > 0 {
		r.HistoryHitPct = 100 * float64(historyCached) / float64(history)
	}
	return r, nil
}

// costModel is llmsim's timing as the table reads it: an endpoint
// generates decodeTPS tokens a second with a full batch, and each prompt
// token it computes costs prefillUS more.
type costModel struct {
	prefillUS, decodeTPS float64
	endpoints            int
}

// decodeS is each endpoint's share of the run's generated tokens, in
// seconds at a full batch.
func (c costModel) decodeS(r regenRun) float64 {
	return float64(r.GeneratedTokens) / float64(c.endpoints) / c.decodeTPS
}

// prefillS is each endpoint's share of tokens prefilled, in seconds.
func (c costModel) prefillS(tokens int64) float64 {
	return float64(tokens) * c.prefillUS / 1e6 / float64(c.endpoints)
}

// floor is the least time the run's work takes the fleet: every slot busy
// from start to end on its answers and on the prefill its cache left.
func (c costModel) floor(r regenRun) float64 { return c.decodeS(r) + c.prefillS(r.PrefillTokens) }

// noCacheGain is how much faster a client whose cache served every prompt
// token could be than one whose cache served none, and prefill's share
// of the busy time without a cache.
func (c costModel) noCacheGain(r regenRun) (gain, sharePct float64) {
	d, p := c.decodeS(r), c.prefillS(r.PromptTokens)
	if d <= 0 {
		return 0, 0
	}
	return (d + p) / d, 100 * p / (d + p)
}

// renderRegen prints the runs as a table, the first run the reference of the
// "vs. the first row" column, the targets, and what the cost model says
// each run's work takes at the least (when the runs know the tokens they
// generated): prefill's share of it, and how much faster than each run
// any client could be.
func renderRegen(w io.Writer, runs []regenRun, c costModel) {
	if len(runs) == 0 {
		return
	}
	floors := true
	best := -1
	for i, r := range runs {
		if r.GeneratedTokens <= 0 {
			floors = false
		} else if best < 0 || c.floor(r) < c.floor(runs[best]) {
			best = i
		}
	}
	floors = floors && c.decodeTPS > 0 && c.endpoints > 0
	if floors {
		fmt.Fprintln(w, "| client | wall (simulated) | vs. the first row | requests | prompt tokens | served from cache | prefill computed | history served from cache | floor |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	} else {
		fmt.Fprintln(w, "| client | wall (simulated) | vs. the first row | requests | prompt tokens | served from cache | prefill computed | history served from cache |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	}
	for _, r := range runs {
		fmt.Fprintf(w, "| %s | %.0f s | %.2f× | %s | %s | %s (%.1f%%) | %s | %.1f%% |", r.Name, r.SimWallS, r.SimWallS/runs[0].SimWallS,
			cli.Thousands(r.Requests), cli.Thousands(r.PromptTokens), cli.Thousands(r.CachedTokens), r.CacheHitPct, cli.Thousands(r.PrefillTokens), r.HistoryHitPct)
		if floors {
			fmt.Fprintf(w, " %.0f s |", c.floor(r))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	a := runs[0]
	met := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	if floors {
		fmt.Fprintln(w, "| target | measured | any client at most | met |")
		fmt.Fprintln(w, "|---|---|---|---|")
		fmt.Fprintf(w, "| %s: ≥ 90%% of history tokens served from cache | %.1f%% | 100%% | %s |\n", a.Name, a.HistoryHitPct, met(a.HistoryHitPct >= 90))
	} else {
		fmt.Fprintln(w, "| target | measured | met |")
		fmt.Fprintln(w, "|---|---|---|")
		fmt.Fprintf(w, "| %s: ≥ 90%% of history tokens served from cache | %.1f%% | %s |\n", a.Name, a.HistoryHitPct, met(a.HistoryHitPct >= 90))
	}
	for _, r := range runs[1:] {
		ratio := r.SimWallS / a.SimWallS
		if floors {
			fmt.Fprintf(w, "| %s ≥ 1.3× faster than %s | %.2f× | %.2f× | %s |\n", a.Name, r.Name, ratio, r.SimWallS/c.floor(runs[best]), met(ratio >= 1.3))
		} else {
			fmt.Fprintf(w, "| %s ≥ 1.3× faster than %s | %.2f× | %s |\n", a.Name, r.Name, ratio, met(ratio >= 1.3))
		}
	}
	fmt.Fprintln(w)
	if floors {
		gain, share := c.noCacheGain(a)
		fmt.Fprintf(w, "- Prefill's share: each endpoint's part of the %s tokens generated takes %.0f s at %s tok/s (a full batch); prefilling its part of all %s prompt tokens would take %.0f s more at %g µs a token. Without a prefix cache prefill is %.1f%% of an endpoint's busy time, so a client whose cache served every prompt token could be at most %.2f× faster than one whose cache served none.\n",
			cli.Thousands(a.GeneratedTokens), c.decodeS(a), cli.Thousands(int64(c.decodeTPS)), cli.Thousands(a.PromptTokens), c.prefillS(a.PromptTokens), c.prefillUS, share, gain)
		fmt.Fprintf(w, "- The floor is the least time a run's work takes: each endpoint's part of the answers at a full batch plus its part of the prefill the cache left. No client can take less than the smallest floor, %.0f s (%s), which bounds the column \"any client at most\": each run's wall time over that floor.\n",
			c.floor(runs[best]), runs[best].Name)
	}
	for _, r := range runs[1:] {
		extra := r.PrefillTokens - a.PrefillTokens
		fmt.Fprintf(w, "- %s computed %s prefill tokens more than %s: at %g µs a token over %d endpoints, %.0f s of each endpoint's time; its wall time differs by %.0f s.\n",
			r.Name, cli.Thousands(extra), a.Name, c.prefillUS, c.endpoints, c.prefillS(extra), r.SimWallS-a.SimWallS)
	}
}
