package checkpoint_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/cohortml/cohort/checkpoint"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
)

// A training loop saves its state every few steps and, on start, resumes
// from the newest complete checkpoint.
func Example() {
	dir, _ := os.MkdirTemp("", "ckpt")
	defer os.RemoveAll(dir)
	rng := rand.New(rand.NewPCG(1, 0))
	net := nn.NewSequential(nn.NewLinear(rng, 4, 3, true), nn.ReLU{}, nn.NewLinear(rng, 3, 2, true))
	opt, _ := optim.NewSGD([]optim.Group{{Params: nn.Parameters(net), LR: 0.1}}, optim.SGDOptions{Momentum: 0.9})

	// Save (collective: every rank calls it; here a world of one).
	s := &checkpoint.Snapshot{Step: 100, Local: map[string]any{"epoch": 3}}
	s.AddModule("model", net, nil)
	s.AddStateDict("optim", opt.StateDict())
	if _, err := checkpoint.Save(context.Background(), dir, checkpoint.Single, s, checkpoint.Options{Keep: 2}); err != nil {
		fmt.Println(err)
		return
	}

	// Resume.
	path, step, err := checkpoint.Latest(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	ck, err := checkpoint.Open(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ck.Close()
	var epoch int
	if err := ck.LoadModule("model", net, nil); err != nil {
		fmt.Println(err)
	}
	if err := ck.LoadStateDict("optim", opt); err != nil {
		fmt.Println(err)
	}
	if err := ck.Local(0, "epoch", &epoch); err != nil {
		fmt.Println(err)
	}
	fmt.Println(filepath.Base(path), step, epoch)

	// The final weights, for PyTorch's load_state_dict.
	weights := filepath.Join(dir, "model.safetensors")
	if err := checkpoint.SaveModel(weights, net, nil, map[string]string{"format": "pt"}); err != nil {
		fmt.Println(err)
	}
	fmt.Println(len(checkpoint.ModuleEntries(net, nil)), "tensors")
	// Output:
	// step-0000000100 100 3
	// 4 tensors
}
