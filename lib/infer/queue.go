package infer

import (
	"sync"

	"tokenmill/lib/record"
)

// job is one answer to generate: a prompt record and a sample number.
type job struct {
	prompt []byte // the record, any old output/error field removed
	id     string
	sample int
	body   []byte
	file   string
	line   int64

	attempts int       // requests that got an answer or an error (refused connections do not count)
	last     *endpoint // where the last attempt went
}

// readyQueue holds answers whose backoff is over, to be dispatched before
// new input, and wakes the dispatcher when one arrives or a job ends.
type readyQueue struct {
	mu     sync.Mutex
	jobs   []*job
	notify chan struct{}
}

func newReadyQueue() *readyQueue { return &readyQueue{notify: make(chan struct{}, 1)} }

func (q *readyQueue) push(j *job) {
	q.mu.Lock()
	q.jobs = append(q.jobs, j)
	q.mu.Unlock()
	q.wake()
}

func (q *readyQueue) pop() *job {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs) == 0 {
		return nil
	}
	j := q.jobs[0]
	q.jobs[0] = nil
	q.jobs = q.jobs[1:]
	return j
}

func (q *readyQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.jobs)
}

// wake signals the dispatcher; a signal sent while it is busy is kept.
func (q *readyQueue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// finishReason files an answer's finish_reason under the summary's counts.
func (c *counters) finishReason(reason string) {
	switch reason {
	case record.FinishStop:
		c.finishStop.Add(1)
	case record.FinishLength:
		c.finishLength.Add(1)
	default:
		c.finishOther.Add(1)
	}
}
