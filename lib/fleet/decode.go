package fleet

// decodeFit is the least-squares line latency = q + tokens/v over an
// endpoint's recent answers, each weighted a little less than the next.
// A request that waited in the server's queue waited whatever its length,
// so the wait goes into q and v stays the speed at which one answer is
// written; the endpoint's output over v is then how many it writes at
// once, its effective concurrency.
type decodeFit struct{ n, sx, sy, sxx, sxy float64 }

// decodeDecay weighs the fit toward the last few hundred answers.
const decodeDecay = 0.995

func (d *decodeFit) add(tokens, latency float64) {
	if tokens <= 0 || latency <= 0 {
		return
	}
	d.n = d.n*decodeDecay + 1
	d.sx = d.sx*decodeDecay + tokens
	d.sy = d.sy*decodeDecay + latency
	d.sxx = d.sxx*decodeDecay + tokens*tokens
	d.sxy = d.sxy*decodeDecay + tokens*latency
}

// speed is v, the tokens per second of one answer; 0 before there is
// enough to go on.
func (d *decodeFit) speed() float64 {
	if d.n < 8 {
		return 0
	}
	den := d.n*d.sxx - d.sx*d.sx
	// Answers of (nearly) one length say nothing of the slope.
	if den > 0.01*d.n*d.sxx {
		if slope := (d.n*d.sxy - d.sx*d.sy) / den; slope > 0 {
			return 1 / slope
		}
	}
	if d.sxy > 0 {
		return d.sxx / d.sxy // through the origin: waits counted as writing
	}
	return 0
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
