package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/data"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// pgGroup adapts a process group as the examples do.
func pgGroup(pg distributed.ProcessGroup) Group {
	return NewGroup(pg.Rank(), pg.Size(), func(ctx context.Context) error { return pg.Barrier(ctx).Wait() })
}

// fullValues is the reference content of a test tensor of n elements.
func fullValues(name string, n int64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(len(name)) + float32(i)*0.5
	}
	return out
}

// TestSaveLoadAcrossWorlds saves tensors split evenly over N ranks (the
// layout of a ZeRO/FSDP flat partition) plus a replicated tensor saved by
// rank 0, and reads every rank's partition back at other world sizes M.
func TestSaveLoadAcrossWorlds(t *testing.T) {
	for _, world := range []int{1, 2, 3, 4, 7} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			sizes := map[string]int64{"n=0": 0, "n=1": 1, "n=world-1": int64(world - 1), "n=1000": 1000}
			if world == 3 {
				sizes["n=1<<20+3"] = 1<<20 + 3
			}
			dir := t.TempDir()
			distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				s := &Snapshot{Step: 42, Local: map[string]any{"rank": pg.Rank()}, Meta: map[string]any{"note": "from rank " + fmt.Sprint(pg.Rank())}}
				for name, n := range sizes {
					full := fullValues(name, n)
					sl := evenSlices(n, world)[pg.Rank()]
					s.Shards = append(s.Shards, Shard{Name: "flat/" + name, FullShape: []int{int(n)}, Offset: sl.Offset, Data: full[sl.Offset : sl.Offset+sl.Len]})
				}
				if pg.Rank() == 0 {
					s.Shards = append(s.Shards, Shard{Name: "replicated", FullShape: []int{3, 4}, Data: fullValues("replicated", 12)})
				}
				if _, err := Save(context.Background(), dir, pgGroup(pg), s, Options{}); err != nil {
					t.Error(err)
				}
			})
			path, step, err := Latest(dir)
			if err != nil || step != 42 {
				t.Fatalf("Latest: %q step %d, %v", path, step, err)
			}
			c, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.WorldSize() != world {
				t.Errorf("world size %d, want %d", c.WorldSize(), world)
			}
			var note string
			if err := c.Meta("note", &note); err != nil || note != "from rank 0" {
				t.Errorf("meta: %q, %v; want rank 0's", note, err)
			}
			for r := range world {
				var got int
				if err := c.Local(r, "rank", &got); err != nil || got != r {
					t.Errorf("local of rank %d: %d, %v", r, got, err)
				}
			}
			rep, err := c.Tensor("replicated")
			if err != nil || !slices.Equal(rep.Shape(), []int{3, 4}) || !slices.Equal(rep.Data(), fullValues("replicated", 12)) {
				t.Errorf("replicated: %v, %v", rep, err)
			}
			for _, m := range []int{1, 2, 3, 5} {
				for name, n := range sizes {
					full := fullValues(name, n)
					for _, sl := range evenSlices(n, m) {
						got := make([]float32, sl.Len)
						if err := c.ReadSlice("flat/"+name, sl.Offset, got); err != nil {
							t.Fatalf("reader world %d rank %d %s: %v", m, sl.Rank, name, err)
						}
						if !slices.Equal(got, full[sl.Offset:sl.Offset+sl.Len]) {
							t.Errorf("reader world %d rank %d %s: wrong values", m, sl.Rank, name)
						}
					}
				}
			}
		})
	}
}

// smallNet is a two-layer Sequential whose parameters depend on seed.
func smallNet(seed uint64) *nn.Sequential {
	rng := rand.New(rand.NewPCG(seed, 0))
	return nn.NewSequential(nn.NewLinear(rng, 4, 3, true), nn.ReLU{}, nn.NewLinear(rng, 3, 2, true))
}

// trainState is a model with its optimizer and scheduler.
type trainState struct {
	net   *nn.Sequential
	opt   *optim.SGD
	sched *optim.Scheduler
}

func newTrainState(t *testing.T, seed uint64) *trainState {
	t.Helper()
	net := smallNet(seed)
	opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(net), LR: 0.1}}, optim.SGDOptions{Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := optim.NewScheduler(opt, optim.CosineAnnealingLR{TMax: 10})
	if err != nil {
		t.Fatal(err)
	}
	return &trainState{net, opt, sched}
}

// step runs one SGD step on a fixed batch.
func (s *trainState) step() {
	x := autograd.NewVar(tensor.FromSlice([]float32{1, -2, 0.5, 3, 0, 1, -1, 2}, 2, 4), false)
	loss := nn.CrossEntropy(s.net.Forward(x), []int64{0, 1})
	autograd.Backward(loss)
	s.opt.Step()
	s.opt.ZeroGrad()
	s.sched.Step()
}

// loaderState stands for a data.Loader's position saved as a Local value.
var loaderState = data.State{Seed: 7, Epoch: 2, Position: 5, Plan: 1<<64 - 3}

func (s *trainState) snapshot(step int64) *Snapshot {
	snap := &Snapshot{Step: step, Local: map[string]any{"position": step, "loader": loaderState}}
	snap.AddModule("model", s.net, nil)
	snap.AddStateDict("optim", s.opt.StateDict())
	snap.AddStateDict("sched", s.sched.StateDict())
	return snap
}

func (s *trainState) load(t *testing.T, c *Checkpoint) {
	t.Helper()
	if err := c.LoadModule("model", s.net, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadStateDict("optim", s.opt); err != nil {
		t.Fatal(err)
	}
	if err := c.LoadStateDict("sched", s.sched); err != nil {
		t.Fatal(err)
	}
}

func sameParams(t *testing.T, a, b nn.Module) {
	t.Helper()
	sa, sb := nn.StateDict(a), nn.StateDict(b)
	for k, ta := range sa {
		if !bitsEqual(ta.Contiguous().Data(), sb[k].Contiguous().Data()) {
			t.Errorf("parameter %s differs: %v vs %v", k, ta, sb[k])
		}
	}
}

// TestResumeBitExact trains 6 steps, and again 3 steps + save + load into
// a fresh state built from another seed + 3 steps: the parameters must be
// equal bit for bit.
func TestResumeBitExact(t *testing.T) {
	ref := newTrainState(t, 1)
	for range 6 {
		ref.step()
	}
	a := newTrainState(t, 1)
	for range 3 {
		a.step()
	}
	dir := t.TempDir()
	path, err := Save(context.Background(), dir, Single, a.snapshot(3), Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := newTrainState(t, 99)
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b.load(t, c)
	var pos int64
	if err := c.Local(0, "position", &pos); err != nil || pos != 3 {
		t.Errorf("local position %d, %v", pos, err)
	}
	var ls data.State
	if err := c.Local(0, "loader", &ls); err != nil || ls != loaderState {
		t.Errorf("loader state %+v, %v; want %+v", ls, err, loaderState)
	}
	if b.sched.Steps() != 3 || b.opt.LR(0) != a.opt.LR(0) {
		t.Errorf("scheduler at step %d lr %v, want 3 and %v", b.sched.Steps(), b.opt.LR(0), a.opt.LR(0))
	}
	for range 3 {
		b.step()
	}
	sameParams(t, ref.net, b.net)
}

func TestKeepAndLatest(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	if _, _, err := Latest(filepath.Join(dir, "absent")); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("Latest of a missing directory: %v, want ErrNoCheckpoint", err)
	}
	s := newTrainState(t, 1)
	for step := int64(1); step <= 5; step++ {
		if _, err := Save(ctx, dir, Single, s.snapshot(step), Options{Keep: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if got := listSteps(t, dir); !slices.Equal(got, []int64{5, 4}) {
		t.Errorf("after 5 saves keeping 2: steps %v, want [5 4]", got)
	}
	// A torn save (no manifest) and a manifest that is not valid are never
	// chosen.
	torn := StepDir(dir, 7)
	os.MkdirAll(torn, 0o755)
	os.WriteFile(filepath.Join(torn, shardFileName(0)), []byte("partial"), 0o644)
	bad := StepDir(dir, 6)
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, manifestName), []byte(`{"format":"cohort-checkpoint/1","step":6`), 0o644)
	if path, step, err := Latest(dir); err != nil || step != 5 || path != StepDir(dir, 5) {
		t.Errorf("Latest with torn step 7 and bad step 6: %q %d %v, want step 5", path, step, err)
	}
	if _, err := Open(torn); err == nil || !strings.Contains(err.Error(), "not a complete checkpoint") {
		t.Errorf("Open of a torn checkpoint: %v", err)
	}
	// The next save prunes the torn ones and the oldest complete one.
	if _, err := Save(ctx, dir, Single, s.snapshot(8), Options{Keep: 2}); err != nil {
		t.Fatal(err)
	}
	if got := listSteps(t, dir); !slices.Equal(got, []int64{8, 5}) {
		t.Errorf("after saving step 8: steps %v, want [8 5]", got)
	}
	// Saving a step again replaces it.
	if _, err := Save(ctx, dir, Single, s.snapshot(8), Options{Keep: 2}); err != nil {
		t.Fatal(err)
	}
	if _, step, err := Latest(dir); err != nil || step != 8 {
		t.Errorf("Latest after re-saving step 8: %d, %v", step, err)
	}
}

func listSteps(t *testing.T, dir string) []int64 {
	t.Helper()
	steps, err := stepDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return steps
}

// TestWrongModel loads a checkpoint and a weights file into a module of
// another architecture: the error names the missing, unexpected and
// misshapen keys.
func TestWrongModel(t *testing.T) {
	dir := t.TempDir()
	s := newTrainState(t, 1)
	path, err := Save(context.Background(), dir, Single, s.snapshot(1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	weights := filepath.Join(dir, "w.safetensors")
	if err := SaveModel(weights, s.net, nil, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 0))
	other := nn.NewSequential(nn.NewLinear(rng, 4, 5, true), nn.ReLU{}, nn.NewLinear(rng, 5, 2, false), nn.ReLU{}, nn.NewLinear(rng, 2, 2, true))
	before := nn.StateDict(other)["0.weight"].Clone()
	want := []string{`missing keys ["4.bias" "4.weight"]`, `unexpected keys ["2.bias"]`, `"0.weight" has shape [3 4], the module [5 4]`, `"2.weight" has shape [2 3], the module [2 5]`}
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, load := range map[string]func() error{
		"checkpoint":  func() error { return c.LoadModule("model", other, nil) },
		"safetensors": func() error { return LoadModel(weights, other, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			err := load()
			if !errors.Is(err, ErrKeys) {
				t.Fatalf("load: %v, want ErrKeys", err)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if !bitsEqual(nn.StateDict(other)["0.weight"].Data(), before.Data()) {
				t.Errorf("a failed load changed the module")
			}
		})
	}
	if err := c.LoadStateDict("optim", newOptimizer(t, other)); err == nil || !strings.Contains(err.Error(), `"optim"`) {
		t.Errorf("optimizer of another model: %v", err)
	}
}

func newOptimizer(t *testing.T, m nn.Module) *optim.SGD {
	opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: 0.1}}, optim.SGDOptions{Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

// TestCorruptShard truncates or flips one bit of a shard file: loading
// fails with ErrChecksum naming the file.
func TestCorruptShard(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		want   string
	}{
		{"truncated", func(b []byte) []byte { return b[:len(b)-3] }, "bytes, the manifest says"},
		{"bit flip in data", func(b []byte) []byte { b[len(b)-5] ^= 0x10; return b }, "SHA-256"},
		{"bit flip in header", func(b []byte) []byte { b[20] ^= 0x01; return b }, "SHA-256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := newTrainState(t, 1)
			path, err := Save(context.Background(), dir, Single, s.snapshot(1), Options{})
			if err != nil {
				t.Fatal(err)
			}
			shard := filepath.Join(path, shardFileName(0))
			b, err := os.ReadFile(shard)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(shard, tc.damage(b), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.LoadModule("model", newTrainState(t, 2).net, nil)
			if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), shard) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("load: %v, want ErrChecksum naming %s and %q", err, shard, tc.want)
			}
		})
	}
}

// failAfter fails every write once limit bytes have been written, as a
// full disk does.
type failAfter struct {
	w     io.Writer
	limit int64
}

func (f *failAfter) Write(p []byte) (int, error) {
	if int64(len(p)) > f.limit {
		n, _ := f.w.Write(p[:f.limit])
		f.limit = 0
		return n, &os.PathError{Op: "write", Path: "(injected)", Err: syscall.ENOSPC}
	}
	f.limit -= int64(len(p))
	return f.w.Write(p)
}

// checkIntact checks that the newest complete checkpoint under dir is
// step and loads with valid checksums.
func checkIntact(t *testing.T, dir string, step int64) {
	t.Helper()
	path, got, err := Latest(dir)
	if err != nil || got != step {
		t.Fatalf("Latest: step %d, %v; want the previous checkpoint %d", got, err, step)
	}
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	newTrainState(t, 3).load(t, c)
}

// TestDiskFullInjected makes rank 1's writes fail with ENOSPC in the
// middle of its shard: every rank reports the failure, rank 0 names rank
// 1, no manifest is written, no temporary file is left, and the previous
// checkpoint stays the latest and intact.
func TestDiskFullInjected(t *testing.T) {
	dir := t.TempDir()
	s := newTrainState(t, 1)
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		snap := &Snapshot{Step: 1}
		if pg.Rank() == 0 {
			snap = s.snapshot(1)
		}
		if _, err := Save(context.Background(), dir, pgGroup(pg), snap, Options{}); err != nil {
			t.Error(err)
		}
	})
	s.step()
	errs := make([]error, 2)
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		snap := s.snapshot(2)
		var o Options
		if pg.Rank() == 1 {
			o.wrap = func(w io.Writer) io.Writer { return &failAfter{w: w, limit: 100} }
		}
		_, errs[pg.Rank()] = Save(context.Background(), dir, pgGroup(pg), snap, o)
	})
	if !errors.Is(errs[1], syscall.ENOSPC) || !strings.Contains(errs[1].Error(), "rank-00001.safetensors") {
		t.Errorf("rank 1: %v, want ENOSPC naming its shard file", errs[1])
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1 wrote no shard index") {
		t.Errorf("rank 0: %v, want an error naming rank 1", errs[0])
	}
	ents, _ := os.ReadDir(StepDir(dir, 2))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") || e.Name() == manifestName {
			t.Errorf("failed save left %s", e.Name())
		}
	}
	checkIntact(t, dir, 1)
}

// TestDiskFullTmpfs fills a real small tmpfs: the save fails with "no
// space left on device" and the previous checkpoint stays intact.
func TestDiskFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot mount a tmpfs (TestDiskFullInjected covers the logic)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	s := newTrainState(t, 1)
	if _, err := Save(context.Background(), dir, Single, s.snapshot(1), Options{}); err != nil {
		t.Fatal(err)
	}
	big := s.snapshot(2)
	big.Shards = append(big.Shards, Shard{Name: "big", FullShape: []int{100_000}, Data: make([]float32, 100_000)})
	_, err := Save(context.Background(), dir, Single, big, Options{})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("save of 400 kB on a 256 kB tmpfs: %v, want ENOSPC", err)
	}
	t.Logf("full disk: %v", err)
	checkIntact(t, dir, 1)
	// After the failure the disk has room again for the next small save.
	if _, err := Save(context.Background(), dir, Single, s.snapshot(3), Options{Keep: 1}); err != nil {
		t.Fatalf("save after the failure: %v", err)
	}
	checkIntact(t, dir, 3)
}

// TestSaveRejects checks argument validation.
func TestSaveRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		snap *Snapshot
		want string
	}{
		{"nil", nil, "nil snapshot"},
		{"negative step", &Snapshot{Step: -1}, "step -1"},
		{"repeated name", &Snapshot{Shards: []Shard{{Name: "a", FullShape: []int{1}, Data: []float32{1}}, {Name: "a", FullShape: []int{1}, Data: []float32{1}}}}, `shard "a"`},
		{"outside", &Snapshot{Shards: []Shard{{Name: "a", FullShape: []int{2}, Offset: 1, Data: []float32{1, 2}}}}, `shard "a"`},
		{"meta not JSON", &Snapshot{Meta: map[string]any{"f": math.NaN()}}, `meta value "f"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Save(context.Background(), t.TempDir(), Single, tc.snap, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Save: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
