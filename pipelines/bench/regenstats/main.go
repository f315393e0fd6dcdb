// Command regenstats reads the request log of an llmsim fleet
// (llmsim --request-log) after a run that regenerated conversations, and
// prints what the fleet's prefix caches did: prompt tokens, cached tokens,
// prefill tokens computed, and the share of history tokens served from
// cache. A request's history is its messages up to and including the last
// assistant turn: what the server saw in an earlier turn of the same
// conversation, and all a prefix cache can serve (the new user turn is
// always computed). Tokens are counted as llmsim charges them (4 bytes a
// token, 4 more per message: llmsim.TextTokens and its chat template).
// With --table it renders the lines it printed for several runs as the
// benchmark's table instead, each run against the first.
//
//	regenstats --wall 61.2 --scale 10 --name "infer --regenerate" requests.jsonl >>results.jsonl
//	regenstats --table results.jsonl
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"

	"github.com/segmentio/encoding/json"

	"tokenmill/lib/llmsim"
)

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

// run is one measured run, as printed.
type run struct {
	Name           string  `json:"name"`
	Requests       int64   `json:"requests"`
	FailedRequests int64   `json:"failed_requests"`
	LaterTurns     int64   `json:"later_turns"`
	PromptTokens   int64   `json:"prompt_tokens"`
	CachedTokens   int64   `json:"cached_tokens"`
	PrefillTokens  int64   `json:"prefill_tokens"`
	HistoryTokens  int64   `json:"history_tokens"`
	HistoryCached  int64   `json:"history_cached"`
	WallS          float64 `json:"wall_s"`
	SimWallS       float64 `json:"sim_wall_s"`
	CacheHitPct    float64 `json:"cache_hit_pct"`
	HistoryHitPct  float64 `json:"history_hit_pct"`
}

func main() {
	name := flag.String("name", "", "the row's name")
	wall := flag.Float64("wall", 0, "the run's wall time in real seconds")
	scale := flag.Float64("scale", 1, "llmsim's --time-scale: simulated seconds per real second")
	table := flag.Bool("table", false, "render the runs in FILE (lines printed by earlier calls) as a markdown table")
	prefillUS := flag.Float64("prefill-us", 40, "with --table: the fleet's prefill cost per prompt token, in microseconds (llmsim's --prefill-per-token)")
	endpoints := flag.Int("endpoints", 8, "with --table: the fleet's endpoints")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: regenstats [--name N --wall S --scale X] REQUEST_LOG | regenstats --table RESULTS")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "regenstats:", err)
		os.Exit(1)
	}
	defer f.Close()
	if *table {
		if err := render(f, *prefillUS, *endpoints); err != nil {
			fmt.Fprintln(os.Stderr, "regenstats:", err)
			os.Exit(1)
		}
		return
	}
	var requests, later, failed, prompt, cached, history, historyCached int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			fmt.Fprintln(os.Stderr, "regenstats:", err)
			os.Exit(1)
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
		fmt.Fprintln(os.Stderr, "regenstats:", err)
		os.Exit(1)
	}
	r := run{Name: *name, Requests: requests, FailedRequests: failed, LaterTurns: later, PromptTokens: prompt, CachedTokens: cached,
		PrefillTokens: prompt - cached, HistoryTokens: history, HistoryCached: historyCached, WallS: *wall, SimWallS: *wall * *scale}
	if prompt > 0 {
		r.CacheHitPct = 100 * float64(cached) / float64(prompt)
	}
	if history > 0 {
		r.HistoryHitPct = 100 * float64(historyCached) / float64(history)
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

// render prints the runs as a table, the first run the reference of the
// "vs. the first row" column, the targets, and what the extra prefill of
// each other run costs at prefillUS a token over the endpoints.
func render(f *os.File, prefillUS float64, endpoints int) error {
	var runs []run
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r run
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return err
		}
		runs = append(runs, r)
	}
	if err := sc.Err(); err != nil || len(runs) == 0 {
		return err
	}
	fmt.Println("| client | wall (simulated) | vs. the first row | requests | prompt tokens | served from cache | prefill computed | history served from cache |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		fmt.Printf("| %s | %.0f s | %.2f× | %s | %s | %s (%.1f%%) | %s | %.1f%% |\n", r.Name, r.SimWallS, r.SimWallS/runs[0].SimWallS,
			thousands(r.Requests), thousands(r.PromptTokens), thousands(r.CachedTokens), r.CacheHitPct, thousands(r.PrefillTokens), r.HistoryHitPct)
	}
	fmt.Println()
	fmt.Println("| target | measured | met |")
	fmt.Println("|---|---|---|")
	a := runs[0]
	met := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	fmt.Printf("| %s: ≥ 90%% of history tokens served from cache | %.1f%% | %s |\n", a.Name, a.HistoryHitPct, met(a.HistoryHitPct >= 90))
	for _, r := range runs[1:] {
		ratio := r.SimWallS / a.SimWallS
		fmt.Printf("| %s ≥ 1.3× faster than %s | %.2f× | %s |\n", a.Name, r.Name, ratio, met(ratio >= 1.3))
	}
	fmt.Println()
	for _, r := range runs[1:] {
		extra := r.PrefillTokens - a.PrefillTokens
		cost := float64(extra) * prefillUS / 1e6 / float64(endpoints)
		fmt.Printf("- %s computed %s prefill tokens more than %s: at %g µs a token over %d endpoints, %.0f s of each endpoint's time; its wall time differs by %.0f s.\n",
			r.Name, thousands(extra), a.Name, prefillUS, endpoints, cost, r.SimWallS-a.SimWallS)
	}
	return nil
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
