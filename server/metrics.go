package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/runtime/store"
)

// metrics are the service's Prometheus metrics (docs/service.md), in a registry of
// its own so that two servers in one process (tests) do not collide.
type metrics struct {
	reg       *prometheus.Registry
	decisions *prometheus.CounterVec
	throttled prometheus.Counter
	duration  prometheus.Histogram
	http      *prometheus.CounterVec
	httpTime  *prometheus.HistogramVec
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lineage_decisions_total", Help: "Verdicts answered to requests (retries included), approvals and rejections, by decision and reason.",
	}, []string{"decision", "reason"})
	m.throttled = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lineage_requests_throttled_total", Help: "Calls of agent tokens refused 429 too_many_requests: over the agent's request quota, nothing recorded.",
	})
	m.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "lineage_decision_duration_seconds", Help: "Time to decide and durably record a request, approval or rejection.",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
	})
	m.http = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lineage_http_requests_total", Help: "HTTP requests by route and status code.",
	}, []string{"route", "code"})
	m.httpTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "lineage_http_request_duration_seconds", Help: "HTTP request durations by route.",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 18),
	}, []string{"route"})
	pending := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lineage_pending_requests", Help: "Requests awaiting a decision, over the agents loaded.",
	}, func() float64 { return float64(s.rt.LoadedPending()) })
	loaded := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lineage_agents_loaded", Help: "Agents whose state is in memory: the runtime's table, bounded by --max-agents.",
	}, func() float64 { return float64(s.rt.Loaded()) })
	m.reg.MustRegister(m.decisions, m.throttled, m.duration, m.http, m.httpTime, pending, loaded,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if s.cfg.SyncStats != nil {
		m.reg.MustRegister(&syncCollector{stats: s.cfg.SyncStats, desc: prometheus.NewDesc(
			"lineage_store_sync_duration_seconds", "Duration of one store sync (group commit): p50 and p99 since the store opened.", nil, nil)})
	}
	return m
}

// decided counts a verdict and how long it took.
func (m *metrics) decided(v lineage.Verdict, took time.Duration) {
	m.decisions.WithLabelValues(string(v.Decision), reasonLabel(v.Reason)).Inc()
	m.duration.Observe(took.Seconds())
}

// syncCollector reports the file store's commit statistics as a summary.
type syncCollector struct {
	stats func() store.CommitStats
	desc  *prometheus.Desc
}

func (c *syncCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *syncCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	ch <- prometheus.MustNewConstSummary(c.desc, uint64(st.Syncs), 0, map[float64]float64{
		0.5: st.SyncP50.Seconds(), 0.99: st.SyncP99.Seconds(), 1: st.SyncMax.Seconds(),
	})
}

// fixedReasons are the reasons the runtime itself gives (docs/decision-order.md).
// Any other reason was chosen by a policy's constraint or an extension, maybe
// from args: as a label value it would let traffic make series without bound
// and carry its text into every scrape, so it is counted as "extension"
// (D234, metric labels from fixed sets).
var fixedReasons = map[string]bool{
	"ok": true, "approval_required": true, "approval_rejected": true, "terminated": true,
	"unlisted_tool": true, "rate_limited": true, "max_calls_exceeded": true, "invalid_args": true,
	"insufficient_budget": true, "too_many_pending": true, "extension_error": true,
}

// reasonLabel is a verdict's reason as a label value: one of fixedReasons or "extension".
func reasonLabel(reason string) string {
	if fixedReasons[reason] {
		return reason
	}
	return "extension"
}
