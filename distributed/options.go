package distributed

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/distributed/flight"
	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/tensor"
)

// Options configures Init. Store, Rank and WorldSize are required (Store
// only for WorldSize > 1); the zero value of every other field works.
// Which fields a backend reads is its own: the native backend reads them
// all, the MPI backend only Backend, Rank and WorldSize.
type Options struct {
	// Backend names the registered backend that builds the group (see
	// Register): "native" (or "") for cohort's own collectives over
	// Transport (package distributed/backend/native), or "mpi" for the MPI
	// library's (distributed/backend/mpi), which takes the rank and world
	// size from MPI itself: Store, Transport and the other connection
	// fields are then unused, and Rank and WorldSize, if WorldSize is set,
	// must match MPI's.
	Backend string
	// Device is where the program's tensors live (its -device flag). With
	// Backend empty, Init picks the backend that takes them: the native
	// one for the CPU (the zero value), nccl for CUDA.
	Device tensor.Device
	// Store carries the ranks' transport addresses. The caller owns it,
	// unless CloseStore hands it to the group.
	Store store.Store
	// CloseStore hands Store to the returned group, which closes it last,
	// after its own connections. InitFromEnv and InitFromInfo set it for
	// the store they connect to. If Init fails the store stays open.
	CloseStore bool
	// Rank and WorldSize place this process in the job.
	Rank, WorldSize int
	// Transport is "auto" (or ""), "tcp", "shm" or "inproc". Auto reaches
	// the ranks on this host through shared memory and the others over
	// TCP: shm alone when every rank is on this host, shm for those on
	// this host and tcp for the rest (combined by package route) when the
	// job spans hosts, and tcp alone when no other rank shares this host
	// or the shm transport is not built in. "tcp" uses TCP between every
	// pair of ranks; "shm" requires every rank on this host. inproc only
	// serves a world of one process; for several ranks in one process
	// build an inproc mesh and call native.New.
	Transport string
	// TCPCongestion is the congestion control of the job's TCP
	// connections (tcp.Options.Congestion): "" keeps the kernel's
	// default, except that loopback connections trade BBR for cubic;
	// "system" keeps it always; a name such as "cubic" or "dctcp" asks
	// for that one. InitFromInfo and InitFromEnv take it from
	// COHORT_TCP_CONGESTION when it is empty.
	TCPCongestion string
	// Host is the address other hosts reach this rank at (an IP or a
	// name); empty means the host name. Ranks on one host connect over
	// loopback whatever it says.
	Host string
	// Token authenticates transport connections (see tcp.Options.Token).
	Token []byte
	// Prefix namespaces the store keys, so that several groups (or
	// restarts) can share one store; default DefaultPrefix.
	Prefix string
	// Group configures the returned group (timeout, tuning). Its Timeout
	// also bounds Init's wait for the other ranks to join.
	Group GroupOptions
	// Log receives Init's progress ("waiting for ranks [1 3] to join")
	// about every 10 s while it waits; nil means slog.Default().
	Log *slog.Logger
	// Watchdog attributes hangs: an op running longer than its interval
	// is diagnosed from every rank's recent ops (see Watch). The zero
	// value turns it on with DefaultWatchdog (60 s).
	Watchdog WatchdogOptions
}

// DefaultPrefix is Options.Prefix's default.
const DefaultPrefix = "cohort/dist"

// DefaultTimeout bounds an op that GroupOptions.Timeout leaves unbounded,
// from the moment it starts running. It matches torch.distributed's.
const DefaultTimeout = 30 * time.Minute

// GroupOptions configures a group; the zero value works. Timeout binds
// every backend; the other fields tune the native backend's collectives.
type GroupOptions struct {
	// Timeout bounds every op from the moment it starts running (ops queue
	// behind earlier ones first); an op's own ctx may end it sooner. 0
	// means DefaultTimeout.
	Timeout time.Duration
	// Tuning sets the segment size and the size thresholds of the
	// automatic algorithm choice (see collective.Tuning).
	Tuning collective.Tuning
	// Algorithms forces an algorithm for some kinds, overriding the
	// automatic choice (names from collective.Algorithms); for tests and
	// benchmarks. Every rank must use the same choice.
	Algorithms map[collective.Kind]string
	// KeepTransport leaves the transport open when the group is closed
	// (by default the group owns it).
	KeepTransport bool
}

// DefaultWatchdog is the watchdog interval when WatchdogOptions.Interval
// is 0, as Horovod's stall check.
const DefaultWatchdog = 60 * time.Second

// WatchdogOptions configures Watch; the zero value works.
type WatchdogOptions struct {
	// Interval is how long an op may run before the watchdog diagnoses
	// it; 0 means DefaultWatchdog, a negative value turns the watchdog off.
	Interval time.Duration
	// Log receives the diagnosis (level Warn); nil means slog.Default().
	Log *slog.Logger
	// Report, if set, also receives every diagnosis this rank logs (a
	// live run page shows it). It runs on the watchdog's goroutine and
	// must not block.
	Report func(flight.Diagnosis)
}

// Resolved returns o with its defaults filled in (Interval 0 means
// DefaultWatchdog, a nil Log slog.Default()), and false if o turns the
// watchdog off: what a backend's watchdog starts from.
func (o WatchdogOptions) Resolved() (WatchdogOptions, bool) {
	if o.Interval < 0 {
		return o, false
	}
	if o.Interval == 0 {
		o.Interval = DefaultWatchdog
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o, true
}

// Tell logs d, rank's diagnosis of a stuck op, as o says (one Warn line)
// and hands it to o.Report if set: what a backend's watchdog does with a
// diagnosis it has claimed.
func (o WatchdogOptions) Tell(rank int, d flight.Diagnosis) {
	o.Log.Warn(fmt.Sprintf("distributed: watchdog: rank %d: %s", rank, d.Text))
	if o.Report != nil {
		o.Report(d)
	}
}

// WatchdogFromEnv reads COHORT_WATCHDOG: a duration ("60s", "2m"), or
// "0"/"off" to turn the watchdog off; unset means the default.
func WatchdogFromEnv(getenv func(string) string) (WatchdogOptions, error) {
	v := strings.TrimSpace(getenv("COHORT_WATCHDOG"))
	switch v {
	case "":
		return WatchdogOptions{}, nil
	case "0", "off", "false":
		return WatchdogOptions{Interval: -1}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		if s, err2 := strconv.ParseFloat(v, 64); err2 == nil && s > 0 {
			return WatchdogOptions{Interval: time.Duration(s * float64(time.Second))}, nil
		}
		return WatchdogOptions{}, fmt.Errorf("distributed: COHORT_WATCHDOG=%q: want a duration such as 60s, or off", v)
	}
	if d <= 0 {
		return WatchdogOptions{Interval: -1}, nil
	}
	return WatchdogOptions{Interval: d}, nil
}
