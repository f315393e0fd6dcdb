package forecast

// A sampling mixture's run (infer --mix): each arm has its own answer
// lengths (thinking arms write far longer) and its own max_tokens, so the
// run's lengths are the arms' capped lengths mixed in the arms' shares.

// Capped is D cut at Limit: an answer that would be longer ends there.
type Capped struct {
	D     Dist
	Limit float64
}

func (c Capped) Surv(x float64) float64 {
	if x >= c.Limit {
		return 0
	}
	return c.D.Surv(x)
}

func (c Capped) PE(k int, a, b float64) float64 {
	if b <= a {
		return 0
	}
	pe := c.D.PE(k, a, min(b, c.Limit))
	if a < c.Limit && c.Limit <= b {
		// The mass at the limit: answers cut there.
		l := c.Limit
		if k == 2 {
			l *= c.Limit
		}
		pe += l * c.D.Surv(c.Limit)
	}
	return pe
}

// Part is one arm of a Mixture: its share of the answers and its lengths.
type Part struct {
	Weight float64
	D      Dist
}

// Mixture is the lengths of answers drawn from the parts in their shares
// (the weights add up to 1).
type Mixture []Part

func (m Mixture) Surv(x float64) float64 {
	var s float64
	for _, p := range m {
		s += p.Weight * p.D.Surv(x)
	}
	return s
}

func (m Mixture) PE(k int, a, b float64) float64 {
	var s float64
	for _, p := range m {
		s += p.Weight * p.D.PE(k, a, b)
	}
	return s
}
