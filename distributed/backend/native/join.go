package native

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/store"
)

// Joining a job through its store.
//
// Every rank first learns the job's identity: rank 0 proposes a fresh
// random nonce under <prefix>/job (compare-and-set, so a later rank 0 of the
// same prefix cannot replace it) and every rank reads it; all later keys
// live under <prefix>/<nonce>/. Then each rank claims its rank number with a
// compare-and-set of its own process identity. A second process claiming a
// rank that is taken — another job started by hand on the same
// MASTER_ADDR:MASTER_PORT without a run id or token, or a rank started
// twice — is refused with an error naming the rank and both claimants,
// and it posts <prefix>/<nonce>/duplicate, which every group built on the
// job watches: they abort, naming the rank, instead of training on with a
// stranger. Without a token the nonce also keys the transport handshake,
// so connections from another job's processes are refused.

// joinProgressEvery is how often Init reports the ranks it still waits for.
const joinProgressEvery = 10 * time.Second

// processIdentity names this process for claim conflicts.
func processIdentity() string {
	h, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s pid %d (%s)", h, os.Getpid(), hex.EncodeToString(b[:]))
}

// joinJob learns the job's nonce, moves o.Prefix under it and claims
// o.Rank. It returns the key that signals a duplicate claim.
func (o *config) joinJob(ctx context.Context) (dupKey string, err error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("distributed: Init: rank %d: job nonce: %w", o.Rank, err)
	}
	jobKey := o.Prefix + "/job"
	var nonce []byte
	if o.Rank == 0 {
		nonce, err = o.Store.CompareAndSwap(ctx, jobKey, nil, []byte(hex.EncodeToString(b[:])))
		if err != nil {
			return "", fmt.Errorf("distributed: Init: rank 0: publish the job nonce: %w", err)
		}
	} else {
		vals, err := o.await(ctx, "the job nonce from", []int{0}, func(int) string { return jobKey })
		if err != nil {
			return "", err
		}
		nonce = []byte(vals[0])
	}
	o.Prefix += "/" + string(nonce)
	o.jobNonce = string(nonce)
	me := processIdentity()
	key := o.storeKey("claim", o.Rank)
	got, err := o.Store.CompareAndSwap(ctx, key, nil, []byte(me))
	if err != nil {
		return "", fmt.Errorf("distributed: Init: rank %d: claim the rank: %w", o.Rank, err)
	}
	dupKey = o.Prefix + "/duplicate"
	if string(got) != me {
		msg := fmt.Sprintf("rank %d was claimed twice: by %s, then by %s", o.Rank, got, me)
		_ = o.Store.Set(ctx, dupKey, []byte(msg)) // best effort: the others then abort too
		return "", fmt.Errorf("distributed: Init: %s: two processes started as rank %d of one job (two jobs on the same store address with no run id or COHORT_TOKEN?)", msg, o.Rank)
	}
	return dupKey, nil
}

// watchDuplicate aborts g if a duplicate claim of one of the job's ranks
// is posted under key. The watcher belongs to g: it ends when g breaks or
// closes.
func (g *group) watchDuplicate(st store.Store, key string) {
	g.wg.Go(func() {
		v, err := st.Get(g.ctx, key)
		if err != nil {
			return // the group ended, or the store went away (ops then fail on their own)
		}
		g.abort(&distributed.OpError{Op: "join", Rank: g.me, Peer: -1,
			Err: fmt.Errorf("%s: another process joined this job's store as one of its ranks; the group cannot be trusted", v)}, true)
	})
}

// await waits for the keys key(r) of the ranks in from, reporting every
// joinProgressEvery the ranks still missing, and returns their values in
// a world-sized slice. When ctx ends first the error names those ranks.
func (o *config) await(ctx context.Context, what string, from []int, key func(int) string) ([]string, error) {
	vals := make([]string, o.WorldSize)
	if len(from) == 0 {
		return vals, nil
	}
	type got struct {
		r   int
		v   []byte
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan got, len(from))
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, r := range from {
		wg.Go(func() {
			v, err := o.Store.Get(ctx, key(r))
			ch <- got{r, v, err}
		})
	}
	missing := slices.Clone(from)
	start := time.Now()
	tick := time.NewTicker(o.progressEvery())
	defer tick.Stop()
	for len(missing) > 0 {
		select {
		case g := <-ch:
			if g.err != nil {
				if ctx.Err() != nil {
					return nil, o.notJoined(what, missing, start, context.Cause(ctx))
				}
				return nil, fmt.Errorf("distributed: Init: rank %d: waiting for %s rank %d: %w", o.Rank, what, g.r, g.err)
			}
			vals[g.r] = string(g.v)
			missing = slices.DeleteFunc(missing, func(r int) bool { return r == g.r })
		case <-tick.C:
			o.logger().Info(fmt.Sprintf("distributed: rank %d: waiting for %s to join (%s)", o.Rank, rankList(missing), time.Since(start).Round(time.Second)))
		case <-ctx.Done():
			return nil, o.notJoined(what, missing, start, context.Cause(ctx))
		}
	}
	return vals, nil
}

func (o *config) notJoined(what string, missing []int, start time.Time, cause error) error {
	verb := "has"
	if len(missing) > 1 {
		verb = "have"
	}
	if errors.Is(cause, context.DeadlineExceeded) {
		return fmt.Errorf("distributed: Init: rank %d: %s %s not joined after %s (waiting for %s): %w",
			o.Rank, rankList(missing), verb, time.Since(start).Round(time.Millisecond), what, cause)
	}
	return fmt.Errorf("distributed: Init: rank %d: stopped waiting for %s (%s %s not joined): %w", o.Rank, what, rankList(missing), verb, cause)
}

// rankList renders ranks as "rank 2" or "ranks [1 3]".
func rankList(ranks []int) string {
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %d", ranks[0])
	}
	return fmt.Sprintf("ranks %v", ranks)
}

func (o *config) logger() *slog.Logger {
	if o.Log != nil {
		return o.Log
	}
	return slog.Default()
}

func (o *config) progressEvery() time.Duration {
	if o.joinProgress > 0 {
		return o.joinProgress
	}
	return joinProgressEvery
}
