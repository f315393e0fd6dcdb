package stats

import (
	"tokenmill/lib/quality"
	"tokenmill/lib/record"
)

// checker runs filter's quality checks in one parsing worker (--checks).
type checker struct {
	parity *parityChecker   // nil: no --tokenizer
	c      *quality.Checker // nil: no --checks
	rec    quality.GenerationView
	found  []quality.Finding
}

// check adds to f what the checks find in the generation record line.
func (ck *checker) check(line []byte, f *fact) {
	if ck.parity != nil && f.tokens {
		f.parity = ck.parity.check(line)
	}
	if f.kind != record.KindGeneration || ck.c == nil {
		return
	}
	f.turn = -1
	if perr := ck.rec.Parse(line); perr != nil {
		f.reason, f.detail = perr.Reason, perr.Err.Error()
		return
	}
	f.answers = len(ck.rec.Answers)
	ck.c.SetModes(&ck.rec)
	for i := range ck.rec.Answers {
		a := &ck.rec.Answers[i]
		ck.found = ck.c.All(a, ck.rec.Tools(), ck.found[:0])
		for _, x := range ck.found {
			f.failed |= 1 << checkBit(x.Check)
		}
		if f.reason == "" && len(ck.found) > 0 {
			f.reason, f.detail = ck.found[0].Check, ck.found[0].Detail
			if ck.rec.Conversation {
				f.turn = i
			}
		}
	}
}

func checkBit(name string) int {
	for i, c := range quality.Checks {
		if c == name {
			return i
		}
	}
	return 0
}

// checkAgg counts what the checks found.
type checkAgg struct {
	checks                  []string
	records, answers, unfit int64
	byReason                map[string]*int64
	perCheck                [8]int64
	examples                [8][]CheckExample
}

func newCheckAgg(checks []string) *checkAgg {
	return &checkAgg{checks: checks, byReason: map[string]*int64{}}
}

func (c *checkAgg) add(f *fact, file string, line int64) {
	c.records++
	c.answers += int64(f.answers)
	if f.reason == "" {
		return
	}
	c.unfit++
	*bounded(c.byReason, f.reason, maxFinish, func() *int64 { return new(int64) })++
	for i := range quality.Checks {
		if f.failed&(1<<i) == 0 {
			continue
		}
		c.perCheck[i]++
		if len(c.examples[i]) < maxExamples {
			ex := CheckExample{ID: f.id.text(), Sample: f.sample, File: file, Line: line}
			if f.reason == quality.Checks[i] {
				ex.Detail = f.detail
				if f.turn >= 0 {
					turn := f.turn
					ex.Turn = &turn
				}
			}
			c.examples[i] = append(c.examples[i], ex)
		}
	}
}

func (c *checkAgg) report() *Checks {
	r := &Checks{Checks: c.checks, Records: c.records, Answers: c.answers, Fit: c.records - c.unfit, Unfit: c.unfit,
		ByReason: counts(derefCounts(c.byReason)), PerCheck: []CheckCount{}}
	for i, name := range quality.Checks {
		on := false
		for _, x := range c.checks {
			on = on || x == name
		}
		if !on {
			continue
		}
		r.PerCheck = append(r.PerCheck, CheckCount{Check: name, Count: c.perCheck[i], Examples: append([]CheckExample{}, c.examples[i]...)})
	}
	return r
}
