package infer

import (
	"fmt"
	"strings"
	"sync/atomic"

	"tokenmill/lib/cli"
	"tokenmill/lib/openai"
	"tokenmill/lib/record"
	"tokenmill/lib/settings"
)

// Sampling mixtures (--mix FILE, lib/mix): every (id, sample) gets an
// arm from a hash of the id, the sample and --seed, so the same answer is
// asked under the same arm in every run, after --resume and --append,
// whatever the order of the answers or the requests in flight. The arm's
// params lie over the flags and --extra-body, under the record's own
// params; the arm's name and what the requests sent of its settings go in
// output.arm and output.arm_params (error.arm for a failure).

// armCounts are one arm's figures for the summary.
type armCounts struct {
	ok, failed, tokens atomic.Int64
}

// mixSeed is the seed the arms are drawn with: --seed, or 0.
func (r *runner) mixSeed() int64 {
	if r.cfg.Seed != nil {
		return *r.cfg.Seed
	}
	return 0
}

// assignArm gives j its arm, and works out what the arm's settings are
// once the record's params (p's) are laid over them; and notes the keys
// the record's params set, for j's settings (settings.go).
func (r *runner) assignArm(j *job, p *record.Prompt) error {
	j.params = settings.ParamKeys(p.Params)
	if r.cfg.Mix == nil {
		return nil
	}
	i := r.cfg.Mix.Pick(r.mixSeed(), j.id, j.sample)
	j.arm = i + 1
	sent, err := r.builder(j).ArmSent(p.Params, r.cfg.Mix.Arms[i].Keys)
	j.armSent = sent
	return err
}

// builder is the request builder of j: the run's, with j's arm.
func (r *runner) builder(j *job) *openai.Builder {
	if j.arm == 0 {
		return r.cfg.Builder
	}
	return r.cfg.Builder.WithArm(r.cfg.Mix.Arms[j.arm-1].Params)
}

// armName is j's arm's name, "" for none.
func (r *runner) armName(j *job) string {
	if j.arm == 0 {
		return ""
	}
	return r.cfg.Mix.Arms[j.arm-1].Name
}

// armDone counts an answer of j's arm, ok or failed.
func (r *runner) armDone(j *job, ok bool, tokens int) {
	if j.arm == 0 {
		return
	}
	a := &r.arms[j.arm-1]
	if ok {
		a.ok.Add(1)
		a.tokens.Add(int64(tokens))
	} else {
		a.failed.Add(1)
	}
}

// mixSummary is the summary's line on the arms.
func (r *runner) mixSummary() []string {
	if r.cfg.Mix == nil {
		return nil
	}
	parts := make([]string, len(r.cfg.Mix.Arms))
	for i, a := range r.cfg.Mix.Arms {
		c := &r.arms[i]
		parts[i] = fmt.Sprintf("%s %s answers (%s tokens)", a.Name, cli.Thousands(c.ok.Load()), cli.Thousands(c.tokens.Load()))
		if n := c.failed.Load(); n > 0 {
			parts[i] += fmt.Sprintf(", %s failed", cli.Thousands(n))
		}
	}
	return []string{"arms: " + strings.Join(parts, "; ")}
}
