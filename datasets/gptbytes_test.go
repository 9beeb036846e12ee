package datasets

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type gptBytesGolden struct {
	Cases []struct {
		TextBytes  int     `json:"text_bytes"`
		Context    int     `json:"context"`
		Seed       uint64  `json:"seed"`
		World      int     `json:"world"`
		Batch      int     `json:"batch"`
		Steps      int     `json:"steps"`
		NTrain     int     `json:"n_train"`
		Starts     [][]int `json:"starts"`      // every step's whole draw (short cases)
		LastStarts []int   `json:"last_starts"` // the last step's draw (long cases)
		SumStarts  int     `json:"sum_starts"`  // of every draw (long cases)
	} `json:"cases"`
}

// TestWindowStreamMatchesTorch checks every rank's starts against what
// torch.randint drew (testdata/gptbytes.json, made by make_gptbytes.py).
func TestWindowStreamMatchesTorch(t *testing.T) {
	g := readGolden[gptBytesGolden](t, "gptbytes.json")
	for _, c := range g.Cases {
		name := fmt.Sprintf("n=%d/seed=%d/world=%d/batch=%d", c.TextBytes, c.Seed, c.World, c.Batch)
		t.Run(name, func(t *testing.T) {
			corpus, err := NewByteCorpus(make([]byte, c.TextBytes), c.Context)
			if err != nil {
				t.Fatal(err)
			}
			if len(corpus.Train) != c.NTrain {
				t.Fatalf("%d training bytes, python int(0.9*n) = %d", len(corpus.Train), c.NTrain)
			}
			for rank := range c.World {
				s, err := corpus.NewWindowStream(c.Seed, c.World, rank, c.Batch)
				if err != nil {
					t.Fatal(err)
				}
				lo, hi := rank*c.Batch, (rank+1)*c.Batch
				sum := 0
				for step := range c.Steps {
					got := s.NextStarts()
					for _, v := range got {
						sum += v
					}
					switch {
					case c.Starts != nil && !slices.Equal(got, c.Starts[step][lo:hi]):
						t.Fatalf("rank %d step %d: starts %v, torch %v", rank, step, got, c.Starts[step][lo:hi])
					case c.Starts == nil && step == c.Steps-1 && !slices.Equal(got, c.LastStarts[lo:hi]):
						t.Fatalf("rank %d step %d: starts %v, torch %v", rank, step, got, c.LastStarts[lo:hi])
					}
				}
				if c.Starts == nil && c.World == 1 && sum != c.SumStarts {
					t.Fatalf("sum of all starts %d, torch %d", sum, c.SumStarts)
				}
				if s.Steps() != int64(c.Steps) {
					t.Fatalf("Steps() = %d after %d draws", s.Steps(), c.Steps)
				}
			}
		})
	}
}

// TestWindowStreamAnchorStarts pins the first starts the anchor documents
// (README "GPT-mini workload", and first_batch_starts in its results) for
// seed 0 on Opticks: 44192, 303207, 43481, 112704.
func TestWindowStreamAnchorStarts(t *testing.T) {
	corpus, err := NewByteCorpus(make([]byte, 567198), 64)
	if err != nil {
		t.Fatal(err)
	}
	s, err := corpus.NewWindowStream(0, 1, 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.NextStarts()[:4], []int{44192, 303207, 43481, 112704}; !slices.Equal(got, want) {
		t.Fatalf("first starts %v, anchor %v", got, want)
	}
}

// TestWindowStreamShares checks that the ranks of a job split one draw: their
// batches, concatenated in rank order, are a world of one's batch of
// world·batch windows, and that Skip continues the stream where Next would.
func TestWindowStreamShares(t *testing.T) {
	text := make([]byte, 5000)
	for i := range text {
		text[i] = byte(i*7 + i/13)
	}
	corpus, err := NewByteCorpus(text, 16)
	if err != nil {
		t.Fatal(err)
	}
	for _, world := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			const batch, steps = 5, 3
			one, _ := corpus.NewWindowStream(9, 1, 0, world*batch)
			var wantX, wantY []int64
			for range steps {
				wantX, wantY = one.Next(wantX, wantY)
			}
			var gotX, gotY []int64
			for rank := range world {
				s, err := corpus.NewWindowStream(9, world, rank, batch)
				if err != nil {
					t.Fatal(err)
				}
				s.Skip(steps - 1)
				x, y := s.Next(nil, nil)
				gotX, gotY = append(gotX, x...), append(gotY, y...)
			}
			if !slices.Equal(gotX, wantX) || !slices.Equal(gotY, wantY) {
				t.Fatalf("ranks' batches differ from one world's batch")
			}
			for i := 0; i < len(gotX); i += 16 {
				if !slices.Equal(gotX[i+1:i+16], gotY[i:i+15]) {
					t.Fatalf("window %d: targets are not the inputs shifted by one", i/16)
				}
			}
		})
	}
}

func TestByteCorpusValidation(t *testing.T) {
	text := []byte(strings.Repeat("abcdefghij", 100)) // 1000 bytes: 900 train, 100 val
	c, err := NewByteCorpus(text, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Train) != 900 || len(c.Val) != 100 || c.ValWindows() != 12 { // (100-1)/8
		t.Fatalf("train %d val %d windows %d", len(c.Train), len(c.Val), c.ValWindows())
	}
	x, y := c.ValBatch(2, 4, nil, nil)
	wantX, wantY := make([]int64, 16), make([]int64, 16)
	for i := range 16 {
		wantX[i], wantY[i] = int64(text[900+16+i]), int64(text[900+17+i])
	}
	if !slices.Equal(x, wantX) || !slices.Equal(y, wantY) {
		t.Fatalf("windows 2..3: x %v y %v, want %v %v", x, y, wantX, wantY)
	}
	for _, bad := range [][2]int{{-1, 2}, {3, 2}, {0, 13}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ValBatch(%d, %d) did not panic", bad[0], bad[1])
				}
			}()
			c.ValBatch(bad[0], bad[1], nil, nil)
		}()
	}
}

func TestByteCorpusErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n, ctx int
		want   string
	}{
		{name: "context 0", n: 1000, ctx: 0, want: "context length 0"},
		{name: "val too short", n: 100, ctx: 10, want: "too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewByteCorpus(make([]byte, tc.n), tc.ctx); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewByteCorpus(%d bytes, %d): %v, want %q", tc.n, tc.ctx, err, tc.want)
			}
		})
	}
	c, _ := NewByteCorpus(make([]byte, 1000), 8)
	for _, tc := range []struct {
		name               string
		world, rank, batch int
	}{
		{"world 0", 0, 0, 1}, {"rank = world", 2, 2, 1}, {"negative rank", 2, -1, 1}, {"batch 0", 1, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.NewWindowStream(0, tc.world, tc.rank, tc.batch); err == nil || !strings.Contains(err.Error(), "datasets: window stream") {
				t.Errorf("NewWindowStream(world %d, rank %d, batch %d): %v, want an error", tc.world, tc.rank, tc.batch, err)
			}
		})
	}
	if _, err := LoadByteCorpus(filepath.Join(t.TempDir(), "missing.txt"), 8); err == nil || !strings.Contains(err.Error(), "missing.txt") {
		t.Errorf("LoadByteCorpus of a missing file: %v, want an error naming it", err)
	}
}

// TestByteCorpusOpticks checks the anchor's split of the real text: 510,478
// training and 56,720 validation bytes, 886 validation windows.
func TestByteCorpusOpticks(t *testing.T) {
	path := opticksOrSkip(t)
	c, err := LoadByteCorpus(path, 64)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Train) != 510478 || len(c.Val) != 56720 || c.ValWindows() != 886 {
		t.Fatalf("train %d val %d windows %d, anchor 510478 56720 886", len(c.Train), len(c.Val), c.ValWindows())
	}
}
