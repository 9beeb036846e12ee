package launch

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/distributed/store"
)

// The launchers of a multi-node job coordinate through the job's store
// (served by node 0's launcher), under keyPrefix:
//
//	run-id      node 0's run id, adopted by the others
//	node/R      "NPROC/NONCE" once node R's launcher joined (set by CAS,
//	            so two launchers claiming one node rank are caught)
//	failed      the first failure in the job, "node R: …" (set by CAS)
//	exit/R      node R's outcome once its workers are gone: "ok" or the error
//	left/R      node R (> 0) has read every outcome; node 0 may stop serving
//
// Workers use the same store; their keys never start with keyPrefix.
const keyPrefix = "cohort/launch/"

func nodeKey(r int) string { return keyPrefix + "node/" + strconv.Itoa(r) }
func exitKey(r int) string { return keyPrefix + "exit/" + strconv.Itoa(r) }
func leftKey(r int) string { return keyPrefix + "left/" + strconv.Itoa(r) }

const (
	runIDKey  = keyPrefix + "run-id"
	failedKey = keyPrefix + "failed"
)

// randomHex returns n random bytes in hex.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("launch: reading random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// join registers this node's launcher, waits for every other node's and
// checks they agree. It returns the job's run id.
func join(ctx context.Context, st store.Store, c *Config, runID string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.JoinTimeout)
	defer cancel()
	if c.NodeRank == 0 {
		if err := st.Set(ctx, runIDKey, []byte(runID)); err != nil {
			return "", fmt.Errorf("launch: publishing the run id: %w", err)
		}
	} else {
		got, err := st.Get(ctx, runIDKey)
		if err != nil {
			return "", fmt.Errorf("launch: node %d: waiting for node 0's run id: %w", c.NodeRank, err)
		}
		if runID != "" && string(got) != runID {
			return "", fmt.Errorf("launch: node %d has run id %q but node 0 has %q: give every node the same COHORT_RUN_ID, or none", c.NodeRank, runID, got)
		}
		runID = string(got)
	}
	nonce, err := randomHex(8)
	if err != nil {
		return "", err
	}
	mine := []byte(strconv.Itoa(c.NProcPerNode) + "/" + nonce)
	got, err := st.CompareAndSwap(ctx, nodeKey(c.NodeRank), nil, mine)
	if err != nil {
		return "", fmt.Errorf("launch: node %d: joining: %w", c.NodeRank, err)
	}
	if !bytes.Equal(got, mine) {
		return "", fmt.Errorf("launch: node rank %d was already taken by another launcher: give each node its own --node-rank", c.NodeRank)
	}
	keys := make([]string, c.NNodes)
	for r := range keys {
		keys[r] = nodeKey(r)
	}
	if err := st.Wait(ctx, keys...); err != nil {
		return "", fmt.Errorf("launch: node %d: not every node's launcher joined within %v (--nnodes %d): %w", c.NodeRank, c.JoinTimeout, c.NNodes, err)
	}
	for r, k := range keys {
		v, err := st.Get(ctx, k)
		if err != nil {
			return "", fmt.Errorf("launch: node %d: reading node %d's entry: %w", c.NodeRank, r, err)
		}
		nproc, _, _ := strings.Cut(string(v), "/")
		if nproc != strconv.Itoa(c.NProcPerNode) {
			return "", fmt.Errorf("launch: node %d runs %s workers but node %d runs %d: --nproc-per-node must match on every node", r, nproc, c.NodeRank, c.NProcPerNode)
		}
	}
	return runID, nil
}

// publishFailure records msg as the job's first failure (a later one
// leaves the first in place); stop says the failure is a stop after a
// signal (a worker exited 130 or 143: every rank is stopping after the
// same step and saving), which the other nodes wait for instead of
// signalling their workers. It is bounded by timeout.
func publishFailure(st store.Store, node int, msg string, stop bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	kind := failedKind
	if stop {
		kind = stoppingKind
	}
	_, err := st.CompareAndSwap(ctx, failedKey, nil, []byte(fmt.Sprintf("%s\nnode %d: %s", kind, node, msg)))
	return err
}

// The first line of the failure key's value: what the failure is.
const (
	failedKind   = "failed"
	stoppingKind = "stopping"
)

// watchFailure blocks until some node publishes a failure (returning its
// message, and whether it is a stop after a signal) or the store is lost
// (returning why); it returns "" when ctx ends first.
func watchFailure(ctx context.Context, st store.Store) (msg string, stop bool) {
	v, err := st.Get(ctx, failedKey)
	switch {
	case ctx.Err() != nil:
		return "", false
	case err != nil:
		return fmt.Sprintf("lost the job's store: %v", err), false
	}
	kind, rest, ok := strings.Cut(string(v), "\n")
	switch {
	case ok && kind == stoppingKind:
		return rest, true
	case ok && kind == failedKind:
		return rest, false
	}
	return string(v), false
}

// exitBarrier records this node's outcome and waits (bounded) for every
// node's. It returns the other nodes' failures, "node R: …" each. Node 0,
// which serves the store, then waits for the others to have read the
// outcomes before returning (and closing the store).
func exitBarrier(st store.Store, c *Config, outcome error) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.ExitBarrierTimeout)
	defer cancel()
	mine := "ok"
	if outcome != nil {
		mine = outcome.Error()
	}
	if err := st.Set(ctx, exitKey(c.NodeRank), []byte(mine)); err != nil {
		return nil, err
	}
	keys := make([]string, c.NNodes)
	for r := range keys {
		keys[r] = exitKey(r)
	}
	if err := st.Wait(ctx, keys...); err != nil {
		return nil, err
	}
	var failed []string
	for r, k := range keys {
		if r == c.NodeRank {
			continue
		}
		v, err := st.Get(ctx, k)
		if err != nil {
			return failed, err
		}
		if string(v) != "ok" {
			failed = append(failed, fmt.Sprintf("node %d: %s", r, v))
		}
	}
	if c.NodeRank != 0 {
		return failed, st.Set(ctx, leftKey(c.NodeRank), nil)
	}
	left := make([]string, 0, c.NNodes-1)
	for r := 1; r < c.NNodes; r++ {
		left = append(left, leftKey(r))
	}
	return failed, st.Wait(ctx, left...)
}
