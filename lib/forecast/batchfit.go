package forecast

import "math"

// BatchFit is the time an answer takes as a function of its length and of
// how many answers its server writes beside it: a server's decode step
// costs a + b*n seconds with n answers in the batch (the weights read once
// a step, plus a share per answer), and an answer of L tokens that saw a
// batch of nbar on average takes about q + L*(a + b*nbar). At the end of
// a run the batch empties and the last answers go faster, by as much as b
// says; a short run is mostly its end.
//
// (q, a, b) are fitted by least squares with priors: while every answer
// saw the same batch (the middle of a long run), the data cannot tell a
// from b, and the prior says the batch's share of a step is between none
// and about half; the posterior's spread is carried into the forecast's
// range.
type BatchFit struct {
	n   float64
	xx  [3][3]float64 // sums of x_i x_j over answers, x = (1, L, L*nbar)
	xy  [3]float64    // sums of x_i * seconds
	yy  float64
	sn  float64 // sum of nbar: the batch the answers saw
	sy1 float64 // sum of seconds
	sl  float64 // sum of L
}

// Add counts an answer of tokens tokens written in seconds (from when it
// was taken as being written) beside nbar answers on average, itself
// included.
func (f *BatchFit) Add(tokens, seconds, nbar float64) {
	x := [3]float64{1, tokens, tokens * nbar}
	for i := range x {
		for j := range x {
			f.xx[i][j] += x[i] * x[j]
		}
		f.xy[i] += x[i] * seconds
	}
	f.n++
	f.yy += seconds * seconds
	f.sn += nbar
	f.sy1 += seconds
	f.sl += tokens
}

// N is the number of answers counted.
func (f *BatchFit) N() float64 { return f.n }

// Step is the fitted cost model: Q seconds an answer pays whatever its
// length, A + B*n seconds per token in a batch of n. The posterior is
// kept as the mean and covariance of beta = (q, c*ls, b*nref*ls), where c
// = a + b*nref is the cost of a token at the batch the answers saw (nref)
// and ls their mean length: coordinates in seconds, nearly independent
// of one another.
type Step struct {
	Q, A, B  float64
	nref, ls float64
	Mean     [3]float64
	Cov      [3][3]float64
}

// PerToken is the seconds a token takes in a batch of n.
func (s Step) PerToken(n float64) float64 { return s.A + s.B*max(n, 1) }

// fromBeta is the cost model of beta, kept where a cost model makes sense:
// no negative cost, and a step's base at least a twentieth of what a token
// costs at the batch the answers saw.
func (s Step) fromBeta(beta [3]float64) Step {
	out := s
	out.Mean = beta
	c := max(beta[1]/s.ls, 1e-12)
	b := max(beta[2]/(s.ls*s.nref), 0)
	b = min(b, 0.95*c/s.nref)
	out.Q, out.A, out.B = max(beta[0], 0), c-b*s.nref, b
	return out
}

// Fit is the posterior of the cost model, false while fewer than three
// answers were counted or none had tokens.
func (f *BatchFit) Fit() (Step, bool) {
	if f.n < 3 || f.sl <= 0 || f.sy1 <= 0 {
		return Step{}, false
	}
	nref := max(f.sn/f.n, 1)
	ls := f.sl / f.n
	ybar := f.sy1 / f.n
	// x = T (1, L, L*nbar): (1, L/ls, L*(nbar-nref)/(ls*nref)).
	tm := [3][3]float64{{1, 0, 0}, {0, 1 / ls, 0}, {0, -1 / ls, 1 / (ls * nref)}}
	var m [3][3]float64
	var r [3]float64
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			for k := 0; k < 3; k++ {
				for l := 0; l < 3; l++ {
					m[i][j] += tm[i][k] * f.xx[k][l] * tm[j][l]
				}
			}
		}
		for k := 0; k < 3; k++ {
			r[i] += tm[i][k] * f.xy[k]
		}
	}
	// Sums of nearly equal terms cancel: keep the matrix a Gram matrix.
	for i := 0; i < 3; i++ {
		m[i][i] = max(m[i][i], 0)
	}
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			if i != j {
				lim := math.Sqrt(m[i][i] * m[j][j])
				m[i][j] = min(max(m[i][j], -lim), lim)
			}
		}
	}
	// The residual variance: about the line on length alone, floored so
	// that a run of identical answers still has a spread.
	s2 := max(f.lineResidual(), 1e-4*ybar*ybar)
	var p [3][3]float64
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			p[i][j] = m[i][j] / s2
		}
		r[i] /= s2
	}
	// Priors, in seconds: the overhead small unless the lengths say
	// otherwise; the cost of an answer's tokens free; b*nref*ls, the share
	// of the batch in an answer's time, anywhere from none to nearly all.
	p[0][0] += 1 / (0.3 * ybar * 0.3 * ybar)
	p[1][1] += 1 / (10 * ybar * 10 * ybar)
	p[2][2] += 1 / (ybar * ybar)
	cov, ok := inv3(p)
	if !ok {
		return Step{}, false
	}
	var beta [3]float64
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			beta[i] += cov[i][j] * r[j]
		}
	}
	st := Step{nref: nref, ls: ls, Cov: cov}.fromBeta(beta)
	return st, st.PerToken(nref) > 0
}

// lineResidual is the variance of seconds about the least-squares line on
// length alone.
func (f *BatchFit) lineResidual() float64 {
	n, sx, sxx := f.xx[0][0], f.xx[0][1], f.xx[1][1]
	sy, sxy := f.xy[0], f.xy[1]
	den := n*sxx - sx*sx
	if den <= 0 || n < 3 {
		mean := sy / n
		return max(f.yy/n-mean*mean, 0)
	}
	slope := (n*sxy - sx*sy) / den
	icpt := (sy - slope*sx) / n
	rss := f.yy - 2*icpt*sy - 2*slope*sxy + icpt*icpt*n + 2*icpt*slope*sx + slope*slope*sxx
	return max(rss, 0) / max(n-2, 1)
}

// inv3 inverts a symmetric 3x3 matrix.
func inv3(m [3][3]float64) ([3][3]float64, bool) {
	var c [3][3]float64
	c[0][0] = m[1][1]*m[2][2] - m[1][2]*m[2][1]
	c[0][1] = m[0][2]*m[2][1] - m[0][1]*m[2][2]
	c[0][2] = m[0][1]*m[1][2] - m[0][2]*m[1][1]
	c[1][0] = m[1][2]*m[2][0] - m[1][0]*m[2][2]
	c[1][1] = m[0][0]*m[2][2] - m[0][2]*m[2][0]
	c[1][2] = m[0][2]*m[1][0] - m[0][0]*m[1][2]
	c[2][0] = m[1][0]*m[2][1] - m[1][1]*m[2][0]
	c[2][1] = m[0][1]*m[2][0] - m[0][0]*m[2][1]
	c[2][2] = m[0][0]*m[1][1] - m[0][1]*m[1][0]
	det := m[0][0]*c[0][0] + m[0][1]*c[1][0] + m[0][2]*c[2][0]
	if !(math.Abs(det) > 0) || math.IsInf(det, 0) {
		return c, false
	}
	for i := range c {
		for j := range c[i] {
			c[i][j] /= det
		}
	}
	return c, true
}

// chol3 is the lower Cholesky factor of a symmetric positive
// semi-definite 3x3 matrix (negative pivots taken as zero).
func chol3(m [3][3]float64) [3][3]float64 {
	var l [3][3]float64
	for i := 0; i < 3; i++ {
		for j := 0; j <= i; j++ {
			s := m[i][j]
			for k := 0; k < j; k++ {
				s -= l[i][k] * l[j][k]
			}
			if i == j {
				l[i][i] = math.Sqrt(max(s, 0))
			} else if l[j][j] > 0 {
				l[i][j] = s / l[j][j]
			}
		}
	}
	return l
}
