package datasets

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// WriteMNIST writes train and test into dir as the four uncompressed IDX
// files of the MNIST distribution, which LoadMNIST reads back: the same
// labels, and pixels rounded to the nearest byte/255 (exactly the same
// for pixels that were loaded). A pixel outside [0, 1] or a label outside
// 0..9 is an error.
func WriteMNIST(dir string, train, test *MNIST) error {
	for k, m := range []*MNIST{train, test} {
		px := make([]byte, len(m.Images))
		for i, v := range m.Images {
			if !(v >= 0 && v <= 1) {
				return fmt.Errorf("datasets: mnist: WriteMNIST: pixel %d is %v, outside [0, 1]", i, v)
			}
			px[i] = byte(math.Round(float64(v) * 255))
		}
		labels := make([]byte, len(m.Labels))
		for i, l := range m.Labels {
			if l < 0 || l > 9 {
				return fmt.Errorf("datasets: mnist: WriteMNIST: label %d is %d, outside 0..9", i, l)
			}
			labels[i] = byte(l)
		}
		n := uint32(m.Len())
		files := []struct {
			magic uint32
			dims  []uint32
			data  []byte
		}{{idxImagesMagic, []uint32{n, uint32(m.Rows), uint32(m.Cols)}, px}, {idxLabelsMagic, []uint32{n}, labels}}
		for j, f := range files {
			b := binary.BigEndian.AppendUint32(nil, f.magic)
			for _, d := range f.dims {
				b = binary.BigEndian.AppendUint32(b, d)
			}
			if err := os.WriteFile(filepath.Join(dir, mnistFiles[2*k+j]), append(b, f.data...), 0o644); err != nil {
				return fmt.Errorf("datasets: mnist: %w", err)
			}
		}
	}
	return nil
}
