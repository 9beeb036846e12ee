package data

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// samplerGolden is the format of testdata/sampler.json, made by
// testdata/make_sampler.py with PyTorch 1.13.
type samplerGolden struct {
	Cases []struct {
		Len         int    `json:"len"`
		NumReplicas int    `json:"num_replicas"`
		Rank        int    `json:"rank"`
		Shuffle     bool   `json:"shuffle"`
		Seed        uint64 `json:"seed"`
		Epoch       int    `json:"epoch"`
		DropLast    bool   `json:"drop_last"`
		NumSamples  int    `json:"num_samples"`
		TotalSize   int    `json:"total_size"`
		Indices     []int  `json:"indices"`
	} `json:"cases"`
	Randperm []struct {
		N        int    `json:"n"`
		Seed     uint64 `json:"seed"`
		Perm     []int  `json:"perm"`
		PermHead []int  `json:"perm_head"`
		Checksum *int64 `json:"perm_weighted_sum_mod_2_61_1"`
	} `json:"randperm"`
}

// weightedSum returns Σ (i+1)·p[i] mod 2^61−1, the checksum the golden file
// stores for large permutations.
func weightedSum(p []int) int64 {
	const m = 1<<61 - 1
	var s uint64
	for i, v := range p {
		// (i+1)·v < 2^17·2^17 for n ≤ 60000, so no overflow before the mod.
		s = (s + uint64(i+1)*uint64(v)) % m
	}
	return int64(s)
}

func runSamplerGolden(t *testing.T, path string) int {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("sampler golden: %v", err)
	}
	var g samplerGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("sampler golden: %s: %v", path, err)
	}
	if len(g.Cases) == 0 && len(g.Randperm) == 0 {
		t.Fatalf("sampler golden: %s holds no cases", path)
	}
	passed := 0
	for _, c := range g.Cases {
		name := filepath.Base(path) + "/" + caseName(c.Len, c.NumReplicas, c.Rank, c.Shuffle, c.Seed, c.Epoch, c.DropLast)
		ok := t.Run(name, func(t *testing.T) {
			s, err := NewDistributedSampler(c.Len, c.NumReplicas, c.Rank, c.Shuffle, c.Seed, c.DropLast)
			if err != nil {
				t.Fatal(err)
			}
			if s.Len() != c.NumSamples || s.TotalSize() != c.TotalSize {
				t.Errorf("num_samples %d total_size %d, want %d %d", s.Len(), s.TotalSize(), c.NumSamples, c.TotalSize)
			}
			s.SetEpoch(c.Epoch)
			got := slices.Collect(s.All())
			if !slices.Equal(got, c.Indices) {
				t.Errorf("indices\n got %v\nwant %v", got, c.Indices)
			}
		})
		if ok {
			passed++
		}
	}
	for _, c := range g.Randperm {
		ok := t.Run(filepath.Base(path)+"/"+permName(c.N, c.Seed), func(t *testing.T) {
			got := Randperm(c.N, c.Seed)
			switch {
			case c.Perm != nil:
				if !slices.Equal(got, c.Perm) {
					t.Errorf("randperm\n got %v\nwant %v", got, c.Perm)
				}
			case c.PermHead != nil && c.Checksum != nil:
				if !slices.Equal(got[:len(c.PermHead)], c.PermHead) {
					t.Errorf("randperm head\n got %v\nwant %v", got[:len(c.PermHead)], c.PermHead)
				}
				if w := weightedSum(got); w != *c.Checksum {
					t.Errorf("randperm checksum %d, want %d", w, *c.Checksum)
				}
			default:
				t.Fatal("randperm case has neither perm nor perm_head+checksum")
			}
		})
		if ok {
			passed++
		}
	}
	return passed
}

func caseName(n, w, rank int, shuffle bool, seed uint64, epoch int, dropLast bool) string {
	return "len=" + itoa(n) + "/world=" + itoa(w) + "/rank=" + itoa(rank) + "/shuffle=" + boolStr(shuffle) +
		"/seed=" + itoa(int(seed)) + "/epoch=" + itoa(epoch) + "/drop_last=" + boolStr(dropLast)
}

func permName(n int, seed uint64) string { return "randperm/n=" + itoa(n) + "/seed=" + utoa(seed) }

func TestSamplerGolden(t *testing.T) {
	paths := []string{filepath.Join("testdata", "sampler.json")}
	if p := os.Getenv("COHORT_SAMPLER_GOLDEN"); p != "" {
		paths = append(paths, p)
	}
	for _, p := range paths {
		n := runSamplerGolden(t, p)
		t.Logf("sampler golden: %d cases passed from %s", n, p)
	}
}
