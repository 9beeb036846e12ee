package launch

import (
	"errors"
	"fmt"
	"strconv"
)

// NProc is a --nproc-per-node value as torchrun takes it: a number of
// workers, gpu (one worker per GPU the driver shows this process, which
// honours CUDA_VISIBLE_DEVICES), cpu (one per CPU the launcher may use)
// or auto (gpu when there are GPUs, else 1). It is a flag.Value: Set
// checks the form, Workers resolves it once the GPUs can be counted.
type NProc string

func (v *NProc) String() string { return string(*v) }

// Set checks s's form and keeps it.
func (v *NProc) Set(s string) error {
	if _, err := strconv.Atoi(s); err != nil && s != "gpu" && s != "cpu" && s != "auto" {
		return errors.New("want a number of workers, gpu, cpu or auto")
	}
	*v = NProc(s)
	return nil
}

// Workers resolves v to a number of workers; gpus counts this node's
// visible GPUs (cuda.Visible, injected so that the launcher needs no
// driver unless gpu or auto is asked for).
func (v NProc) Workers(gpus func() (int, error)) (int, error) {
	s := string(v)
	switch s {
	case "gpu", "auto":
		n, err := gpus()
		switch {
		case s == "auto" && (err != nil || n < 1):
			return 1, nil
		case err != nil:
			return 0, fmt.Errorf("--nproc-per-node gpu: one worker per visible GPU, but none was found: %w", err)
		case n < 1:
			return 0, errors.New("--nproc-per-node gpu: one worker per visible GPU, but the driver shows none (CUDA_VISIBLE_DEVICES empty?)")
		}
		return n, nil
	case "cpu":
		return CPUs(), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("--nproc-per-node %q: want a number of workers, gpu, cpu or auto", s)
	}
	return n, nil
}
