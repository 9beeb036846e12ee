package bench

import (
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
)

// Two ranks of a tensor-parallel GPT-mini (4 blocks), microbatches of 4
// sequences: every step times 4·4 + 2 activation all-reduces of
// 4·64·128 floats and the loss's 2 small ones (4·64 floats and 2·4·64
// float64s), and some compute outside them.
func TestMeasureTP(t *testing.T) {
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		r, err := measureTP(distributedtest.Context(t, 2*time.Minute), pg, 4, 2)
		if err != nil {
			t.Fatal(err)
		}
		if r.PerStep != 18 || r.Bytes != 4*64*128*4 || r.SmallStep != 2 || r.SmallBytes != (4*64*4+2*4*64*8)/2 {
			t.Errorf("rank %d: %+v: want 18 activation all-reduces of %d bytes and 2 small ones a step", pg.Rank(), r, 4*64*128*4)
		}
		if !(r.Compute > 0) || !(r.Collective > 0) || !(r.Small > 0) {
			t.Errorf("rank %d: %+v: want positive times", pg.Rank(), r)
		}
	})
}
