package warmheap

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"time"
	"unsafe"
)

const (
	// MinHeadroomBytes is the least heap growth Fit allows above the live
	// heap: below it collections would come every few steps for little
	// memory.
	MinHeadroomBytes = 4 << 20
	// gcShare is the share of step time Fit lets collections take.
	gcShare = 0.01
	// worthSteps: Fit changes the goal only when the faults ahead would
	// cost more than this many steps.
	worthSteps = 4
	// prefaultSteps: where the goal stays, Fit still touches the growth
	// ahead of the heap once when its faults would cost more than this
	// many steps. They are paid either way, the heap growing to its goal
	// whatever Fit does; touched at once they are paid before the steps
	// that count (and, with transparent huge pages, 2 MiB at a fault).
	prefaultSteps = 1
)

// Warmup measures the steps of a warm-up: call Step after each, then Fit.
// Start it after the first step, whose allocations (parameters' gradients,
// optimizer state, the spare pool's first fill) stay live.
type Warmup struct {
	last    time.Time
	allocs  uint64
	steps   int
	fastest time.Duration
}

// Begin starts measuring.
func Begin() *Warmup { return &Warmup{last: time.Now(), allocs: allocBytes()} }

// Step records that one more step has run.
func (w *Warmup) Step() {
	now := time.Now()
	if d := now.Sub(w.last); w.steps == 0 || d < w.fastest {
		w.fastest = d
	}
	w.last = now
	w.steps++
}

// Options are what Fit may not measure itself.
type Options struct {
	// Keep leaves the collector's settings alone (the user set GOGC or
	// GOMEMLIMIT): Fit measures, and may touch the growth the user's goal
	// allows ahead of the heap, but changes no setting.
	Keep bool
	// ExtraFaultCost is added to the measured cost of a fresh page (Tax's
	// cost, so that Fit acts as it would on a machine with that cost).
	ExtraFaultCost time.Duration
}

// Decision is what Fit measured and chose.
type Decision struct {
	Steps           int           // warm-up steps measured
	StepBytes       uint64        // bytes allocated per step
	StepTime        time.Duration // the fastest step: the warm-up's include their faults
	LiveBytes       uint64        // live heap after a full collection
	GCTime          time.Duration // that collection's CPU time (wall time would count other processes' share of a busy machine)
	FaultCost       time.Duration // a fresh page's first touch (with ExtraFaultCost)
	AheadCost       time.Duration // faults the default goal still had ahead, at FaultCost
	Percent         int           // the GC percent now in force
	HeadroomBytes   uint64        // the growth above the live heap that Percent allows, touched ahead; 0: none
	Lowered         bool          // Percent was lowered to allow only HeadroomBytes (else it is the percent in force)
	PrefaultedBytes uint64        // of the growth, what was not mapped yet and was touched
	PrefaultedTime  time.Duration // time spent touching the headroom
}

func (d Decision) String() string {
	if d.HeadroomBytes > 0 && !d.Lowered {
		return fmt.Sprintf("heap: GOGC %d kept, its growth of %.1f MiB touched ahead (garbage %.0f KiB/step, live %.0f MiB, fresh page %.1f µs, faults ahead %.0f ms = %.1f steps; prefault of %.1f MiB %.0f ms)",
			d.Percent, float64(d.HeadroomBytes)/(1<<20), float64(d.StepBytes)/1024, float64(d.LiveBytes)/(1<<20),
			us(d.FaultCost), ms(d.AheadCost), stepsOf(d.AheadCost, d.StepTime), float64(d.PrefaultedBytes)/(1<<20), ms(d.PrefaultedTime))
	}
	if d.HeadroomBytes == 0 {
		return fmt.Sprintf("heap: GOGC %d kept (garbage %.0f KiB/step, live %.0f MiB, fresh page %.1f µs, faults ahead %.0f ms = %.1f steps)",
			d.Percent, float64(d.StepBytes)/1024, float64(d.LiveBytes)/(1<<20), us(d.FaultCost), ms(d.AheadCost), stepsOf(d.AheadCost, d.StepTime))
	}
	return fmt.Sprintf("heap: GOGC %d (headroom %.1f MiB: garbage %.0f KiB/step, live %.0f MiB, full GC %.2f ms CPU, step %.2f ms, fresh page %.1f µs, faults ahead %.0f ms = %.1f steps; prefault of %.1f MiB %.0f ms)",
		d.Percent, float64(d.HeadroomBytes)/(1<<20), float64(d.StepBytes)/1024, float64(d.LiveBytes)/(1<<20), ms(d.GCTime), ms(d.StepTime),
		us(d.FaultCost), ms(d.AheadCost), stepsOf(d.AheadCost, d.StepTime), float64(d.PrefaultedBytes)/(1<<20), ms(d.PrefaultedTime))
}

func us(d time.Duration) float64 { return d.Seconds() * 1e6 }
func ms(d time.Duration) float64 { return d.Seconds() * 1e3 }
func stepsOf(d, step time.Duration) float64 {
	if step <= 0 {
		return 0
	}
	return float64(d) / float64(step)
}

// Fit measures the warm-up and, where fresh pages would slow the steps
// ahead, lowers the collector's goal to what a step needs and touches it
// once (see the package documentation). It runs a full collection.
func (w *Warmup) Fit(o Options) Decision {
	d := Decision{Steps: w.steps}
	if w.steps > 0 {
		d.StepTime = w.fastest
		d.StepBytes = (allocBytes() - w.allocs) / uint64(w.steps)
	}
	c := cpuTime()
	runtime.GC()
	d.GCTime = cpuTime() - c
	d.LiveBytes = liveBytes()
	d.FaultCost = FaultCost() + o.ExtraFaultCost
	percent := debug.SetGCPercent(100)
	debug.SetGCPercent(percent)
	d.Percent = percent
	if percent < 0 {
		return d
	}
	d.AheadCost = time.Duration(float64(d.LiveBytes) * float64(percent) / 100 / pageSize * float64(d.FaultCost))
	plan := Plan(d.StepBytes, d.StepTime, d.LiveBytes, d.GCTime, d.FaultCost, percent, o.Keep)
	if plan.HeadroomBytes == 0 {
		return d
	}
	if plan.Percent < percent {
		debug.SetGCPercent(plan.Percent)
		d.Lowered = true
	}
	// The heap already holds some of the growth mapped (the warm-up's
	// garbage, collected): only the rest is fresh. Under a memory limit
	// the goal is the lower of the two: touch no more than fits below it,
	// less a tenth for what is not heap.
	goal := int64(d.LiveBytes + plan.HeadroomBytes)
	if limit := debug.SetMemoryLimit(-1); limit < math.MaxInt64 {
		goal = min(goal, int64(float64(limit)*0.9))
	}
	d.Percent, d.HeadroomBytes = plan.Percent, plan.HeadroomBytes
	d.PrefaultedBytes = uint64(max(goal-int64(mappedHeapBytes()), 0))
	t := time.Now()
	Prefault(d.PrefaultedBytes)
	d.PrefaultedTime = time.Since(t)
	return d
}

// Choice is Plan's answer.
type Choice struct {
	Percent       int    // GC percent; the current one where nothing is worth changing
	HeadroomBytes uint64 // heap growth above the live heap that Percent allows, to touch once; 0: none
}

// Plan is Fit's choice from its measurements, pure: for a step of
// stepTime leaving stepBytes of garbage, a live heap of liveBytes whose
// full collection takes gcTime, fresh pages costing faultCost each and
// the collector at percent. It lowers the goal when the faults ahead
// (live·percent/100 bytes of fresh pages) cost more than worthSteps
// steps, to live + max(k·stepBytes, MinHeadroomBytes), where k steps take
// gcTime/gcShare. Where it keeps the percent (lowering would not lower
// it, or keep: the collector is the user's) but the faults ahead still
// cost more than prefaultSteps steps, its answer is that percent with the
// growth it allows, live·percent/100, as the headroom to touch ahead; a
// zero headroom is no change at all.
func Plan(stepBytes uint64, stepTime time.Duration, liveBytes uint64, gcTime, faultCost time.Duration, percent int, keep bool) Choice {
	same := Choice{Percent: percent}
	if percent <= 0 || liveBytes == 0 || stepTime <= 0 {
		return same
	}
	ahead := float64(liveBytes) * float64(percent) / 100 / pageSize * float64(faultCost)
	if ahead <= prefaultSteps*float64(stepTime) {
		return same
	}
	touch := Choice{Percent: percent, HeadroomBytes: uint64(percent) * liveBytes / 100}
	if keep || ahead <= worthSteps*float64(stepTime) {
		return touch
	}
	k := math.Ceil(float64(gcTime) / (gcShare * float64(stepTime)))
	head := max(uint64(k)*stepBytes, MinHeadroomBytes)
	p := int(math.Ceil(100 * float64(head) / float64(liveBytes)))
	p = max(p, 1)
	if p >= percent {
		return touch
	}
	return Choice{Percent: p, HeadroomBytes: uint64(p) * liveBytes / 100}
}

const (
	pageSize     = 4096
	hugePage     = 2 << 20
	madvHugepage = 14 // MADV_HUGEPAGE
)

// HugePages reports whether the kernel gives transparent huge pages to
// memory that asks for them (/sys/kernel/mm/transparent_hugepage/enabled
// is "always" or "madvise").
func HugePages() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && (bytes.Contains(b, []byte("[always]")) || bytes.Contains(b, []byte("[madvise]")))
}

// Prefault touches n bytes of fresh heap once and drops them: the pages
// stay with the heap (under its goal the scavenger keeps them), so the
// next allocations find them mapped.
func Prefault(n uint64) {
	if n == 0 {
		return
	}
	b := make([]byte, n)
	if HugePages() {
		// One fault maps 2 MiB instead of 512 faults of 4 KiB.
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		lo := int((p+hugePage-1)&^(hugePage-1) - p)
		if hi := lo + (len(b)-lo)&^(hugePage-1); hi > lo {
			syscall.Madvise(b[lo:hi], madvHugepage)
		}
	}
	for i := 0; i < len(b); i += pageSize {
		b[i] = 1
	}
	runtime.KeepAlive(b)
	b = nil
	runtime.GC()
}

// FaultCost measures the first touch of a fresh anonymous page: the
// median over a few rounds of touching 64 fresh pages, less touching them
// again.
func FaultCost() time.Duration {
	const pages, rounds = 64, 5
	var c [rounds]time.Duration
	for r := range c {
		b, err := syscall.Mmap(-1, 0, pages*pageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return 0
		}
		t := time.Now()
		for i := 0; i < len(b); i += pageSize {
			b[i] = 1
		}
		first := time.Since(t)
		t = time.Now()
		for i := 0; i < len(b); i += pageSize {
			b[i] = 2
		}
		again := time.Since(t)
		syscall.Munmap(b)
		c[r] = max(first-again, 0) / pages
	}
	for i := range c { // insertion sort: five values
		for j := i; j > 0 && c[j] < c[j-1]; j-- {
			c[j], c[j-1] = c[j-1], c[j]
		}
	}
	return c[rounds/2]
}

// cpuTime is the CPU time the process has used (CLOCK_PROCESS_CPUTIME_ID:
// the scheduler's own accounting, finer than getrusage's ticks).
func cpuTime() time.Duration {
	const clockProcessCPUTime = 2
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockProcessCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

var heapMetrics = []string{"/gc/heap/allocs:bytes", "/gc/heap/live:bytes"}

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func allocBytes() uint64 { return readMetric(heapMetrics[0]) }
func liveBytes() uint64  { return readMetric(heapMetrics[1]) }

// mappedHeapBytes is the heap's memory that is mapped: its objects, free
// and unused spans, less what was returned to the system.
func mappedHeapBytes() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapSys - ms.HeapReleased
}
