package server

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/lineage-guard/lineage/api"

	"golang.org/x/time/rate"
)

// Request quotas (docs/service.md): each agent's token may make at most
// AgentRPS calls a second, in bursts of AgentBurst, at this server. A token
// bucket per agent, in this process's memory: on a shared store every node
// keeps its own (D263 (request quotas are per node)).
const (
	DefaultAgentRPS   = 100
	DefaultAgentBurst = 200
)

// quotaIdleAgents is how many agents' buckets are kept before the idle ones
// (full again) are dropped: a full bucket is what a new one would be.
const quotaIdleAgents = 4096

// quotas holds one token bucket per agent.
type quotas struct {
	limit rate.Limit // 0: no quota
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newQuotas(rps float64, burst int) *quotas {
	q := &quotas{buckets: map[string]*rate.Limiter{}}
	switch {
	case rps < 0:
		return q // off
	case rps == 0:
		rps = DefaultAgentRPS
	}
	if burst <= 0 {
		burst = DefaultAgentBurst
	}
	q.limit, q.burst = rate.Limit(rps), burst
	return q
}

// take spends one call of agent's quota. Over it, it returns how long until
// the call would be within it: the Retry-After of a 429.
func (q *quotas) take(agent string, now time.Time) (time.Duration, bool) {
	if q.limit == 0 {
		return 0, true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.buckets[agent]
	if l == nil {
		if len(q.buckets) >= quotaIdleAgents {
			for a, b := range q.buckets {
				if b.TokensAt(now) >= float64(q.burst) {
					delete(q.buckets, a)
				}
			}
		}
		l = rate.NewLimiter(q.limit, q.burst)
		q.buckets[agent] = l
	}
	if l.AllowN(now, 1) {
		return 0, true
	}
	// The bucket is short of one token by 1 - tokens; it refills at limit a second.
	missing := 1 - l.TokensAt(now)
	return time.Duration(missing / float64(q.limit) * float64(time.Second)), false
}

// tooManyRequests is the 429 of a call over its agent's quota: nothing was
// done, and Retry-After (whole seconds, at least 1) says when to try again.
func tooManyRequests(wait time.Duration, q *quotas) *httpError {
	secs := int(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	e := newError(api.CodeTooManyRequests,
		"this agent's token is over its request quota ("+strconv.FormatFloat(float64(q.limit), 'g', -1, 64)+
			" calls a second, bursts of "+strconv.Itoa(q.burst)+"): nothing was recorded; try again after "+strconv.Itoa(secs)+" s")
	e.retryAfter = secs
	return e
}
