package dashboard

import (
	"bytes"
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed page.html
var page []byte

// Float is a float64 that JSON can carry whatever its value: a finite
// number is a JSON number, NaN and ±Inf (a diverging run's loss) are the
// strings "NaN", "+Inf" and "-Inf", which the page shows as such.
// encoding/json refuses to encode non-finite float64s, which blanked the
// page and stopped the other ranks' reports.
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	switch v := float64(f); {
	case math.IsNaN(v):
		return []byte(`"NaN"`), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, float64(f), 'g', -1, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler: a number, or one of the
// strings MarshalJSON writes.
func (f *Float) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"NaN"`:
		*f = Float(math.NaN())
	case `"+Inf"`, `"Inf"`:
		*f = Float(math.Inf(1))
	case `"-Inf"`:
		*f = Float(math.Inf(-1))
	default:
		v, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return fmt.Errorf("dashboard: %q is not a number", b)
		}
		*f = Float(v)
	}
	return nil
}

// Report is one rank's step. Durations are seconds in JSON.
type Report struct {
	Rank     int   `json:"rank"`
	Step     int   `json:"step"`
	Epoch    int   `json:"epoch"`
	Loss     Float `json:"loss"`
	Samples  int   `json:"samples"` // samples this step, on this rank
	Seconds  Float `json:"seconds"` // the whole step
	Compute  Float `json:"compute"` // forward, backward, optimizer (minus exposed comm)
	Comm     Float `json:"comm"`    // communication not hidden behind compute
	DataWait Float `json:"data"`    // waiting for the batch
	Bytes    int64 `json:"bytes"`   // bytes all-reduced this step
	Time     int64 `json:"time_ms"` // Unix milliseconds when the step ended
}

// RankState is what the page shows per rank.
type RankState struct {
	Rank     int   `json:"rank"`
	Step     int   `json:"step"`
	Loss     Float `json:"loss"`
	Compute  Float `json:"compute"` // moving averages, seconds
	Comm     Float `json:"comm"`
	DataWait Float `json:"data"`
	LastSeen int64 `json:"last_seen_ms"`
}

// Point is one step of the run's curves (rank 0's loss, all ranks' samples/s).
type Point struct {
	Step       int   `json:"step"`
	Loss       Float `json:"loss"`
	Throughput Float `json:"throughput"`
}

// State is the JSON the page polls.
type State struct {
	Name     string      `json:"name"`
	Unit     string      `json:"unit,omitempty"` // what the throughput counts; "" for samples
	World    int         `json:"world"`
	Restarts int         `json:"restarts"`
	Ranks    []RankState `json:"ranks"`
	Curve    []Point     `json:"curve"`
	Notes    []string    `json:"notes"`
	Now      int64       `json:"now_ms"`
}

// What a hub keeps is bounded whatever it is sent: one RankState and a
// fixed set of metric series per rank of the world (reports of other
// ranks are refused), maxPoints curve points, maxNotes notes of at most
// maxNoteBytes each; a POST carries at most maxReportBytes and
// maxReportsPerPost reports.
const (
	maxPoints         = 2000 // beyond it every other point is dropped
	maxNotes          = 20
	maxNoteBytes      = 1000
	maxReportBytes    = 1 << 20
	maxReportsPerPost = 1000 // a Client's queue
)

// Hub collects a run's reports. Its methods are safe for concurrent use.
type Hub struct {
	mu       sync.Mutex
	name     string
	unit     string
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
// must accompany reports posted by other ranks (Client sends it); a
// program gives the job's COHORT_TOKEN or, without one, a secret derived
// from the job's identity (package obs does), so that only the job's own
// processes can report. Reports of ranks outside [0, world) are refused.
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

// Record adds a step report; it drops the report of a rank outside the
// world.
func (h *Hub) Record(r Report) {
	if r.Rank < 0 || r.Rank >= max(h.world, 1) {
		return
	}
	if r.Time == 0 {
		r.Time = time.Now().UnixMilli()
	}
	rk := strconv.Itoa(r.Rank)
	h.steps.WithLabelValues(rk).Inc()
	h.samples.WithLabelValues(rk).Add(float64(r.Samples))
	h.bytes.WithLabelValues(rk).Add(float64(r.Bytes))
	// A counter must not be given NaN or a negative value (it would stay
	// NaN, or panic): only finite, non-negative phases are counted.
	for _, p := range []struct {
		name string
		v    Float
	}{{"compute", r.Compute}, {"comm", r.Comm}, {"data", r.DataWait}} {
		if v := float64(p.v); v >= 0 && !math.IsInf(v, 0) {
			h.phase.WithLabelValues(rk, p.name).Add(v)
		}
	}
	h.stepTime.WithLabelValues(rk).Observe(float64(r.Seconds))
	if r.Rank == 0 {
		h.loss.Set(float64(r.Loss))
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
		tput = float64(r.Samples) * float64(max(h.world, 1)) / float64(r.Seconds)
	}
	h.curve = append(h.curve, Point{Step: r.Step, Loss: r.Loss, Throughput: Float(tput)})
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

// SetUnit names what Report.Samples counts ("tokens"); the page shows it
// per second. The default is samples.
func (h *Hub) SetUnit(unit string) {
	h.mu.Lock()
	h.unit = unit
	h.mu.Unlock()
}

// Restart records a restart of the job's workers.
func (h *Hub) Restart() {
	h.restartsTotal.Inc()
	h.mu.Lock()
	h.restarts++
	h.mu.Unlock()
}

// Note shows msg on the page (the last maxNotes are kept, each cut to
// maxNoteBytes).
func (h *Hub) Note(msg string) {
	if len(msg) > maxNoteBytes {
		msg = strings.ToValidUTF8(msg[:maxNoteBytes], "") + "…"
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notes = append(h.notes, time.Now().Format("15:04:05 ")+msg)
	if len(h.notes) > maxNotes {
		h.notes = h.notes[len(h.notes)-maxNotes:]
	}
}

// State returns a copy of what the page shows.
func (h *Hub) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := State{Name: h.name, Unit: h.unit, World: h.world, Restarts: h.restarts, Curve: slices.Clone(h.curve), Notes: slices.Clone(h.notes), Now: time.Now().UnixMilli()}
	// Empty lists, not null: the page iterates them.
	s.Ranks = make([]RankState, 0, len(h.ranks))
	s.Curve, s.Notes = append([]Point{}, s.Curve...), append([]string{}, s.Notes...)
	for _, r := range h.ranks {
		s.Ranks = append(s.Ranks, *r)
	}
	slices.SortFunc(s.Ranks, func(a, b RankState) int { return a.Rank - b.Rank })
	return s
}

// Handler serves the page, /api/state, /api/report and /metrics.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, r *http.Request) {
		// Encoded whole before the status is sent: an error is a 500
		// with its reason, never an empty 200.
		b, err := json.Marshal(h.State())
		if err != nil {
			http.Error(w, "dashboard: state: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
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
		if len(reports) > maxReportsPerPost {
			http.Error(w, fmt.Sprintf("dashboard: %d reports in one post, at most %d", len(reports), maxReportsPerPost), http.StatusBadRequest)
			return
		}
		// Rank 0 reports in-process; others only as ranks of the world.
		for _, rep := range reports {
			if rep.Rank < 1 || rep.Rank >= h.world {
				http.Error(w, fmt.Sprintf("dashboard: report of rank %d: the run's world is %d ranks (posts come from ranks 1..%d)", rep.Rank, h.world, h.world-1), http.StatusBadRequest)
				return
			}
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
	if len(c.queue) > maxReportsPerPost {
		c.queue = c.queue[len(c.queue)-maxReportsPerPost:]
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
