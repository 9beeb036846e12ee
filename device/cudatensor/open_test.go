package cudatensor

import (
	"errors"
	"strings"
	"testing"

	"github.com/cohortml/cohort/tensor"
)

// TestOpenLocalRank: "-device cuda" under a launcher opens LOCAL_RANK's
// GPU among those visible (an injected count), "cuda:N" keeps N, and a
// local rank without a GPU of its own, or no driver, is an error before
// any device is opened.
func TestOpenLocalRank(t *testing.T) {
	noDriver := errors.New("cuda: libcuda.so.1 not found")
	for _, tc := range []struct {
		flag    string
		env     map[string]string
		visible int
		noGPU   bool
		want    tensor.Device
		err     string
	}{
		{flag: "", want: tensor.CPU},
		{flag: "cuda", visible: 4, want: tensor.CUDA(0)},
		{flag: "cuda", env: map[string]string{"LOCAL_RANK": "3"}, visible: 4, want: tensor.CUDA(3)},
		{flag: "cuda:1", env: map[string]string{"LOCAL_RANK": "3"}, visible: 4, want: tensor.CUDA(1)},
		{flag: "cuda", env: map[string]string{"LOCAL_RANK": "2", "CUDA_VISIBLE_DEVICES": "5,6"}, visible: 2, err: `local rank 2 has no GPU of its own (2 visible, CUDA_VISIBLE_DEVICES="5,6")`},
		{flag: "cuda", env: map[string]string{"LOCAL_RANK": "0"}, noGPU: true, err: "libcuda.so.1 not found"},
	} {
		var opened []tensor.Device
		got, err := openWith(tc.flag, func(k string) string { return tc.env[k] },
			func() (int, error) {
				if tc.noGPU {
					return 0, noDriver
				}
				return tc.visible, nil
			},
			func(d tensor.Device) error { opened = append(opened, d); return nil })
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) || len(opened) > 0 {
				t.Errorf("Open(%q) env %v = %v, %v (opened %v); want an error containing %q and nothing opened", tc.flag, tc.env, got, err, opened, tc.err)
			}
		case err != nil || got != tc.want:
			t.Errorf("Open(%q) env %v = %v, %v; want %v", tc.flag, tc.env, got, err, tc.want)
		case !got.IsCPU() && (len(opened) != 1 || opened[0] != got):
			t.Errorf("Open(%q) env %v opened %v, want %v", tc.flag, tc.env, opened, got)
		}
	}
}
