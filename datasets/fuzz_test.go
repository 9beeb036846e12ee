package datasets

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzIDX feeds arbitrary bytes to the IDX decoders: they must return
// either an error or data consistent with the header, never panic, and
// never allocate beyond the header bounds.
func FuzzIDX(f *testing.F) {
	f.Add(idxFile(0x803, []uint32{2, 2, 2}, []byte{0, 1, 2, 3, 4, 5, 6, 255}))
	f.Add(idxFile(0x801, []uint32{3}, []byte{1, 2, 9}))
	f.Add(idxFile(0x803, []uint32{1 << 30, 28, 28}, nil))
	f.Add([]byte{0, 0, 8})
	f.Fuzz(func(t *testing.T, b []byte) {
		if pix, n, r, c, err := decodeIDXImages(bytes.NewReader(b), "f"); err == nil {
			if len(pix) != n*r*c || len(b) != 16+n*r*c {
				t.Fatalf("%d pixels for %d×%d×%d from %d bytes", len(pix), n, r, c, len(b))
			}
			for _, p := range pix {
				if p < 0 || p > 1 {
					t.Fatalf("pixel %g outside [0,1]", p)
				}
			}
		}
		if labels, err := decodeIDXLabels(bytes.NewReader(b), "f"); err == nil {
			if len(b) != 8+len(labels) {
				t.Fatalf("%d labels from %d bytes", len(labels), len(b))
			}
			for _, l := range labels {
				if l < 0 || l > 9 {
					t.Fatalf("label %d", l)
				}
			}
		}
	})
}

// FuzzCSV: ReadCSV returns an error or a consistent table, never panics.
func FuzzCSV(f *testing.F) {
	f.Add("a,b,y\n1,2,0\n3,4,1\n", true, -1)
	f.Add("1,2\n3,x\n", false, 0)
	f.Add("\"1\",2\n", false, 1)
	f.Fuzz(func(t *testing.T, text string, header bool, label int) {
		d, err := ReadCSV(strings.NewReader(text), "f.csv", CSVOptions{Header: header, LabelColumn: label})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "datasets: csv: f.csv") {
				t.Fatalf("error without the file name: %v", err)
			}
			return
		}
		if len(d.Labels) != d.Len() || len(d.X) != d.Len()*d.Features {
			t.Fatalf("inconsistent table: %d rows, %d labels, %d values of %d features", d.Len(), len(d.Labels), len(d.X), d.Features)
		}
	})
}
