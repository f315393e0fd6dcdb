package bench

import (
	"fmt"
	"math"
	"strings"

	"tokenmill/lib/cli"
	"tokenmill/lib/forecast"
	"tokenmill/lib/openai"
)

// A sampling mixture (--mix FILE, as infer --mix): every sample prompt is
// asked under the arm the run would ask it under (drawn as a run without
// --seed draws it), so the levels measure the mixed run's throughput; the
// answer lengths are fitted per arm, each cut at its own max_tokens, and
// the forecast's lengths are their mixture in the arms' shares. Thinking
// arms write far longer answers: a mean over the sample alone would follow
// the sample's draw of arms, not the shares the run will have.

// ArmForecast is one arm's part of the forecast.
type ArmForecast struct {
	Arm   string  `json:"arm"`
	Share float64 `json:"share"`
	// Answers are the sample answers of the arm that ended on their own
	// (the fit's exact lengths); MeanAnswerTokens its mean answer, cut at
	// MaxTokens (the arm's, else --max-tokens, else the model's context or a 32,768 limit).
	Answers int `json:"answers"`
	// Capped: every sample answer of the arm (but at most one) ran to its
	// max_tokens, so its answers are as long as that; their count.
	Capped           int     `json:"capped_answers,omitempty"`
	MeanAnswerTokens float64 `json:"mean_answer_tokens"`
	MeanAnswerSE     float64 `json:"mean_answer_tokens_se"`
	MaxTokens        int     `json:"max_tokens"`
}

// armOf is the arm of the sample prompt (id, sample) and the builder of
// its requests; 0 and b without a mixture.
func (cfg *Config) armOf(b *openai.Builder, id string, sample int) (int, *openai.Builder) {
	if cfg.Mix == nil {
		return 0, b
	}
	i := cfg.Mix.Pick(0, id, sample)
	return i + 1, b.WithArm(cfg.Mix.Arms[i].Params)
}

// setArms takes the arms of the bodies.
func (r *benchRun) setArms(arms []int) {
	if r.cfg.Mix == nil {
		return
	}
	r.arms = append([]int(nil), arms...)
	r.armObs = make([]lengthObs, len(r.cfg.Mix.Arms))
}

// armOf is the arm of body k, 0 for none.
func (r *benchRun) armOf(k int) int {
	if k < len(r.arms) {
		return r.arms[k]
	}
	return 0
}

// armLimit is the longest answer of arm i in the run: its max_tokens,
// else --max-tokens, else uncapped.
func (cfg *Config) armLimit(i, uncapped int) int {
	if n := cfg.Mix.Arms[i].MaxTokens(); n > 0 {
		return n
	}
	if cfg.Plan.MaxTokens > 0 {
		return cfg.Plan.MaxTokens
	}
	return uncapped
}

// armBenchCap is the max_tokens the bench asked arm i's prompts with: the
// arm's own, else the bench's (0: none).
func (cfg *Config) armBenchCap(i int) int {
	if n := cfg.Mix.Arms[i].MaxTokens(); n > 0 {
		return n
	}
	return cfg.AnswerTokens
}

// mixLengths are the run's answer lengths under the mixture: the arms'
// fits, each capped at its limit, in their shares; with the mean, its
// standard error and the standard deviation. A note says why there is no
// forecast (an arm none of whose sample answers ended on its own).
func (r *benchRun) mixLengths() (d forecast.Dist, limit, mean, se, sd float64, arms []ArmForecast, note string) {
	m := r.cfg.Mix
	var parts forecast.Mixture
	var m2, variance float64
	var missing []string
	for i, a := range m.Arms {
		lim := float64(r.cfg.armLimit(i, r.uncapped()))
		l, ok := r.armObs[i].lengths(float64(r.cfg.armBenchCap(i)), lim)
		if !ok {
			missing = append(missing, a.Name)
			continue
		}
		w := m.Share(i)
		c1, c2 := forecast.CappedMoments(l.d, lim)
		parts = append(parts, forecast.Part{Weight: w, D: forecast.Capped{D: l.d, Limit: lim}})
		mean += w * c1
		m2 += w * c2
		variance += w * w * l.se * l.se
		limit = max(limit, lim)
		arms = append(arms, ArmForecast{Arm: a.Name, Share: w, Answers: l.exact, Capped: l.capped, MeanAnswerTokens: c1, MeanAnswerSE: l.se, MaxTokens: int(lim)})
	}
	if len(missing) > 0 {
		return nil, 0, 0, 0, 0, nil, fmt.Sprintf("no sample answer of arm %s ended on its own, nor did all run to the run's max_tokens (cut by the level's end or a lower max_tokens, or too few prompts drew it): raise --sample, --duration or --answer-tokens, or give --mean-answer-tokens",
			strings.Join(missing, ", "))
	}
	return parts, limit, mean, math.Sqrt(variance), math.Sqrt(max(m2-mean*mean, 0)), arms, ""
}

// armsText is the forecast's line per arm.
func armsText(arms []ArmForecast) string {
	var b strings.Builder
	for _, a := range arms {
		seen := cli.Thousands(int64(a.Answers)) + " sample answers"
		if a.Capped > 0 {
			seen = fmt.Sprintf("%s sample answers ran to it", cli.Thousands(int64(a.Capped)))
		}
		fmt.Fprintf(&b, "  arm %s (%s): %s±%s tokens, up to %s (%s)\n", a.Arm, strings.TrimSuffix(fmt.Sprintf("%.1f", 100*a.Share), ".0")+"%",
			cli.Thousands(int64(a.MeanAnswerTokens+0.5)), cli.Thousands(int64(a.MeanAnswerSE+0.5)), cli.Thousands(int64(a.MaxTokens)), seen)
	}
	return b.String()
}
