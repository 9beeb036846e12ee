package cuda

import (
	"fmt"
	"strconv"
)

// Visible returns the number of GPUs this process can use: the driver's
// count after cuInit, which already honours CUDA_VISIBLE_DEVICES (device
// i is then the i-th listed there). Without a driver or a device the
// error is Load's or Init's one line.
func Visible() (int, error) {
	d, err := Load()
	if err != nil {
		return 0, err
	}
	if err := d.Init(); err != nil {
		return 0, err
	}
	return d.DeviceCount()
}

// LocalOrdinal returns the GPU of a worker among count visible ones: its
// LOCAL_RANK (as read through getenv), or 0 without one, as torchrun's
// workers call torch.cuda.set_device(LOCAL_RANK). A local rank without a
// GPU of its own is an error naming both counts and the variable
// CUDA_VISIBLE_DEVICES when it is set.
func LocalOrdinal(getenv func(string) string, count int) (int, error) {
	lr := getenv("LOCAL_RANK")
	if lr == "" {
		if count < 1 {
			return 0, fmt.Errorf("cuda: no GPU visible%s", visibleNote(getenv))
		}
		return 0, nil
	}
	n, err := strconv.Atoi(lr)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cuda: LOCAL_RANK=%q: want a non-negative integer", lr)
	}
	if n >= count {
		return 0, fmt.Errorf("cuda: local rank %d has no GPU of its own (%d visible%s): run at most one worker per GPU (cohort run --nproc-per-node gpu)", n, count, visibleNote(getenv))
	}
	return n, nil
}

func visibleNote(getenv func(string) string) string {
	if v := getenv("CUDA_VISIBLE_DEVICES"); v != "" {
		return fmt.Sprintf(", CUDA_VISIBLE_DEVICES=%q", v)
	}
	return ""
}
