package collective

import "testing"

// TestChoose: the automatic choice of an all-reduce algorithm by size and
// group size, on the default tuning and on one that moves the bounds.
func TestChoose(t *testing.T) {
	const K, M = 1 << 10, 1 << 20
	for _, tc := range []struct {
		size  int
		bytes int
		tun   Tuning
		want  string
	}{
		{2, 4 * K, Tuning{}, "recursive_doubling"},
		{2, 64 * K, Tuning{}, "recursive_doubling"}, // two ranks: doubling up to SmallBytes
		{2, 64*K + 4, Tuning{}, "halving_doubling"},
		{2, 1 * M, Tuning{}, "halving_doubling"}, // runs inline
		{2, 1*M + 4, Tuning{}, "ring"},
		{4, 4 * K, Tuning{}, "recursive_doubling"},
		{4, 4*K + 4, Tuning{}, "halving_doubling"}, // more ranks: doubling only up to DoublingBytes
		{4, 64 * K, Tuning{}, "halving_doubling"},
		{8, 512 * K, Tuning{}, "halving_doubling"},
		{8, 512*K + 4, Tuning{}, "ring"},
		{3, 16 * K, Tuning{DoublingBytes: 32 * K}, "recursive_doubling"},
		{3, 16 * K, Tuning{DoublingBytes: 32 * K, SmallBytes: 8 * K}, "halving_doubling"}, // SmallBytes bounds it too
	} {
		c := Call{Kind: AllReduce, DType: Float32, Op: Sum, Count: tc.bytes / 4}
		if got := Choose(c, tc.size, tc.tun); got != tc.want {
			t.Errorf("%d bytes on %d ranks (%+v): %s, want %s", tc.bytes, tc.size, tc.tun, got, tc.want)
		}
	}
}
