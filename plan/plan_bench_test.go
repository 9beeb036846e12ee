package plan_test

import (
	"os"
	"testing"

	"github.com/cohortml/cohort/plan"
)

// BenchmarkSweep is the scaling report of one model from 8 to 4,096
// nodes of 8 ranks (ten node counts): the best layout at each and where
// every layout shape stops scaling, what `cohort plan --scale` computes.
func BenchmarkSweep(b *testing.B) {
	nodes := []int{8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}
	dev, err := plan.BuiltinDevice("a100-80gb")
	if err != nil {
		b.Fatal(err)
	}
	fab, err := plan.BuiltinFabric("dgx-a100")
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile("testdata/megatron2021/1t.json")
	if err != nil {
		b.Fatal(err)
	}
	oneT, err := plan.ParseModel(data)
	if err != nil {
		b.Fatal(err)
	}
	gpt2, _ := plan.NamedModel("gpt2")
	mini, _ := plan.NamedModel("gpt")
	for _, m := range []*plan.Model{mini, gpt2, oneT} {
		b.Run(m.Name, func(b *testing.B) {
			e := &plan.Env{Model: m, Device: dev, Fabric: fab, Cluster: plan.Cluster{Nodes: 1, ProcsPerNode: 8}}
			layouts := 0
			for b.Loop() {
				plan.Sweep(e, nodes)
				plan.Families(e, nodes)
			}
			for _, n := range nodes {
				e.Cluster.Nodes = n
				layouts += len(e.Layouts())
			}
			b.ReportMetric(float64(layouts), "layouts")
		})
	}
}
