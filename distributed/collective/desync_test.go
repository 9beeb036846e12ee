package collective

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/inproc"
)

// steered wraps one rank's transport to decide which rank of a desynced
// pair detects the mismatch, and in which order the first message and the
// receive for it meet in the receiver's transport.
type steered struct {
	transport.Transport
	// deaf: Recv never delivers; it returns when ctx ends. The rank can
	// then only be told of the desync, never detect it.
	deaf bool
	// recvAfter, if non-nil, is waited for before the first receive of
	// an op header (so the peer's first message is already queued).
	recvAfter <-chan struct{}
	// sendAfter, if non-nil, is waited for before the first send of an op
	// header (so the peer is already waiting for it).
	sendAfter <-chan struct{}
	// sent is closed once this rank's op header has been handed to the
	// transport; posting is closed when this rank goes to receive its
	// peer's op header.
	sent, posting         chan struct{}
	sentOnce, postingOnce sync.Once
	// lengthErr records that a receive failed on a length mismatch.
	lengthErr atomic.Bool
}

func newSteered(t transport.Transport) *steered {
	return &steered{Transport: t, sent: make(chan struct{}), posting: make(chan struct{})}
}

// headerTag reports whether tag is step 0 of an op, the message that
// starts with the sender's header.
func headerTag(tag transport.Tag) bool { return tag.Step == 0 }

func waitFor(ctx context.Context, c <-chan struct{}) error {
	if c == nil {
		return nil
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *steered) Send(ctx context.Context, to int, tag transport.Tag, p []byte) error {
	if headerTag(tag) {
		if err := waitFor(ctx, s.sendAfter); err != nil {
			return err
		}
		defer s.sentOnce.Do(func() { close(s.sent) })
	}
	return s.Transport.Send(ctx, to, tag, p)
}

func (s *steered) Recv(ctx context.Context, from int, tag transport.Tag, p []byte) error {
	if s.deaf {
		<-ctx.Done()
		return ctx.Err()
	}
	if headerTag(tag) {
		if err := waitFor(ctx, s.recvAfter); err != nil {
			return err
		}
		s.postingOnce.Do(func() { close(s.posting) })
	}
	err := s.Transport.Recv(ctx, from, tag, p)
	if errors.Is(err, transport.ErrLength) {
		s.lengthErr.Store(true)
	}
	return err
}

// TestDesyncEitherSideNamesBothCalls: two ranks call different collectives
// at the same seq, and their first messages differ in length (so the
// receiver's transport rejects the message before any header is read).
// Whichever rank detects it, and whether the message was queued before the
// receive or arrived while it waited, the error is a *DesyncError naming
// both ranks and both calls.
func TestDesyncEitherSideNamesBothCalls(t *testing.T) {
	const big = 1 << 19 // float32s: 2 MiB, run with inlining off so that the plan uses the per-peer goroutines
	cases := []struct {
		name  string
		calls [2]Call
		// lengthErr[r]: the first message rank r receives does not fit
		// its buffer (else the header is read and compared as usual).
		lengthErr [2]bool
		tuning    Tuning // both ranks'
	}{
		{"allreduce-vs-broadcast", [2]Call{
			{Kind: AllReduce, DType: Float32, Count: 100, Op: Sum},
			{Kind: Broadcast, DType: Float32, Count: 100, Root: 0}}, [2]bool{true, false}, Tuning{}},
		{"broadcast-vs-allreduce", [2]Call{
			{Kind: Broadcast, DType: Float32, Count: 100, Root: 1},
			{Kind: AllReduce, DType: Float32, Count: 100, Op: Sum}}, [2]bool{false, true}, Tuning{}},
		{"allreduce-count", [2]Call{
			{Kind: AllReduce, DType: Float32, Count: 8, Op: Sum},
			{Kind: AllReduce, DType: Float32, Count: 24, Op: Sum}}, [2]bool{true, true}, Tuning{}},
		{"allgather-vs-allreduce", [2]Call{
			{Kind: AllGather, DType: Int64, Count: 4},
			{Kind: AllReduce, DType: Int64, Count: 4, Op: Max}}, [2]bool{true, true}, Tuning{}},
		{"large-vs-small", [2]Call{
			{Kind: AllReduce, DType: Float32, Count: big, Op: Sum},
			{Kind: AllReduce, DType: Float32, Count: 8, Op: Sum}}, [2]bool{true, true}, Tuning{}},
		{"large-allreduce-vs-broadcast", [2]Call{
			{Kind: AllReduce, DType: Float32, Count: big, Op: Sum},
			{Kind: Broadcast, DType: Float32, Count: big, Root: 1}}, [2]bool{false, false}, Tuning{InlineBytes: -1}},
		{"barrier-vs-broadcast", [2]Call{
			{Kind: Barrier},
			{Kind: Broadcast, DType: Float64, Count: 3, Root: 0}}, [2]bool{true, true}, Tuning{}},
	}
	for _, tc := range cases {
		for detector := range 2 {
			for _, order := range []string{"queued", "waiting"} {
				name := tc.name + "/detector=" + string(rune('0'+detector)) + "/" + order
				t.Run(name, func(t *testing.T) {
					runDesyncPair(t, tc.calls, [2]Tuning{tc.tuning, tc.tuning}, detector, order, tc.lengthErr[detector])
				})
			}
		}
	}
}

func runDesyncPair(t *testing.T, calls [2]Call, tunings [2]Tuning, detector int, order string, lengthsDiffer bool) {
	err, sawLength := runSteeredPair(t, calls, tunings, detector, order)
	var de *DesyncError
	if !errors.As(err, &de) {
		t.Fatalf("detector rank %d: %v, want a *DesyncError", detector, err)
	}
	if de.PeerCall == nil {
		t.Fatalf("detector rank %d: %v: the peer's call is unknown", detector, err)
	}
	other := 1 - detector
	if de.Group != 3 || de.Seq != 9 || de.Rank != detector || de.Peer != other ||
		de.Call != calls[detector] || *de.PeerCall != calls[other] {
		t.Errorf("detector rank %d: %+v (peer call %v), want group 3 seq 9 rank %d %v, peer %d %v",
			detector, *de, *de.PeerCall, detector, calls[detector], other, calls[other])
	}
	msg := err.Error()
	for _, s := range []string{calls[0].String(), calls[1].String(), "rank 0", "rank 1", "seq 9"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q lacks %q", msg, s)
		}
	}
	if sawLength != lengthsDiffer {
		t.Errorf("detector's transport saw a length mismatch: %v, want %v", sawLength, lengthsDiffer)
	}
}

// runSteeredPair runs calls[r] with tunings[r] on rank r of a two-rank
// mesh (group 3, seq 9) where only detector can detect a mismatch, and
// returns the detector's error and whether its transport rejected a
// message for its length.
func runSteeredPair(t *testing.T, calls [2]Call, tunings [2]Tuning, detector int, order string) (error, bool) {
	t.Helper()
	mesh := inproc.NewMesh(2)
	defer closeMesh(mesh)
	other := 1 - detector
	ts := [2]*steered{newSteered(mesh[0]), newSteered(mesh[1])}
	ts[other].deaf = true
	switch order {
	case "queued":
		ts[detector].recvAfter = ts[other].sent
	case "waiting":
		ts[other].sendAfter = ts[detector].posting
	}
	detCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The deaf rank runs until the detector has failed, as the native backend
	// would abort it.
	otherCtx, stopOther := context.WithCancel(detCtx)
	defer stopOther()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			e, err := NewExecutor(ts[r], 3, []int{0, 1})
			if err != nil {
				errs[r] = err
				return
			}
			defer e.Close()
			p, err := NewPlan(calls[r], 2, r, "", tunings[r])
			if err != nil {
				errs[r] = err
				return
			}
			in, out := buffers(calls[r], 2, r)
			ctx := detCtx
			if r == other {
				ctx = otherCtx
			}
			errs[r] = e.Run(ctx, 9, p, in, out)
			if r == detector {
				stopOther()
			}
		})
	}
	wg.Wait()
	return errs[detector], ts[detector].lengthErr.Load()
}

// TestSamePlanMismatchNamed: ranks that run the same call with plans that
// disagree (here: one runs it inline, the other with per-peer goroutines)
// get an error saying so, not a desync.
func TestSamePlanMismatchNamed(t *testing.T) {
	call := Call{Kind: AllReduce, DType: Float32, Count: 8, Op: Sum}
	for detector := range 2 {
		t.Run("detector="+string(rune('0'+detector)), func(t *testing.T) {
			err, sawLength := runSteeredPair(t, [2]Call{call, call}, [2]Tuning{{InlineBytes: -1}, {}}, detector, "queued")
			var de *DesyncError
			if err == nil || errors.As(err, &de) || !errors.Is(err, transport.ErrLength) ||
				!strings.Contains(err.Error(), "same call with another plan") || !sawLength {
				t.Fatalf("detector rank %d: %v (length mismatch seen: %v), want a length error naming a plan mismatch", detector, err, sawLength)
			}
			t.Log(err)
		})
	}
}
