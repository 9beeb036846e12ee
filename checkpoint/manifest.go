package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// FormatVersion identifies the manifest layout.
const FormatVersion = "cohort-checkpoint/1"

// ErrManifest is wrapped by every error about an invalid manifest or a
// rank index that cannot be merged into one.
var ErrManifest = errors.New("checkpoint: invalid manifest")

// Manifest describes one complete checkpoint: the shard file of every
// rank, with its size and SHA-256, and for every tensor its full shape and
// which rank holds which flat slice of it. Its JSON form is the file
// manifest.json of the checkpoint directory; a directory without it is
// not a checkpoint.
//
// Invariants (checked by Open): Files has one entry per rank 0..WorldSize-1
// in rank order; Tensors are in name order; every tensor's slices lie
// inside it and together cover all of its elements (they may overlap:
// replicated tensors may be saved by several ranks).
type Manifest struct {
	Format    string       `json:"format"`
	Step      int64        `json:"step"`
	WorldSize int          `json:"world_size"`
	Files     []FileInfo   `json:"files"`
	Tensors   []TensorPlan `json:"tensors"`
	// Meta holds job-wide values (rank 0's Snapshot.Meta): optimizer and
	// scheduler scalars, the program's own settings.
	Meta map[string]json.RawMessage `json:"meta,omitempty"`
	// Local holds each rank's Snapshot.Local (loader position, RNG), by
	// rank.
	Local []map[string]json.RawMessage `json:"local"`
}

// FileInfo is one rank's shard file: a safetensors file in the checkpoint
// directory holding, under each tensor's name, that rank's slice of it
// (with the tensor's full shape when the slice is the whole tensor, else
// as a vector).
type FileInfo struct {
	Rank   int    `json:"rank"`
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// TensorPlan is where a tensor's elements are: its full shape and the
// flat slices the ranks hold.
type TensorPlan struct {
	Name   string  `json:"name"`
	Shape  []int   `json:"shape"`
	Slices []Slice `json:"slices"`
}

// Slice is the elements [Offset, Offset+Len) of a tensor flattened
// row-major, stored in rank Rank's file.
type Slice struct {
	Rank   int   `json:"rank"`
	Offset int64 `json:"offset"`
	Len    int64 `json:"len"`
}

// rankIndex is what one rank reports after writing its shard file (the
// file rank-NNNNN.json next to it); rank 0 merges them into the manifest.
type rankIndex struct {
	Rank      int                        `json:"rank"`
	WorldSize int                        `json:"world_size"`
	Step      int64                      `json:"step"`
	File      FileInfo                   `json:"file"`
	Tensors   []TensorPlan               `json:"tensors"` // each with this rank's one slice
	Meta      map[string]json.RawMessage `json:"meta,omitempty"`
	Local     map[string]json.RawMessage `json:"local,omitempty"`
}

func manifestErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrManifest, fmt.Sprintf(format, args...))
}

// buildManifest merges the ranks' indexes (one per rank, any order) into
// the manifest of step at world size world.
func buildManifest(step int64, world int, idx []rankIndex) (*Manifest, error) {
	m := &Manifest{Format: FormatVersion, Step: step, WorldSize: world,
		Files: make([]FileInfo, world), Local: make([]map[string]json.RawMessage, world)}
	have := make([]bool, world)
	plans := map[string]*TensorPlan{}
	for _, ri := range idx {
		if ri.Rank < 0 || ri.Rank >= world || have[ri.Rank] {
			return nil, manifestErr("rank index of rank %d: outside world %d or duplicated", ri.Rank, world)
		}
		if ri.WorldSize != world || ri.Step != step {
			return nil, manifestErr("rank %d wrote step %d at world %d, want step %d at world %d", ri.Rank, ri.Step, ri.WorldSize, step, world)
		}
		have[ri.Rank] = true
		m.Files[ri.Rank] = ri.File
		m.Local[ri.Rank] = ri.Local
		if ri.Rank == 0 {
			m.Meta = ri.Meta
		}
		for _, tp := range ri.Tensors {
			p, ok := plans[tp.Name]
			if !ok {
				p = &TensorPlan{Name: tp.Name, Shape: tp.Shape}
				plans[tp.Name] = p
			}
			if !slices.Equal(p.Shape, tp.Shape) {
				return nil, manifestErr("tensor %q: rank %d says shape %v, another rank %v", tp.Name, ri.Rank, tp.Shape, p.Shape)
			}
			p.Slices = append(p.Slices, tp.Slices...)
		}
	}
	for r, ok := range have {
		if !ok {
			return nil, manifestErr("rank %d wrote no shard index (its write failed or it did not take part)", r)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(plans)) {
		p := plans[name]
		slices.SortFunc(p.Slices, func(a, b Slice) int {
			if a.Offset != b.Offset {
				return cmpInt64(a.Offset, b.Offset)
			}
			return a.Rank - b.Rank
		})
		m.Tensors = append(m.Tensors, *p)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// validate checks the invariants of Manifest.
func (m *Manifest) validate() error {
	if m.Format != FormatVersion {
		return manifestErr("format %q, want %q", m.Format, FormatVersion)
	}
	if m.Step < 0 || m.WorldSize < 1 || len(m.Files) != m.WorldSize || len(m.Local) != m.WorldSize {
		return manifestErr("step %d, world size %d with %d files and %d local entries", m.Step, m.WorldSize, len(m.Files), len(m.Local))
	}
	for r, f := range m.Files {
		if f.Rank != r || f.Name == "" || strings.ContainsAny(f.Name, `/\`) || f.Name == "." || f.Name == ".." || f.Bytes < 8 || len(f.SHA256) != 64 {
			return manifestErr("file entry %d (%+v): want rank %d, a plain file name, a size and a SHA-256", r, f, r)
		}
	}
	for i, t := range m.Tensors {
		if i > 0 && m.Tensors[i-1].Name >= t.Name {
			return manifestErr("tensor %q: names not sorted or repeated", t.Name)
		}
		n, err := numElements(t.Shape, 1<<62)
		if err != nil {
			return manifestErr("tensor %q: %v", t.Name, err)
		}
		if err := checkCover(t, n, m.WorldSize); err != nil {
			return err
		}
	}
	return nil
}

// checkCover checks that t's slices lie in [0, n), name valid ranks, and
// cover every element.
func checkCover(t TensorPlan, n int64, world int) error {
	var at int64
	for _, s := range t.Slices {
		if s.Rank < 0 || s.Rank >= world {
			return manifestErr("tensor %q: slice on rank %d of a world of %d", t.Name, s.Rank, world)
		}
		if s.Offset < 0 || s.Len < 0 || s.Offset > n || s.Len > n-s.Offset {
			return manifestErr("tensor %q: slice [%d, +%d) of rank %d outside its %d elements", t.Name, s.Offset, s.Len, s.Rank, n)
		}
	}
	sorted := slices.Clone(t.Slices)
	slices.SortFunc(sorted, func(a, b Slice) int { return cmpInt64(a.Offset, b.Offset) })
	for _, s := range sorted {
		if s.Offset > at {
			break
		}
		at = max(at, s.Offset+s.Len)
	}
	if at < n {
		return manifestErr("tensor %q: no rank holds elements [%d, …) of %d", t.Name, at, n)
	}
	return nil
}

// encode returns m as JSON for people as well as programs: one line per
// file, tensor, meta value and rank.
func (m *Manifest) encode() ([]byte, error) {
	var b bytes.Buffer
	var err error
	put := func(v any) {
		js, e := json.Marshal(v)
		if e != nil && err == nil {
			err = e
		}
		b.Write(js)
	}
	list := func(n int, elem func(i int)) {
		b.WriteString("[")
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n\t\t")
			elem(i)
		}
		b.WriteString("\n\t]")
	}
	b.WriteString("{\n\t\"format\": ")
	put(m.Format)
	fmt.Fprintf(&b, ",\n\t\"step\": %d,\n\t\"world_size\": %d,\n\t\"files\": ", m.Step, m.WorldSize)
	list(len(m.Files), func(i int) { put(m.Files[i]) })
	b.WriteString(",\n\t\"tensors\": ")
	list(len(m.Tensors), func(i int) { put(m.Tensors[i]) })
	b.WriteString(",\n\t\"meta\": {")
	for i, k := range slices.Sorted(maps.Keys(m.Meta)) {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("\n\t\t")
		put(k)
		b.WriteString(": ")
		put(m.Meta[k])
	}
	b.WriteString("\n\t},\n\t\"local\": ")
	list(len(m.Local), func(i int) { put(m.Local[i]) })
	b.WriteString("\n}\n")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: manifest: %w", err)
	}
	return b.Bytes(), nil
}

// piece is one contiguous part of a read: Len elements copied from rank
// Rank's slice, starting SrcOffset elements into that slice, to
// DstOffset elements into the destination.
type piece struct {
	Rank                 int
	SrcOffset, DstOffset int64
	Len                  int64
}

// planRead returns how to assemble the elements [off, off+n) of t from its
// slices: at each position, the slice covering it that reaches furthest
// (the lowest rank on a tie), so the read touches as few slices as
// possible. The caller has checked that [off, off+n) lies in the tensor
// and that t is covered (validate).
func planRead(t TensorPlan, off, n int64) []piece {
	var out []piece
	at, end := off, off+n
	for at < end {
		best := -1
		for i, s := range t.Slices {
			if s.Offset <= at && at < s.Offset+s.Len {
				if best < 0 || s.Offset+s.Len > t.Slices[best].Offset+t.Slices[best].Len ||
					(s.Offset+s.Len == t.Slices[best].Offset+t.Slices[best].Len && s.Rank < t.Slices[best].Rank) {
					best = i
				}
			}
		}
		if best < 0 {
			panic(fmt.Sprintf("checkpoint: planRead: tensor %q element %d uncovered", t.Name, at)) // validate prevents it
		}
		s := t.Slices[best]
		k := min(end, s.Offset+s.Len) - at
		out = append(out, piece{Rank: s.Rank, SrcOffset: at - s.Offset, DstOffset: at - off, Len: k})
		at += k
	}
	return out
}
