package fleet

import "tokenmill/lib/forecast"

// decodeFit is the line latency = q + tokens/v over an endpoint's recent
// answers, each weighted a little less than the next. A request that
// waited in the server's queue waited whatever its length, so the wait
// goes into q and v stays the speed at which one answer is written; the
// endpoint's output over v is then how many it writes at once, its
// effective concurrency.
type decodeFit struct{ fit forecast.SpeedFit }

const (
	// decodeDecay weighs the fit toward the last few hundred answers.
	decodeDecay = 0.995
	// decodeMinAnswers is the weight of answers a speed needs.
	decodeMinAnswers = 8
	// decodeMinSpread: answers of (nearly) one length, their variance
	// under 1% of their mean square, say nothing of the slope.
	decodeMinSpread = 0.01
)

func (d *decodeFit) add(tokens, latency float64) {
	if tokens <= 0 || latency <= 0 {
		return
	}
	d.fit.AddDecayed(tokens, latency, decodeDecay)
}

// speed is v, the tokens per second of one answer; 0 before there is
// enough to go on.
func (d *decodeFit) speed() float64 {
	if d.fit.N() < decodeMinAnswers {
		return 0
	}
	if v, _, ok := d.fit.Line(decodeMinSpread); ok {
		return v
	}
	v, _ := d.fit.Origin() // through the origin: waits counted as writing
	return v
}

// effective is how many answers the endpoint writes at once, given its
// output in tokens per second; 0 when unknown.
func (d *decodeFit) effective(tokPerSec float64) float64 {
	v := d.speed()
	if v <= 0 || tokPerSec <= 0 {
		return 0
	}
	return tokPerSec / v
}
