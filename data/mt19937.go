package data

// MT19937 is the 32-bit Mersenne Twister (Matsumoto & Nishimura, 1998)
// seeded with init_genrand — the generator behind torch.Generator on CPU.
// Seeding with s equals torch.Generator().manual_seed(s): only the low 32
// bits of s are used.
//
// An MT19937 is not safe for concurrent use; give each goroutine its own.
type MT19937 struct {
	mt  [624]uint32
	idx int
}

// NewMT19937 returns a generator seeded with the low 32 bits of seed.
func NewMT19937(seed uint64) *MT19937 {
	g := &MT19937{}
	g.Seed(seed)
	return g
}

// Seed resets the generator as init_genrand(uint32(seed)) does.
func (g *MT19937) Seed(seed uint64) {
	g.mt[0] = uint32(seed)
	for i := 1; i < len(g.mt); i++ {
		prev := g.mt[i-1]
		g.mt[i] = 1812433253*(prev^(prev>>30)) + uint32(i)
	}
	g.idx = len(g.mt)
}

// Uint32 returns the next tempered 32-bit output.
func (g *MT19937) Uint32() uint32 {
	if g.idx >= len(g.mt) {
		g.twist()
	}
	y := g.mt[g.idx]
	g.idx++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

func (g *MT19937) twist() {
	const n, m = 624, 397
	mt := &g.mt
	for i := range n {
		y := mt[i]&0x80000000 | mt[(i+1)%n]&0x7fffffff
		v := mt[(i+m)%n] ^ y>>1
		if y&1 != 0 {
			v ^= 0x9908b0df
		}
		mt[i] = v
	}
	g.idx = 0
}

// Randperm returns PyTorch's torch.randperm(n, generator=g) for a CPU
// generator seeded with seed (PyTorch 1.13, aten randperm_cpu): starting
// from the identity, for i in 0..n-2 it draws z = Uint32() % (n−i) and
// swaps r[i] and r[i+z].
func Randperm(n int, seed uint64) []int {
	r := make([]int, n)
	randpermInto(r, NewMT19937(seed))
	return r
}

// randpermInto fills r with a permutation of 0..len(r)-1 drawn from g.
func randpermInto(r []int, g *MT19937) {
	for i := range r {
		r[i] = i
	}
	permute(r, g)
}

// permute shuffles r in place with PyTorch's randperm loop.
func permute[T any](r []T, g *MT19937) {
	n := len(r)
	for i := 0; i < n-1; i++ {
		z := int(uint64(g.Uint32()) % uint64(n-i))
		r[i], r[i+z] = r[i+z], r[i]
	}
}
