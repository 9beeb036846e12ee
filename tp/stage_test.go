package tp_test

import (
	"strings"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/models/gpttest"
	"github.com/cohortml/cohort/tp"
)

// TestGPTStages: stages hold the parameters of models.GPTStage under the
// same names; a rank holding both ends shares one token embedding; bad
// splits are errors naming them.
func TestGPTStages(t *testing.T) {
	cfg := models.GPTMini()
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		full := gpttest.NewGPT(t, cfg)
		c := tp.NewComm(pg)
		split := []int{0, 1, 3, 4}
		stages, err := tp.NewGPTStages(c, full, split, []int{0, 1, 2})
		if err != nil {
			t.Fatal(err)
		}
		for s, st := range stages {
			ref, err := full.NewStage(split[s], split[s+1], s == 0, s == 2)
			if err != nil {
				t.Fatal(err)
			}
			got, want := st.Shards(), ref.NamedParameters()
			if len(got) != len(want) {
				t.Fatalf("stage %d: %d parameters, models.GPTStage has %d", s, len(got), len(want))
			}
			for i := range got {
				if got[i].Name != want[i].Name {
					t.Errorf("stage %d parameter %d: %q, models.GPTStage has %q", s, i, got[i].Name, want[i].Name)
				}
			}
		}
		if stages[0].Wte != stages[2].Wte {
			t.Error("the first and the last stage on one rank have separate token embeddings")
		}
		if n, want := len(tp.StageShards(stages)), len(full.NamedParameters()); n != want {
			t.Errorf("StageShards of every stage: %d parameters, the model has %d", n, want)
		}
		last, err := tp.NewGPTStages(c, full, split, []int{2})
		if err != nil {
			t.Fatal(err)
		}
		if last[0].Wte == stages[0].Wte || last[0].Wte == nil {
			t.Error("a last stage built alone does not have its own copy of the token embedding")
		}
		for _, bad := range []struct {
			split []int
			want  []int
			msg   string
		}{
			{[]int{0, 2}, []int{0}, "does not cover the 4 blocks"},
			{[]int{0, 3, 2, 4}, []int{0}, "not increasing at stage 1"},
			{[]int{0, 2, 4}, []int{2}, "stage 2 of 2"},
		} {
			if _, err := tp.NewGPTStages(c, full, bad.split, bad.want); err == nil || !strings.Contains(err.Error(), bad.msg) {
				t.Errorf("split %v, stages %v: error %v, want one containing %q", bad.split, bad.want, err, bad.msg)
			}
		}
	})
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		full := gpttest.NewGPT(t, models.GPTConfig{Vocab: 256, Ctx: 16, NLayer: 1, D: 48, NHead: 3})
		_, err := tp.NewGPTStages(tp.NewComm(pg), full, []int{0, 1}, []int{0})
		if err == nil || !strings.Contains(err.Error(), "3 heads do not split across 2") {
			t.Errorf("3 heads on 2 ranks: %v", err)
		}
	})
}
