package datasets

import (
	"fmt"
	"os"

	"github.com/cohortml/cohort/data"
)

// ByteCorpus is a byte-level language-modelling corpus split the way the
// GPT-mini anchor (gpt_mini.py) splits Isaac Newton's Opticks: the first
// ⌊0.9·n⌋ bytes train, the rest validate. Token ids are the bytes, 0..255.
//
// Training batches are random windows drawn by a WindowStream; validation
// uses every non-overlapping window of Val (ValWindows). A ByteCorpus is
// immutable and safe for concurrent use.
type ByteCorpus struct {
	Train, Val []byte
	Context    int // tokens per window
}

// NewByteCorpus splits text as int(0.9 * len(text)) computed in float64,
// as Python does, and serves windows of context tokens. It fails for
// context < 1 or when either split is too short for one window
// (context+1 bytes).
func NewByteCorpus(text []byte, context int) (*ByteCorpus, error) {
	if context < 1 {
		return nil, fmt.Errorf("datasets: byte corpus: context length %d, want ≥ 1", context)
	}
	nTrain := int(0.9 * float64(len(text)))
	c := &ByteCorpus{Train: text[:nTrain:nTrain], Val: text[nTrain:], Context: context}
	if len(c.Train) < context+1 || len(c.Val) < context+1 {
		return nil, fmt.Errorf("datasets: byte corpus: %d bytes split %d/%d is too short for windows of context %d (each split needs %d)",
			len(text), len(c.Train), len(c.Val), context, context+1)
	}
	return c, nil
}

// LoadByteCorpus reads the file at path and returns NewByteCorpus over its
// bytes; OpticksPath locates the anchor's text.
func LoadByteCorpus(path string, context int) (*ByteCorpus, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("datasets: byte corpus: %w", err)
	}
	c, err := NewByteCorpus(b, context)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return c, nil
}

// ValWindows returns the number of validation windows,
// ⌊(len(Val)−1)/Context⌋ (886 for Opticks at context 64).
func (c *ByteCorpus) ValWindows() int { return (len(c.Val) - 1) / c.Context }

// ValBatch returns validation windows lo..hi−1 as token ids and next-token
// targets, each (hi−lo)·Context long, row-major [hi−lo, Context]: window i
// is x = Val[i·Context : (i+1)·Context], y the same shifted by one. The
// slices reuse the capacity of x and y. It panics when lo..hi is not a
// range of windows.
func (c *ByteCorpus) ValBatch(lo, hi int, x, y []int64) ([]int64, []int64) {
	if lo < 0 || hi < lo || hi > c.ValWindows() {
		panic(fmt.Sprintf("datasets: byte corpus: validation windows %d..%d outside 0..%d", lo, hi, c.ValWindows()))
	}
	x, y = x[:0], y[:0]
	for i := lo; i < hi; i++ {
		x, y = appendWindow(x, y, c.Val, i*c.Context, c.Context)
	}
	return x, y
}

// appendWindow appends text[s:s+n] to x and text[s+1:s+n+1] to y.
func appendWindow(x, y []int64, text []byte, s, n int) ([]int64, []int64) {
	for _, b := range text[s : s+n] {
		x = append(x, int64(b))
	}
	for _, b := range text[s+1 : s+n+1] {
		y = append(y, int64(b))
	}
	return x, y
}

// WindowStream draws the training batches of one rank of a data-parallel
// job exactly as gpt_mini.Batches does in PyTorch 1.13. Each step draws,
// from one MT19937 (torch.Generator) seeded with the data seed on every
// rank,
//
//	starts = torch.randint(0, len(Train) − Context, (worldSize·batch,))
//
// which on CPU is Uint32() % (len(Train) − Context), one draw per sample in
// order, and rank r keeps starts[r·batch : (r+1)·batch]. A start s gives
// x = Train[s : s+Context] and y = Train[s+1 : s+Context+1].
//
// Every rank of the job draws the same numbers, so the ranks' batches
// together are the batch a world of one would draw with batch
// worldSize·batch. A WindowStream is a state machine with no I/O; it is
// not safe for concurrent use.
type WindowStream struct {
	corpus                 *ByteCorpus
	worldSize, rank, batch int
	g                      *data.MT19937
	starts                 []int // this rank's starts of the last step
	step                   int64 // steps drawn so far
}

// NewWindowStream returns rank's stream of batches of batch windows in a
// job of worldSize ranks, seeded with seed (torch's manual_seed: only the
// low 32 bits count).
func (c *ByteCorpus) NewWindowStream(seed uint64, worldSize, rank, batch int) (*WindowStream, error) {
	if worldSize < 1 || rank < 0 || rank >= worldSize || batch < 1 {
		return nil, fmt.Errorf("datasets: window stream: rank %d of world %d with batch %d: want 0 ≤ rank < world and batch ≥ 1", rank, worldSize, batch)
	}
	if uint64(len(c.Train)-c.Context) >= 1<<32 {
		return nil, fmt.Errorf("datasets: window stream: %d training bytes: torch draws 64-bit numbers beyond 2^32 starts, which is not implemented", len(c.Train))
	}
	return &WindowStream{corpus: c, worldSize: worldSize, rank: rank, batch: batch, g: data.NewMT19937(seed),
		starts: make([]int, batch)}, nil
}

// Steps returns the number of steps drawn so far.
func (s *WindowStream) Steps() int64 { return s.step }

// Skip draws n steps without building their batches, so that a resumed job
// continues the stream where it stopped.
func (s *WindowStream) Skip(n int64) {
	for range n {
		s.draw()
	}
}

// NextStarts draws the next step and returns this rank's window starts. The
// slice is reused by the next draw.
func (s *WindowStream) NextStarts() []int {
	s.draw()
	return s.starts
}

// Next draws the next step and returns this rank's batch: token ids x and
// targets y, each batch·Context long, row-major [batch, Context]. The
// slices reuse the capacity of x and y.
func (s *WindowStream) Next(x, y []int64) ([]int64, []int64) {
	c := s.corpus
	x, y = x[:0], y[:0]
	for _, st := range s.NextStarts() {
		x, y = appendWindow(x, y, c.Train, st, c.Context)
	}
	return x, y
}

// draw advances the generator by one step of the whole job and keeps this
// rank's share.
func (s *WindowStream) draw() {
	n := uint64(len(s.corpus.Train) - s.corpus.Context)
	lo, hi := s.rank*s.batch, (s.rank+1)*s.batch
	for i := range s.worldSize * s.batch {
		v := int(uint64(s.g.Uint32()) % n)
		if i >= lo && i < hi {
			s.starts[i-lo] = v
		}
	}
	s.step++
}
