package distributed

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// MeshDim is one named dimension of a Mesh ("dp", "pp", "tp") and the
// number of ranks along it.
type MeshDim struct {
	Name string
	Size int
}

// Mesh arranges the ranks of a group as an n-dimensional grid with named
// dimensions, as Megatron-LM and PyTorch's DeviceMesh do, and gives every
// rank one subgroup per dimension: the ranks that differ from it only in
// that dimension's coordinate.
//
// Rank order is row-major with the last dimension fastest (Megatron's
// order): in a mesh dp=2 × tp=2, ranks 0 and 1 form a tp group, ranks 0
// and 2 a dp group. Put the dimension whose traffic is heaviest (tensor
// parallelism) last so that its ranks are neighbours.
//
// The subgroups are subgroups of the mesh's group (see NewGroup): they
// are closed with it, and a Mesh has no Close of its own. A Mesh is
// immutable and safe for concurrent use; its groups are ProcessGroups with
// the usual contract.
type Mesh struct {
	dims   []MeshDim
	rank   int   // rank in the mesh's group
	coords []int // this rank's coordinate along each dimension
	groups []ProcessGroup
}

// NewMesh arranges the ranks of pg as a mesh with the given dimensions,
// whose sizes must multiply to pg.Size(), and forms its subgroups: one per
// dimension and per line of the grid along it, dimensions in the order
// given, lines in rank order.
//
// It is a collective op of pg: every rank must call it, with the same
// dimensions, in the same order relative to pg's other ops. Ranks that
// disagree get an error naming them; a bad shape (a size below 1, an
// empty or repeated name, a product that is not pg.Size()) gets an error
// naming the sizes, on every rank. It blocks until the subgroups exist or
// ctx ends.
func NewMesh(ctx context.Context, pg ProcessGroup, dims ...MeshDim) (*Mesh, error) {
	desc := meshString(dims)
	// Agree first, so that ranks with different (even invalid) meshes all
	// fail here instead of some of them waiting in NewGroup.
	h := fnv.New64a()
	h.Write([]byte(desc))
	mine := int64(h.Sum64())
	all := make([]int64, pg.Size())
	if err := pg.AllGather(ctx, I64(all), I64([]int64{mine})).Wait(); err != nil {
		return nil, fmt.Errorf("distributed: NewMesh %s: agreeing on the mesh: %w", desc, err)
	}
	var differ []string
	for r, v := range all {
		if v != mine {
			differ = append(differ, strconv.Itoa(r))
		}
	}
	if len(differ) > 0 {
		return nil, fmt.Errorf("distributed: NewMesh: ranks disagree on the mesh: rank %d has %s but rank(s) %s have another",
			pg.Rank(), desc, strings.Join(differ, ", "))
	}
	if err := checkMesh(dims, pg.Size()); err != nil {
		return nil, err
	}

	m := &Mesh{dims: append([]MeshDim(nil), dims...), rank: pg.Rank()}
	m.coords = m.Coords(pg.Rank())
	m.groups = make([]ProcessGroup, len(dims))
	for d := range dims {
		for _, line := range m.lines(d) {
			g, err := NewGroup(ctx, pg, line)
			if err != nil {
				return nil, fmt.Errorf("distributed: NewMesh %s: %s group %v: %w", desc, dims[d].Name, line, err)
			}
			if g != nil {
				m.groups[d] = g
			}
		}
	}
	return m, nil
}

func meshString(dims []MeshDim) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = fmt.Sprintf("%s=%d", d.Name, d.Size)
	}
	return strings.Join(parts, "×")
}

func checkMesh(dims []MeshDim, world int) error {
	desc := meshString(dims)
	if len(dims) == 0 {
		return fmt.Errorf("distributed: NewMesh: no dimensions for %d ranks", world)
	}
	seen := map[string]bool{}
	n := 1
	for _, d := range dims {
		switch {
		case d.Name == "":
			return fmt.Errorf("distributed: NewMesh %s: a dimension has no name", desc)
		case seen[d.Name]:
			return fmt.Errorf("distributed: NewMesh %s: dimension %q named twice", desc, d.Name)
		case d.Size < 1:
			return fmt.Errorf("distributed: NewMesh %s: dimension %q has size %d, want >= 1", desc, d.Name, d.Size)
		}
		seen[d.Name] = true
		n *= d.Size
		if n > world {
			break
		}
	}
	if n != world {
		return fmt.Errorf("distributed: NewMesh %s: the sizes multiply to %d, but the group has %d ranks", desc, n, world)
	}
	return nil
}

// lines returns the rank lists of every group along dimension d, in rank
// order of their first member.
func (m *Mesh) lines(d int) [][]int {
	size := m.dims[d].Size
	var out [][]int
	for r := range m.Size() {
		c := m.Coords(r)
		if c[d] != 0 {
			continue
		}
		line := make([]int, size)
		for i := range size {
			c[d] = i
			line[i] = m.RankOf(c...)
		}
		out = append(out, line)
	}
	return out
}

// Dims returns the mesh's dimensions in order.
func (m *Mesh) Dims() []MeshDim { return append([]MeshDim(nil), m.dims...) }

// Rank returns this process's rank in the mesh's group.
func (m *Mesh) Rank() int { return m.rank }

// Size returns the number of ranks in the mesh.
func (m *Mesh) Size() int {
	n := 1
	for _, d := range m.dims {
		n *= d.Size
	}
	return n
}

// dim returns the index of the named dimension; it panics, naming the
// dimensions there are, for an unknown name (a programming error).
func (m *Mesh) dim(name string) int {
	for i, d := range m.dims {
		if d.Name == name {
			return i
		}
	}
	panic(fmt.Sprintf("distributed: mesh %s has no dimension %q", meshString(m.dims), name))
}

// Has reports whether the mesh has a dimension of that name.
func (m *Mesh) Has(name string) bool {
	for _, d := range m.dims {
		if d.Name == name {
			return true
		}
	}
	return false
}

// Group returns this rank's subgroup along the named dimension: its
// members share every other coordinate, and the subgroup rank of each
// equals its coordinate along the dimension. It panics for a name that is
// not a dimension of the mesh.
func (m *Mesh) Group(name string) ProcessGroup { return m.groups[m.dim(name)] }

// Coord returns this rank's coordinate along the named dimension (its rank
// in Group(name)). It panics for an unknown name.
func (m *Mesh) Coord(name string) int { return m.coords[m.dim(name)] }

// SizeOf returns the size of the named dimension. It panics for an
// unknown name.
func (m *Mesh) SizeOf(name string) int { return m.dims[m.dim(name)].Size }

// Coords returns the coordinates of a rank of the mesh, one per dimension.
// It panics for a rank outside [0, Size()).
func (m *Mesh) Coords(rank int) []int {
	if rank < 0 || rank >= m.Size() {
		panic(fmt.Sprintf("distributed: mesh %s: rank %d out of range [0, %d)", meshString(m.dims), rank, m.Size()))
	}
	c := make([]int, len(m.dims))
	for i := len(m.dims) - 1; i >= 0; i-- {
		c[i] = rank % m.dims[i].Size
		rank /= m.dims[i].Size
	}
	return c
}

// RankOf returns the rank at the given coordinates (one per dimension),
// the inverse of Coords. It panics for a wrong number of coordinates or
// one out of range.
func (m *Mesh) RankOf(coords ...int) int {
	if len(coords) != len(m.dims) {
		panic(fmt.Sprintf("distributed: mesh %s: %d coordinates for %d dimensions", meshString(m.dims), len(coords), len(m.dims)))
	}
	r := 0
	for i, c := range coords {
		if c < 0 || c >= m.dims[i].Size {
			panic(fmt.Sprintf("distributed: mesh %s: coordinate %d out of range for dimension %q", meshString(m.dims), c, m.dims[i].Name))
		}
		r = r*m.dims[i].Size + c
	}
	return r
}

// String describes the mesh and this rank's place in it:
// "mesh dp=2×tp=2 rank 3 (dp=1, tp=1)".
func (m *Mesh) String() string {
	parts := make([]string, len(m.dims))
	for i, d := range m.dims {
		parts[i] = fmt.Sprintf("%s=%d", d.Name, m.coords[i])
	}
	return fmt.Sprintf("mesh %s rank %d (%s)", meshString(m.dims), m.rank, strings.Join(parts, ", "))
}
