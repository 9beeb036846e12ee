package distributed_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
)

// TestMesh: over meshes of 1 to 8 ranks, every rank gets Megatron-order
// coordinates, its subgroup along each dimension holds exactly the ranks
// that share its other coordinates (subgroup rank = coordinate), and an
// all-reduce on each subgroup sums over exactly those ranks.
func TestMesh(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	for _, dims := range [][]distributed.MeshDim{
		{{"dp", 1}},
		{{"tp", 2}},
		{{"dp", 2}, {"tp", 2}},
		{{"dp", 3}, {"pp", 1}},
		{{"pp", 2}, {"tp", 3}},
		{{"dp", 2}, {"pp", 2}, {"tp", 2}},
		{{"dp", 4}, {"tp", 2}},
		{{"dp", 7}},
	} {
		world := 1
		for _, d := range dims {
			world *= d.Size
		}
		name := fmt.Sprintf("world=%d/%s", world, meshName(dims))
		t.Run(name, func(t *testing.T) {
			distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, time.Minute)
				m, err := distributed.NewMesh(ctx, pg, dims...)
				if err != nil {
					t.Errorf("rank %d: %v", pg.Rank(), err)
					return
				}
				checkMeshRank(t, ctx, m, pg.Rank(), dims)
			})
		})
	}
}

func meshName(dims []distributed.MeshDim) string {
	var parts []string
	for _, d := range dims {
		parts = append(parts, fmt.Sprintf("%s=%d", d.Name, d.Size))
	}
	return strings.Join(parts, "x")
}

func checkMeshRank(t *testing.T, ctx context.Context, m *distributed.Mesh, rank int, dims []distributed.MeshDim) {
	t.Helper()
	// Megatron order: last dimension fastest.
	want := make([]int, len(dims))
	r := rank
	for i := len(dims) - 1; i >= 0; i-- {
		want[i] = r % dims[i].Size
		r /= dims[i].Size
	}
	if got := m.Coords(rank); !slices.Equal(got, want) {
		t.Errorf("rank %d: coords %v, want %v", rank, got, want)
	}
	if got := m.RankOf(want...); got != rank {
		t.Errorf("rank %d: RankOf(%v) = %d", rank, want, got)
	}
	if m.Rank() != rank || !slices.Equal(m.Dims(), dims) {
		t.Errorf("rank %d: mesh says rank %d, dims %v", rank, m.Rank(), m.Dims())
	}
	for i, d := range dims {
		g := m.Group(d.Name)
		if g == nil {
			t.Fatalf("rank %d: no %s group", rank, d.Name)
		}
		if m.Coord(d.Name) != want[i] || g.Rank() != want[i] || g.Size() != d.Size || m.SizeOf(d.Name) != d.Size {
			t.Errorf("rank %d: %s group rank %d of %d, coord %d; want %d of %d", rank, d.Name, g.Rank(), g.Size(), m.Coord(d.Name), want[i], d.Size)
		}
		// Members: the ranks that differ only along dimension i; the
		// all-reduce of 1<<rank is the bit set of exactly those ranks.
		var members int64
		c := slices.Clone(want)
		for j := range d.Size {
			c[i] = j
			members |= 1 << m.RankOf(c...)
		}
		buf := []int64{1 << rank}
		if err := g.AllReduce(ctx, distributed.I64(buf), distributed.Sum).Wait(); err != nil {
			t.Errorf("rank %d: %s all-reduce: %v", rank, d.Name, err)
		} else if buf[0] != members {
			t.Errorf("rank %d: %s group sums to members %b, want %b", rank, d.Name, buf[0], members)
		}
		// The subgroup's rank order is the coordinate order.
		ranks := make([]int64, d.Size)
		if err := g.AllGather(ctx, distributed.I64(ranks), distributed.I64([]int64{int64(rank)})).Wait(); err != nil {
			t.Errorf("rank %d: %s all-gather: %v", rank, d.Name, err)
			continue
		}
		for j := range d.Size {
			c[i] = j
			if ranks[j] != int64(m.RankOf(c...)) {
				t.Errorf("rank %d: %s group rank %d is global rank %d, want %d", rank, d.Name, j, ranks[j], m.RankOf(c...))
			}
		}
	}
}

// TestMeshBadInput: a shape that does not fit the group, or ranks that
// disagree on it, get an error on every rank (never a hang) naming the
// sizes or the ranks.
func TestMeshBadInput(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	for _, tc := range []struct {
		name  string
		world int
		dims  func(rank int) []distributed.MeshDim
		want  string
	}{
		{"product", 4, func(int) []distributed.MeshDim { return []distributed.MeshDim{{"dp", 2}, {"tp", 3}} },
			"sizes multiply to 6, but the group has 4 ranks"},
		{"zero size", 2, func(int) []distributed.MeshDim { return []distributed.MeshDim{{"dp", 2}, {"tp", 0}} },
			`dimension "tp" has size 0`},
		{"repeated name", 4, func(int) []distributed.MeshDim { return []distributed.MeshDim{{"dp", 2}, {"dp", 2}} },
			`dimension "dp" named twice`},
		{"no name", 2, func(int) []distributed.MeshDim { return []distributed.MeshDim{{"", 2}} }, "has no name"},
		{"no dims", 2, func(int) []distributed.MeshDim { return nil }, "no dimensions for 2 ranks"},
		{"disagree", 4, func(r int) []distributed.MeshDim {
			if r == 3 {
				return []distributed.MeshDim{{"dp", 1}, {"tp", 4}}
			}
			return []distributed.MeshDim{{"dp", 2}, {"tp", 2}}
		}, "ranks disagree on the mesh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			distributedtest.Run(t, tc.world, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, time.Minute)
				m, err := distributed.NewMesh(ctx, pg, tc.dims(pg.Rank())...)
				if err == nil {
					t.Errorf("rank %d: NewMesh accepted %v: %v", pg.Rank(), tc.dims(pg.Rank()), m)
					return
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("rank %d: error %q, want it to contain %q", pg.Rank(), err, tc.want)
				}
				if tc.name == "disagree" {
					wantRanks := "rank(s) 3 have"
					if pg.Rank() == 3 {
						wantRanks = "rank(s) 0, 1, 2 have"
					}
					if !strings.Contains(err.Error(), wantRanks) {
						t.Errorf("rank %d: error %q does not name %q", pg.Rank(), err, wantRanks)
					}
				}
			})
		})
	}
}

// TestMeshString: the description names the shape and the coordinates.
func TestMeshString(t *testing.T) {
	distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
		m, err := distributed.NewMesh(distributedtest.Context(t, time.Minute), pg, distributed.MeshDim{"dp", 2}, distributed.MeshDim{"tp", 2})
		if err != nil {
			t.Error(err)
			return
		}
		want := fmt.Sprintf("mesh dp=2×tp=2 rank %d (dp=%d, tp=%d)", pg.Rank(), pg.Rank()/2, pg.Rank()%2)
		if m.String() != want {
			t.Errorf("String() = %q, want %q", m.String(), want)
		}
		if !m.Has("tp") || m.Has("pp") {
			t.Errorf("Has: tp %v, pp %v", m.Has("tp"), m.Has("pp"))
		}
	})
}
