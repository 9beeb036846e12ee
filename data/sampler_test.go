package data

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMT19937Reference(t *testing.T) {
	// The reference implementation's init_genrand(5489) output (mt19937ar.c):
	// the 10000th value of the default-seeded std::mt19937 is 4123659995.
	g := NewMT19937(5489)
	var v uint32
	for range 10000 {
		v = g.Uint32()
	}
	if v != 4123659995 {
		t.Fatalf("10000th output %d, want 4123659995", v)
	}
	// Only the low 32 bits of the seed count, as in torch manual_seed.
	a, b := NewMT19937(5), NewMT19937(1<<32+5)
	for i := range 700 {
		if x, y := a.Uint32(), b.Uint32(); x != y {
			t.Fatalf("output %d: seed 5 gives %d, seed 2^32+5 gives %d", i, x, y)
		}
	}
}

func TestSimpleSamplers(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		s := SequentialSampler{N: 5}
		if got := s.Indices(3); !slices.Equal(got, []int{0, 1, 2, 3, 4}) || s.Len() != 5 {
			t.Fatalf("got %v len %d", got, s.Len())
		}
		if (SequentialSampler{N: -2}).Len() != 0 {
			t.Fatal("negative N should have Len 0")
		}
	})
	t.Run("random", func(t *testing.T) {
		s := RandomSampler{N: 100, Seed: 7}
		e0, e0b, e1 := s.Indices(0), s.Indices(0), s.Indices(1)
		if !slices.Equal(e0, e0b) {
			t.Fatal("same epoch, different orders")
		}
		if slices.Equal(e0, e1) {
			t.Fatal("epochs 0 and 1 give the same order")
		}
		if !slices.Equal(e0, Randperm(100, 7)) || !slices.Equal(e1, Randperm(100, 8)) {
			t.Fatal("RandomSampler is not Randperm(N, seed+epoch)")
		}
		if !slices.Equal(slices.Sorted(slices.Values(e1)), identity(100)) {
			t.Fatal("not a permutation")
		}
	})
	for _, c := range []struct {
		n, size  int
		dropLast bool
		want     [][]int
	}{
		{10, 3, false, [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9}}},
		{10, 3, true, [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}},
		{9, 3, false, [][]int{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}},
		{2, 3, true, [][]int{}},
		{0, 3, false, [][]int{}},
	} {
		t.Run("batch/n="+itoa(c.n)+"/size="+itoa(c.size)+"/drop_last="+boolStr(c.dropLast), func(t *testing.T) {
			b, err := NewBatchSampler(SequentialSampler{N: c.n}, c.size, c.dropLast)
			if err != nil {
				t.Fatal(err)
			}
			got := b.Batches(0)
			if len(got) != b.NumBatches() || !slices.EqualFunc(got, c.want, slices.Equal) {
				t.Fatalf("got %v (NumBatches %d), want %v", got, b.NumBatches(), c.want)
			}
		})
	}
}

func TestSamplerBadInput(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"rank=numReplicas", second(NewDistributedSampler(10, 4, 4, true, 0, false)), "rank 4 out of range [0, 4)"},
		{"negative rank", second(NewDistributedSampler(10, 4, -1, true, 0, false)), "rank -1 out of range"},
		{"zero replicas", second(NewContiguousSampler(10, 0, 0, true, 0, false)), "numReplicas 0"},
		{"negative length", second(NewDistributedSampler(-1, 1, 0, true, 0, false)), "length -1"},
		{"bucket rank", second(NewBucketSampler([]int{1, 2}, 1, 2, 2, 0, BucketOptions{})), "rank 2 out of range [0, 2)"},
		{"bucket batch size", second(NewBucketSampler([]int{1, 2}, 0, 1, 0, 0, BucketOptions{})), "batch size 0"},
		{"bucket negative length", second(NewBucketSampler([]int{1, -2}, 1, 1, 0, 0, BucketOptions{})), "sample 1 has negative length -2"},
		{"batch size", second(NewBatchSampler(SequentialSampler{N: 3}, 0, false)), "batch size 0"},
		{"strategy", second(ParseStrategy("zigzag")), `unknown partitioning strategy "zigzag"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", c.err, c.want)
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }

// counts returns how often each index of [0, n) occurs in lists.
func counts(t *testing.T, n int, lists ...[]int) []int {
	t.Helper()
	c := make([]int, n)
	for _, l := range lists {
		for _, i := range l {
			if i < 0 || i >= n {
				t.Fatalf("index %d outside [0, %d)", i, n)
			}
			c[i]++
		}
	}
	return c
}

var (
	propLengths = []int{0, 1, 2, 3, 5, 7, 10, 17, 64, 100, 1001}
	propWorlds  = []int{1, 2, 3, 4, 7, 8}
)

// TestDistributedCoverage: across ranks, every index appears exactly once
// per epoch, up to the documented padding (totalSize−n repeats) or cut
// (n−totalSize missing), for the index-level strategies.
func TestDistributedCoverage(t *testing.T) {
	newSampler := map[Strategy]func(n, w, r int, shuffle bool, seed uint64, drop bool) (*DistributedSampler, error){
		Random: NewDistributedSampler, Contiguous: NewContiguousSampler,
	}
	for _, st := range []Strategy{Random, Contiguous} {
		for _, n := range propLengths {
			for _, w := range propWorlds {
				for _, drop := range []bool{false, true} {
					for _, shuffle := range []bool{false, true} {
						name := st.String() + "/n=" + itoa(n) + "/world=" + itoa(w) + "/drop_last=" + boolStr(drop) + "/shuffle=" + boolStr(shuffle)
						t.Run(name, func(t *testing.T) {
							for epoch := range 3 {
								var lists [][]int
								total := -1
								for r := range w {
									s, err := newSampler[st](n, w, r, shuffle, 99, drop)
									if err != nil {
										t.Fatal(err)
									}
									got := s.Indices(epoch)
									if len(got) != s.Len() {
										t.Fatalf("rank %d: %d indices, Len %d", r, len(got), s.Len())
									}
									total = s.TotalSize()
									lists = append(lists, got)
								}
								checkCoverage(t, n, total, drop, counts(t, n, lists...))
							}
						})
					}
				}
			}
		}
	}
}

func checkCoverage(t *testing.T, n, total int, drop bool, c []int) {
	t.Helper()
	sum, missing, extra := 0, 0, 0
	for _, k := range c {
		sum += k
		if k == 0 {
			missing++
		}
		if k > 1 {
			extra += k - 1
		}
	}
	if sum != total {
		t.Fatalf("%d indices across ranks, want totalSize %d", sum, total)
	}
	if drop {
		if extra != 0 || missing != n-total {
			t.Fatalf("drop_last: %d repeats and %d missing, want 0 and %d", extra, missing, n-total)
		}
	} else if missing != 0 || extra != total-n {
		t.Fatalf("padded: %d missing and %d repeats, want 0 and %d", missing, extra, total-n)
	}
}

func TestBucketCoverage(t *testing.T) {
	for _, n := range propLengths {
		for _, w := range propWorlds {
			for _, bs := range []int{1, 3, 8} {
				for _, drop := range []bool{false, true} {
					for _, window := range []int{0, 1, -1} {
						name := "bucket/n=" + itoa(n) + "/world=" + itoa(w) + "/batch=" + itoa(bs) + "/drop_last=" + boolStr(drop) + "/window=" + itoa(window)
						t.Run(name, func(t *testing.T) {
							lengths := make([]int, n)
							rng := rand.New(rand.NewPCG(uint64(n), uint64(w)))
							for i := range lengths {
								lengths[i] = 1 + rng.IntN(50)
							}
							opts := BucketOptions{Window: window, DropLast: drop}
							for epoch := range 2 {
								var all [][]int
								steps := -1
								for r := range w {
									s, err := NewBucketSampler(lengths, bs, w, r, 5, opts)
									if err != nil {
										t.Fatal(err)
									}
									b := s.Batches(epoch)
									if steps >= 0 && len(b) != steps {
										t.Fatalf("rank %d: %d batches, rank 0 has %d", r, len(b), steps)
									}
									steps = len(b)
									if len(b) != s.NumBatches() {
										t.Fatalf("rank %d: %d batches, NumBatches %d", r, len(b), s.NumBatches())
									}
									for _, bb := range b {
										if len(bb) == 0 || len(bb) > bs || (drop && len(bb) != bs) {
											t.Fatalf("batch of %d samples (batch size %d, drop_last %v)", len(bb), bs, drop)
										}
									}
									all = append(all, b...)
								}
								c := counts(t, n, all...)
								for i, k := range c {
									if drop && k > 1 {
										t.Fatalf("drop_last: sample %d appears %d times", i, k)
									}
									if !drop && k == 0 {
										t.Fatalf("sample %d never appears", i)
									}
								}
								if drop {
									missing := 0
									for _, k := range c {
										if k == 0 {
											missing++
										}
									}
									// At most the partial batch and an incomplete step are dropped.
									if limit := n%bs + (w-1)*bs; missing > limit {
										t.Fatalf("drop_last: %d samples missing, at most %d expected", missing, limit)
									}
								}
							}
						})
					}
				}
			}
		}
	}
}

func TestBucketDeterminism(t *testing.T) {
	lengths := logNormalLengths(1000, 3)
	a, _ := BucketBatches(lengths, 16, 2, 1, 11, 4, BucketOptions{})
	b, _ := BucketBatches(lengths, 16, 2, 1, 11, 4, BucketOptions{})
	c, _ := BucketBatches(lengths, 16, 2, 1, 11, 5, BucketOptions{})
	if !slices.EqualFunc(a, b, slices.Equal) {
		t.Fatal("same (seed, epoch), different plans")
	}
	if slices.EqualFunc(a, c, slices.Equal) {
		t.Fatal("epochs 4 and 5 give the same plan")
	}
	// The batches of one step (one per rank) come from one window, so the
	// ranks' longest samples are close and no rank waits long for another:
	// compare with the batches of random batching at the same step.
	r0, _ := BucketBatches(lengths, 16, 2, 0, 11, 4, BucketOptions{})
	s0, _ := NewDistributedSampler(len(lengths), 2, 0, true, 11, false)
	s1, _ := NewDistributedSampler(len(lengths), 2, 1, true, 11, false)
	q0, q1 := Chunk(s0.Indices(4), 16, false), Chunk(s1.Indices(4), 16, false)
	var bucketGap, randomGap float64
	for k := range r0 {
		bucketGap += math.Abs(float64(longest(lengths, r0[k]) - longest(lengths, a[k])))
		randomGap += math.Abs(float64(longest(lengths, q0[k]) - longest(lengths, q1[k])))
	}
	t.Logf("mean per-step gap between the ranks' longest samples: bucketing %.1f, random %.1f", bucketGap/float64(len(r0)), randomGap/float64(len(q0)))
	if bucketGap*3 > randomGap {
		t.Errorf("per-step imbalance: bucketing %.0f vs random %.0f", bucketGap, randomGap)
	}
}

func longest(lengths []int, b []int) int {
	m := 0
	for _, i := range b {
		m = max(m, lengths[i])
	}
	return m
}

// logNormalLengths draws n sequence lengths from a log-normal with median
// e^4 ≈ 55 and σ = 0.8 (typical of sentence lengths in tokens), at least 1.
func logNormalLengths(n int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 0))
	out := make([]int, n)
	for i := range out {
		out[i] = max(1, int(math.Exp(4+0.8*rng.NormFloat64())))
	}
	return out
}

// opticksSentences returns the byte lengths of the sentences of the Opticks
// text shipped with Go (GOROOT/src/testdata), or nil when it is not found.
func opticksSentences(t *testing.T) []int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
	if err != nil {
		return nil
	}
	text, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "src", "testdata", "Isaac.Newton-Opticks.txt"))
	if err != nil {
		return nil
	}
	var lengths []int
	for _, s := range strings.Split(strings.Join(strings.Fields(string(text)), " "), ". ") {
		if len(s) > 0 {
			lengths = append(lengths, len(s)+1)
		}
	}
	return lengths
}

// TestBucketPaddingSaved measures the padding a padding collate adds with
// random batching (PyTorch's DistributedSampler + BatchSampler) and with
// bucketing, on realistic length distributions, and logs the saving.
func TestBucketPaddingSaved(t *testing.T) {
	dists := map[string][]int{"lognormal(4,0.8) n=20000": logNormalLengths(20000, 1)}
	if s := opticksSentences(t); s != nil {
		dists["opticks sentences n="+itoa(len(s))] = s
	} else {
		t.Log("Opticks text not found; measuring the log-normal distribution only")
	}
	const world, batch = 4, 32
	for name, lengths := range dists {
		t.Run(name, func(t *testing.T) {
			var rReal, rPad, bReal, bPad int
			for r := range world {
				s, err := NewDistributedSampler(len(lengths), world, r, true, 0, false)
				if err != nil {
					t.Fatal(err)
				}
				re, pa := Padding(lengths, Chunk(s.Indices(0), batch, false))
				rReal, rPad = rReal+re, rPad+pa
				bs, err := NewBucketSampler(lengths, batch, world, r, 0, BucketOptions{})
				if err != nil {
					t.Fatal(err)
				}
				re, pa = Padding(lengths, bs.Batches(0))
				bReal, bPad = bReal+re, bPad+pa
			}
			randomFrac := float64(rPad) / float64(rReal+rPad)
			bucketFrac := float64(bPad) / float64(bReal+bPad)
			t.Logf("bucketing %s, world %d, batch %d: padding %.1f%% of the padded tokens vs %.1f%% with random batching (%.1f× fewer pad tokens, %.1f%% fewer tokens computed)",
				name, world, batch, 100*bucketFrac, 100*randomFrac, float64(rPad)/float64(max(bPad, 1)),
				100*(1-float64(bReal+bPad)/float64(rReal+rPad)))
			if bPad*4 > rPad {
				t.Errorf("bucketing saves too little: %d pad tokens vs %d random", bPad, rPad)
			}
		})
	}
}
