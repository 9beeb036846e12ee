package native

import (
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/distributed/transport/shm"
	"github.com/cohortml/cohort/distributed/wire"
)

// TestCountCPUs: the ranks on a host fit it when the union of their CPU
// masks has room for each; a rank that cannot tell its mask leaves the
// default.
func TestCountCPUs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mine  []int
		local []int
		masks []string
		want  int
		err   string
	}{
		{"bound-apart", []int{0}, []int{1}, []string{"", "1"}, 2, ""},
		{"bound-together", []int{0}, []int{1, 2}, []string{"", "0", "0"}, 1, ""},
		{"unbound", []int{0, 1, 2, 3}, []int{1}, []string{"", "0,1,2,3"}, 4, ""},
		{"mine-unknown", nil, []int{1}, []string{"", "1"}, 7, ""},
		{"peer-unknown", []int{0}, []int{1}, []string{"", ""}, 7, ""},
		{"garbage", []int{0}, []int{1}, []string{"", "1,x"}, 0, `rank 1 published the CPU list "1,x"`},
	} {
		got, err := countCPUs(tc.mine, tc.local, tc.masks, 7)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

// TestShmRingFitsInlineMessages: an inline plan sends a message of up to
// collective.DefaultInlineBytes before it receives, trusting the
// transport to take it without its receiver; shm's default ring must
// hold one with its headers (with a 1 MiB ring a world-2 all-gather of
// 1 MiB per rank waited 3.6 ms for the peer's progress goroutine to
// drain the ring, against 0.1 ms).
func TestShmRingFitsInlineMessages(t *testing.T) {
	if need := int64(collective.DefaultInlineBytes + 2*wire.HeaderBytes); shm.DefaultRingBytes < need {
		t.Errorf("shm.DefaultRingBytes %d < %d, an inline plan's largest message with headers", shm.DefaultRingBytes, need)
	}
}

func TestShmSpinFor(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		localRanks, hostCPUs, maxprocs int
		mine                           []int
		numCPU                         int
		want                           time.Duration
	}{
		{"bound rank, one Go thread", 2, 2, 1, []int{1}, 2, shmSpinLong},
		{"bound rank, launcher's GOMAXPROCS", 2, 2, 2, []int{1}, 2, shmSpin},
		{"unbound ranks, Go's default", 2, 4, 4, []int{0, 1, 2, 3}, 4, shmSpin},
		{"unbound ranks, half the CPUs each", 2, 4, 2, []int{0, 1, 2, 3}, 4, shmSpinLong},
		{"affinity unknown", 2, 4, 2, nil, 4, shmSpinLong},
		{"affinity unknown, more threads", 1, 4, 8, nil, 4, shmSpin},
		{"oversubscribed: the transport chooses", 4, 2, 1, []int{0}, 2, 0},
	} {
		if got := shmSpinFor(tc.localRanks, tc.hostCPUs, tc.maxprocs, tc.mine, tc.numCPU); got != tc.want {
			t.Errorf("%s: shmSpinFor(%d, %d, %d, %v, %d) = %v, want %v", tc.name, tc.localRanks, tc.hostCPUs, tc.maxprocs, tc.mine, tc.numCPU, got, tc.want)
		}
	}
}
