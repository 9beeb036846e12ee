package datasets

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/data"
)

// CSVOptions configures ReadCSV. The zero value reads a headerless,
// comma-separated table whose first column is an integer class label.
type CSVOptions struct {
	// Header says the first record names the columns.
	Header bool
	// Label names the label column (needs Header); it overrides
	// LabelColumn.
	Label string
	// LabelColumn is the label column's index, counting from 0; a negative
	// value counts from the end (-1 is the last column).
	LabelColumn int
	// NoLabel makes every column a feature.
	NoLabel bool
	// Regression parses the label as a real number into Sample.Target
	// instead of a class index (an integer ≥ 0) into Sample.Labels.
	Regression bool
	// Comma is the field separator; 0 means ','.
	Comma rune
}

// CSV is a numeric table: one sample per row, the feature columns as X and
// the label column as the label (or regression target).
//
// Invariant: len(X) == Len()·Features; len(Labels) == Len() for
// classification, len(Targets) == Len() for regression.
//
// CSV is immutable after loading and safe for concurrent use.
type CSV struct {
	X        []float32
	Labels   []int64
	Targets  []float32
	Features int
	// Columns names the feature columns (from the header, else "col<i>"),
	// and LabelName the label column ("" without a label).
	Columns   []string
	LabelName string

	shape []int
}

var _ data.Dataset = (*CSV)(nil)

// Len returns the number of rows.
func (c *CSV) Len() int {
	if c.Features == 0 {
		return max(len(c.Labels), len(c.Targets))
	}
	return len(c.X) / c.Features
}

// Get returns row i (X of shape [Features], aliasing the table).
func (c *CSV) Get(i int) (data.Sample, error) {
	if err := data.ErrIndex(i, c.Len()); err != nil {
		return data.Sample{}, fmt.Errorf("datasets: csv: %w", err)
	}
	f := c.Features
	s := data.Sample{X: c.X[i*f : (i+1)*f : (i+1)*f], Shape: c.shape}
	if c.Labels != nil {
		s.Labels = c.Labels[i : i+1 : i+1]
	}
	if c.Targets != nil {
		s.Target = c.Targets[i : i+1 : i+1]
	}
	return s, nil
}

// LoadCSV reads the CSV file at path; see ReadCSV.
func LoadCSV(path string, opts CSVOptions) (*CSV, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("datasets: csv: %w", err)
	}
	defer f.Close()
	return ReadCSV(f, path, opts)
}

// ReadCSV reads a numeric table from r; name identifies it in errors.
// Every record must have the same number of fields. A field that is not a
// finite number, a label that is not a class index, or a ragged record
// gives an error naming the line, the column (number and name) and the
// field.
func ReadCSV(r io.Reader, name string, opts CSVOptions) (*CSV, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	if opts.Comma != 0 {
		cr.Comma = opts.Comma
	}
	cr.TrimLeadingSpace = true
	fail := func(format string, args ...any) error {
		return fmt.Errorf("datasets: csv: %s: "+format, append([]any{name}, args...)...)
	}
	rec, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fail("empty file")
	}
	if err != nil {
		return nil, fail("%w", err)
	}
	ncol := len(rec)
	names := make([]string, ncol)
	for i := range names {
		names[i] = "col" + strconv.Itoa(i)
	}
	if opts.Header {
		for i, f := range rec {
			names[i] = strings.TrimSpace(f)
		}
	}
	label := -1
	switch {
	case opts.NoLabel:
	case opts.Label != "":
		if !opts.Header {
			return nil, fail("label column %q named but Header is not set", opts.Label)
		}
		for i, n := range names {
			if n == opts.Label {
				label = i
				break
			}
		}
		if label < 0 {
			return nil, fail("no column named %q in the header %v", opts.Label, names)
		}
	default:
		label = opts.LabelColumn
		if label < 0 {
			label += ncol
		}
		if label < 0 || label >= ncol {
			return nil, fail("label column %d outside the %d columns", opts.LabelColumn, ncol)
		}
	}
	out := &CSV{}
	for i, n := range names {
		if i == label {
			out.LabelName = n
		} else {
			out.Columns = append(out.Columns, n)
		}
	}
	out.Features = len(out.Columns)
	out.shape = []int{out.Features}
	if label >= 0 && opts.Regression {
		out.Targets = []float32{}
	} else if label >= 0 {
		out.Labels = []int64{}
	}
	rows := 0 // data rows read so far
	row := func(rec []string) error {
		for i, f := range rec {
			v, perr := strconv.ParseFloat(strings.TrimSpace(f), 64)
			bad := ""
			switch {
			case strings.TrimSpace(f) == "":
				bad = "empty field"
			case perr != nil:
				bad = fmt.Sprintf("bad number %q", clip(f))
			case math.IsNaN(v) || math.IsInf(v, 0):
				bad = fmt.Sprintf("%q is not a finite number", clip(f))
			case v > math.MaxFloat32 || v < -math.MaxFloat32:
				bad = fmt.Sprintf("%q overflows float32", clip(f))
			case i == label && !opts.Regression && (v != math.Trunc(v) || v < 0 || v > 1<<53):
				bad = fmt.Sprintf("label %q is not a class index (an integer ≥ 0)", clip(f))
			}
			if bad != "" {
				line, _ := cr.FieldPos(i)
				return fail("row %d (line %d), column %d (%q): %s", rows+1, line, i+1, names[i], bad)
			}
			switch {
			case i != label:
				out.X = append(out.X, float32(v))
			case opts.Regression:
				out.Targets = append(out.Targets, float32(v))
			default:
				out.Labels = append(out.Labels, int64(v))
			}
		}
		rows++
		return nil
	}
	if !opts.Header {
		if err := row(rec); err != nil {
			return nil, err
		}
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fail("line %d: %v", pe.Line, pe.Err)
			}
			return nil, fail("%w", err)
		}
		if err := row(rec); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// clip shortens a field for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}
