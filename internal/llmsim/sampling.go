package llmsim

// Sampling. A request's answer is drawn from a sample hash: the prompt's
// hash alone when the request decodes greedily (temperature 0, the
// request's or, when it sends none, Config.Temperature), so a prompt is
// answered alike whatever the seed; mixed with the request's seed when it
// samples, so the same seed gives the same answer and another seed
// another; and, sampling without a seed, mixed with a draw of the
// request's own (the run's seed, the endpoint and the request's number),
// so every request gets another answer. The answer's length, words,
// tool calls and degenerate-answer draw all come from it; its text still
// starts with the prompt's digest.

// sampleHash is the sample hash of request number n for the prompt with
// hash h.
func (e *Endpoint) sampleHash(h uint64, j *job, n uint64) uint64 {
	temp := e.f.cfg.Temperature
	if j.temperature != nil {
		temp = *j.temperature
	}
	switch {
	case !(temp > 0):
		return h
	case j.seed != nil:
		return mix64(h ^ mix64(uint64(*j.seed)+0x5851f42d4c957f2d))
	}
	return mix64(h ^ mix64(e.f.cfg.Seed^uint64(e.index+1)<<48^n*0x9e3779b97f4a7c15^0x14057b7ef767814f))
}
