package dashboard

import (
	"bytes"
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed page.html
var page []byte

// Report is one rank's step. Durations are seconds in JSON.
type Report struct {
	Rank     int     `json:"rank"`
	Step     int     `json:"step"`
	Epoch    int     `json:"epoch"`
	Loss     float64 `json:"loss"`
	Samples  int     `json:"samples"` // samples this step, on this rank
	Seconds  float64 `json:"seconds"` // the whole step
	Compute  float64 `json:"compute"` // forward, backward, optimizer (minus exposed comm)
	Comm     float64 `json:"comm"`    // communication not hidden behind compute
	DataWait float64 `json:"data"`    // waiting for the batch
	Bytes    int64   `json:"bytes"`   // bytes all-reduced this step
	Time     int64   `json:"time_ms"` // Unix milliseconds when the step ended
}

// RankState is what the page shows per rank.
type RankState struct {
	Rank     int     `json:"rank"`
	Step     int     `json:"step"`
	Loss     float64 `json:"loss"`
	Compute  float64 `json:"compute"` // moving averages, seconds
	Comm     float64 `json:"comm"`
	DataWait float64 `json:"data"`
	LastSeen int64   `json:"last_seen_ms"`
}

// Point is one step of the run's curves (rank 0's loss, all ranks' samples/s).
type Point struct {
	Step       int     `json:"step"`
	Loss       float64 `json:"loss"`
	Throughput float64 `json:"throughput"`
}

// State is the JSON the page polls.
type State struct {
	Name     string      `json:"name"`
	World    int         `json:"world"`
	Restarts int         `json:"restarts"`
	Ranks    []RankState `json:"ranks"`
	Curve    []Point     `json:"curve"`
	Notes    []string    `json:"notes"`
	Now      int64       `json:"now_ms"`
}

// maxPoints bounds the curve: beyond it every other point is dropped.
const maxPoints = 2000

// Hub collects a run's reports. Its methods are safe for concurrent use.
type Hub struct {
	mu       sync.Mutex
	name     string
	world    int
	restarts int
	ranks    map[int]*RankState
	curve    []Point
	stride   int // record every stride-th step once the curve has been halved
	notes    []string
	token    string

	reg                          *prometheus.Registry
	steps, samples, bytes, phase *prometheus.CounterVec
	loss                         prometheus.Gauge
	stepTime                     *prometheus.HistogramVec
	restartsTotal                prometheus.Counter
}

// NewHub returns the hub of a run of world ranks. token, if not empty,
// must accompany reports posted by other ranks (Client sends it).
func NewHub(name string, world int, token string) *Hub {
	h := &Hub{name: name, world: world, ranks: map[int]*RankState{}, stride: 1, token: token, reg: prometheus.NewRegistry()}
	h.steps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cohort_steps_total", Help: "Training steps finished, per rank."}, []string{"rank"})
	h.samples = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cohort_samples_total", Help: "Samples trained on, per rank."}, []string{"rank"})
	h.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cohort_allreduce_bytes_total", Help: "Bytes all-reduced, per rank."}, []string{"rank"})
	h.phase = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cohort_step_phase_seconds_total", Help: "Step time by phase (compute, comm = exposed communication, data = waiting for data), per rank."}, []string{"rank", "phase"})
	h.loss = prometheus.NewGauge(prometheus.GaugeOpts{Name: "cohort_loss", Help: "Rank 0's latest training loss."})
	h.stepTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cohort_step_seconds", Help: "Step time, per rank.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"rank"})
	h.restartsTotal = prometheus.NewCounter(prometheus.CounterOpts{Name: "cohort_restarts_total", Help: "Restarts of the job's workers."})
	h.reg.MustRegister(h.steps, h.samples, h.bytes, h.phase, h.loss, h.stepTime, h.restartsTotal)
	return h
}

// Record adds a step report.
func (h *Hub) Record(r Report) {
	if r.Time == 0 {
		r.Time = time.Now().UnixMilli()
	}
	rk := strconv.Itoa(r.Rank)
	h.steps.WithLabelValues(rk).Inc()
	h.samples.WithLabelValues(rk).Add(float64(r.Samples))
	h.bytes.WithLabelValues(rk).Add(float64(r.Bytes))
	h.phase.WithLabelValues(rk, "compute").Add(r.Compute)
	h.phase.WithLabelValues(rk, "comm").Add(r.Comm)
	h.phase.WithLabelValues(rk, "data").Add(r.DataWait)
	h.stepTime.WithLabelValues(rk).Observe(r.Seconds)
	if r.Rank == 0 {
		h.loss.Set(r.Loss)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.ranks[r.Rank]
	if s == nil {
		s = &RankState{Rank: r.Rank, Compute: r.Compute, Comm: r.Comm, DataWait: r.DataWait}
		h.ranks[r.Rank] = s
	}
	const a = 0.2 // moving-average weight of the newest step
	s.Step, s.Loss, s.LastSeen = r.Step, r.Loss, r.Time
	s.Compute += a * (r.Compute - s.Compute)
	s.Comm += a * (r.Comm - s.Comm)
	s.DataWait += a * (r.DataWait - s.DataWait)
	if r.Rank != 0 || r.Step%h.stride != 0 {
		return
	}
	tput := 0.0
	if r.Seconds > 0 {
		tput = float64(r.Samples) * float64(max(h.world, 1)) / r.Seconds
	}
	h.curve = append(h.curve, Point{Step: r.Step, Loss: r.Loss, Throughput: tput})
	if len(h.curve) >= maxPoints {
		kept := h.curve[:0]
		for i, p := range h.curve {
			if i%2 == 0 {
				kept = append(kept, p)
			}
		}
		h.curve = kept
		h.stride *= 2
	}
}

// Restart records a restart of the job's workers.
func (h *Hub) Restart() {
	h.restartsTotal.Inc()
	h.mu.Lock()
	h.restarts++
	h.mu.Unlock()
}

// Note shows msg on the page (the last 20 are kept).
func (h *Hub) Note(msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notes = append(h.notes, time.Now().Format("15:04:05 ")+msg)
	if len(h.notes) > 20 {
		h.notes = h.notes[len(h.notes)-20:]
	}
}

// State returns a copy of what the page shows.
func (h *Hub) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := State{Name: h.name, World: h.world, Restarts: h.restarts, Curve: slices.Clone(h.curve), Notes: slices.Clone(h.notes), Now: time.Now().UnixMilli()}
	for _, r := range h.ranks {
		s.Ranks = append(s.Ranks, *r)
	}
	slices.SortFunc(s.Ranks, func(a, b RankState) int { return a.Rank - b.Rank })
	return s
}

// maxReportBytes bounds one POST of reports.
const maxReportBytes = 1 << 20

// Handler serves the page, /api/state, /api/report and /metrics.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h.State())
	})
	mux.HandleFunc("POST /api/report", func(w http.ResponseWriter, r *http.Request) {
		if h.token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+h.token)) != 1 {
			http.Error(w, "dashboard: bad token", http.StatusUnauthorized)
			return
		}
		var reports []Report
		if err := json.NewDecoder(io.LimitReader(r.Body, maxReportBytes)).Decode(&reports); err != nil {
			http.Error(w, "dashboard: "+err.Error(), http.StatusBadRequest)
			return
		}
		for _, rep := range reports {
			h.Record(rep)
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{}))
	return mux
}

// Server serves a hub over HTTP.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Serve listens on addr (":0" picks a port) and serves h until Close.
func Serve(addr string, h *Hub) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	s := &Server{srv: &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}, ln: ln, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }() // owned by s: ends at Close
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server (within a second for open connections).
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	return err
}

// Client posts a rank's reports to the hub at addr (host:port), batched:
// at most one request per second, dropping the oldest reports beyond 1000
// queued if the hub is unreachable (the page is best effort; training
// never waits for it).
type Client struct {
	url, token string
	mu         sync.Mutex
	queue      []Report
	kick       chan struct{}
	stop       chan struct{}
	done       chan struct{}
	http       *http.Client
}

// NewClient starts posting to the hub at addr.
func NewClient(addr, token string) *Client {
	c := &Client{url: "http://" + addr + "/api/report", token: token, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), http: &http.Client{Timeout: 5 * time.Second}}
	go c.loop() // owned by c: ends at Close
	return c
}

// Record queues a report.
func (c *Client) Record(r Report) {
	if r.Time == 0 {
		r.Time = time.Now().UnixMilli()
	}
	c.mu.Lock()
	c.queue = append(c.queue, r)
	if len(c.queue) > 1000 {
		c.queue = c.queue[len(c.queue)-1000:]
	}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Client) loop() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			c.flush()
			return
		case <-c.kick:
		}
		c.flush()
		select {
		case <-c.stop:
			c.flush()
			return
		case <-time.After(time.Second):
		}
	}
}

func (c *Client) flush() {
	c.mu.Lock()
	batch := c.queue
	c.queue = nil
	c.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	body, _ := json.Marshal(batch)
	req, err := http.NewRequest("POST", c.url, bytes.NewReader(body))
	if err != nil {
		return
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return // best effort
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// Close sends what is queued and stops the client.
func (c *Client) Close() error {
	close(c.stop)
	<-c.done
	return nil
}
