package mix

import (
	"fmt"

	"tokenmill/lib/cli"
)

// Check checks, while a file of answers is read to be continued, that
// each answer in it was asked under the arm this run's mixture and seed
// give it: a run continued under another mixture would mix two
// assignments in one file.
type Check struct {
	m          *Mix // nil: the run has none, and no answer may have an arm
	seed       int64
	mismatched int64
	first      string
}

// NewCheck checks answers against m (nil: no mixture) drawn with seed.
func NewCheck(m *Mix, seed int64) *Check { return &Check{m: m, seed: seed} }

// See checks one answer read, whose arm is arm ("": none).
func (a *Check) See(id string, sample int, arm string) {
	want := ""
	if a.m != nil {
		want = a.m.Arms[a.m.Pick(a.seed, id, sample)].Name
	}
	if arm == want {
		return
	}
	if a.mismatched == 0 {
		a.first = fmt.Sprintf("id %q sample %d: %s in the file, %s now", id, sample, armText(arm), armText(want))
	}
	a.mismatched++
}

func armText(arm string) string {
	if arm == "" {
		return "no arm"
	}
	return fmt.Sprintf("arm %q", arm)
}

// Err is the refusal when answers of the file at path disagree, nil when
// none do.
func (a *Check) Err(path string) error {
	if a.mismatched == 0 {
		return nil
	}
	how := "with the --mix and --seed of the run that wrote them"
	if a.m == nil {
		how = "with the --mix (and --seed) of the run that wrote them"
	}
	return cli.Usagef("%s holds %s answers asked under other arms than this run gives them (%s): continue it %s, or write to another -o",
		path, cli.Thousands(a.mismatched), a.first, how)
}
