package launch

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// The elastic rendezvous is a small replicated state machine: the job's
// membership is one document (State) under one store key, changed only by
// compare-and-swap, and every agent applies the same pure transition
// (Apply) to the state it read, with one event of its own, then writes the
// result back. A lost race just means reading again and reapplying.
// Agents learn what to do from the state alone (Role). Neither Apply nor
// Role does I/O or reads a clock; the agent loop (elastic_run.go) feeds
// them what it observed, and the tests walk them as text transcripts
// (testdata/elastic/*.txt).
//
// A round's life:
//
//	open    nodes join (Join) until MaxNodes joined, or every node the
//	        round expects (survivors of the last round and the nodes that
//	        were waiting) joined with at least MinNodes, or the last call
//	        after MinNodes joined ran out (LastCall): then closed
//	closed  node ranks are fixed (Nodes order) and workers run; a node
//	        arriving now waits (Waiting) and opens the next round
//	        at once (a scale-up); a worker failure (Failed), a node
//	        leaving (Leave) or one found dead (Dead) also opens the next
//	        round; a node whose workers all succeeded is Done, and once
//	        one is, no new round opens: the job is finishing
//
// Restarts: a round opened by a worker failure carries the failure as a
// charge. When the next round closes with every node of the failed
// round present, the failure is counted (Restarts++, and past MaxRestarts
// the job fails); when a node was lost on the way, the failure was the
// symptom of a scale event and is not counted. Scale events (joins,
// leaves, deaths) are never counted.
//
// Invariants: Nodes, Waiting and Expect hold distinct IDs; a node is in
// at most one of Nodes and Waiting; Waiting is empty while the round is
// open; Done ⊆ Nodes and is empty while open; len(Nodes) <= MaxNodes.

// State is the shared rendezvous document.
type State struct {
	// MinNodes, MaxNodes and MaxRestarts are fixed by the agent that
	// created the state; later agents must agree.
	MinNodes    int `json:"min_nodes"`
	MaxNodes    int `json:"max_nodes"`
	MaxRestarts int `json:"max_restarts"`
	// Round counts rounds from 0.
	Round int `json:"round"`
	// Closed: the round's membership is fixed and its workers run.
	Closed bool `json:"closed"`
	// Nodes are the round's participants. Once closed, a node's index is
	// its node rank.
	Nodes []Member `json:"nodes"`
	// Waiting holds nodes that arrived while the round was closed.
	Waiting []Member `json:"waiting,omitempty"`
	// Expect lists the nodes an open round waits for before closing
	// early (the survivors of the previous round and the waiting nodes);
	// empty for the first round, which closes at MaxNodes or by last call.
	Expect []string `json:"expect,omitempty"`
	// Prev is the previous round's membership while a charge is pending.
	Prev []string `json:"prev,omitempty"`
	// Charge is the worker failure that opened this round, counted as a
	// restart when the round closes with every node of Prev.
	Charge string `json:"charge,omitempty"`
	// Restarts is the number of counted restarts so far.
	Restarts int `json:"restarts"`
	// Reason says why the current round opened (for logs).
	Reason string `json:"reason,omitempty"`
	// Done lists the nodes whose workers all exited 0 in this round;
	// Exited those that then saw every node done and left.
	Done   []string `json:"done,omitempty"`
	Exited []string `json:"exited,omitempty"`
	// Failed, once set, ends the job on every node.
	Failed string `json:"failed,omitempty"`
}

// Member is one node's entry.
type Member struct {
	ID    string `json:"id"`
	NProc int    `json:"nproc"`
	// Addr is the address the node's agent reached the store from (for
	// logs and MASTER_ADDR of node rank 0).
	Addr string `json:"addr,omitempty"`
}

// EventKind names what an agent reports to the state.
type EventKind int

const (
	// EvJoin: the agent wants to take part (idempotent).
	EvJoin EventKind = iota
	// EvFailed: a worker of the agent failed in Round (Msg says how).
	EvFailed
	// EvSucceeded: every worker of the agent exited 0 in Round.
	EvSucceeded
	// EvLeave: the agent leaves the job (it was asked to stop).
	EvLeave
	// EvDead: the agent found the nodes IDs dead (no heartbeat).
	EvDead
	// EvLastCall: the agent's last-call timer for Round ran out.
	EvLastCall
	// EvExited: the agent saw every node done and is leaving.
	EvExited
)

func (k EventKind) String() string {
	return [...]string{"join", "failed", "succeeded", "leave", "dead", "last-call", "exited"}[k]
}

// Event is one agent's input to Apply.
type Event struct {
	Kind  EventKind
	Me    Member   // the agent reporting
	Round int      // the round the event is about (Failed, Succeeded, LastCall)
	Msg   string   // Failed: the failure
	IDs   []string // Dead: the nodes found dead
}

// Apply returns the state after ev. st == nil means no state exists yet
// (the first agent creates it from ev's limits). Apply never mutates st.
// An event about an older round, or that changes nothing, returns a state
// equal to st.
func Apply(st *State, ev Event, lim Limits) (State, error) {
	var s State
	if st == nil {
		s = State{MinNodes: lim.MinNodes, MaxNodes: lim.MaxNodes, MaxRestarts: lim.MaxRestarts}
	} else {
		s = st.clone()
		if lim.MinNodes != s.MinNodes || lim.MaxNodes != s.MaxNodes {
			return s, fmt.Errorf("launch: node %s has --nnodes %s but the job has %d:%d: give every node the same --nnodes", ev.Me.ID, lim.nodesFlag(), s.MinNodes, s.MaxNodes)
		}
	}
	if s.Failed != "" {
		return s, nil
	}
	id := ev.Me.ID
	switch ev.Kind {
	case EvJoin:
		switch {
		case s.has(id) || s.waits(id):
		case len(s.Done) > 0: // finishing: nobody new
		case len(s.Nodes) >= s.MaxNodes:
		case !s.Closed && (slices.Contains(s.Expect, id) || len(s.Nodes)+s.reserved() < s.MaxNodes):
			s.Nodes = append(s.Nodes, ev.Me)
		case !s.Closed: // the free places are kept for the nodes expected
		case len(s.Nodes)+len(s.Waiting) < s.MaxNodes:
			s.Waiting = append(s.Waiting, ev.Me)
		}
	case EvFailed:
		if ev.Round != s.Round || !s.Closed || !s.has(id) {
			break
		}
		if len(s.Done) > 0 {
			s.Failed = fmt.Sprintf("node %s: %s (after other nodes finished, so no restart)", id, ev.Msg)
			break
		}
		s.next("node "+id+": "+ev.Msg, memberIDs(s.Nodes), ev.Msg)
	case EvSucceeded:
		if ev.Round == s.Round && s.Closed && s.has(id) && !slices.Contains(s.Done, id) {
			s.Done = append(s.Done, id)
		}
	case EvExited:
		if s.Closed && slices.Contains(s.Done, id) && !slices.Contains(s.Exited, id) {
			s.Exited = append(s.Exited, id)
		}
	case EvLeave:
		s.drop([]string{id}, "node "+id+" left")
	case EvDead:
		var dead []string
		for _, d := range ev.IDs {
			if d != id && (s.has(d) || s.waits(d) || slices.Contains(s.Expect, d)) {
				dead = append(dead, d)
			}
		}
		if len(dead) > 0 {
			s.drop(dead, "node "+strings.Join(dead, ", ")+" stopped heartbeating")
		}
	case EvLastCall:
		if ev.Round == s.Round && !s.Closed && len(s.Nodes) >= s.MinNodes {
			s.close()
		}
	}
	s.settle()
	return s, nil
}

// Limits are one agent's --nnodes and --max-restarts.
type Limits struct {
	MinNodes, MaxNodes, MaxRestarts int
}

func (l Limits) nodesFlag() string { return fmt.Sprintf("%d:%d", l.MinNodes, l.MaxNodes) }

// next opens the following round, expecting the given nodes (and the
// waiting ones); a non-empty charge is a worker failure to count if the
// round closes with every one of prev.
func (s *State) next(reason string, expect []string, charge string) {
	exp := slices.Clone(expect)
	for _, w := range s.Waiting {
		if !slices.Contains(exp, w.ID) {
			exp = append(exp, w.ID)
		}
	}
	s.Prev, s.Charge = nil, ""
	if charge != "" {
		s.Prev, s.Charge = memberIDs(s.Nodes), charge
	}
	s.Round++
	s.Closed = false
	s.Nodes, s.Waiting, s.Done, s.Exited = nil, nil, nil, nil
	s.Expect = exp
	s.Reason = reason
}

// drop removes nodes that left or died and opens the next round if one
// of them was taking part in a closed round.
func (s *State) drop(ids []string, reason string) {
	wasIn := false
	for _, id := range ids {
		wasIn = wasIn || (s.Closed && s.has(id))
	}
	s.Waiting = slices.DeleteFunc(s.Waiting, func(m Member) bool { return slices.Contains(ids, m.ID) })
	s.Expect = slices.DeleteFunc(s.Expect, func(e string) bool { return slices.Contains(ids, e) })
	if !wasIn {
		// An open round just forgets them.
		if !s.Closed {
			s.Nodes = slices.DeleteFunc(s.Nodes, func(m Member) bool { return slices.Contains(ids, m.ID) })
		}
		return
	}
	if len(s.Done) > 0 {
		s.Failed = reason + " after other nodes finished"
		return
	}
	survivors := slices.DeleteFunc(memberIDs(s.Nodes), func(e string) bool { return slices.Contains(ids, e) })
	s.next(reason, survivors, "")
}

// settle applies the rules that follow from the state alone: an open
// round closes when full or when everyone expected is in; a closed round
// with nodes waiting opens the next one.
func (s *State) settle() {
	if !s.Closed {
		all := len(s.Expect) > 0
		for _, e := range s.Expect {
			all = all && s.has(e)
		}
		if len(s.Nodes) >= s.MaxNodes || (all && len(s.Nodes) >= s.MinNodes) {
			s.close()
		}
		return
	}
	if len(s.Waiting) > 0 && len(s.Done) == 0 && s.Failed == "" {
		s.next(fmt.Sprintf("node %s joined", strings.Join(memberIDs(s.Waiting), ", ")), memberIDs(s.Nodes), "")
	}
}

// close fixes the membership: expected nodes first, in the order they
// are expected (so node ranks stay stable across rounds), then the
// newcomers in join order; and settles a pending charge.
func (s *State) close() {
	s.Closed = true
	slices.SortStableFunc(s.Nodes, func(a, b Member) int {
		ia, ib := slices.Index(s.Expect, a.ID), slices.Index(s.Expect, b.ID)
		if ia < 0 {
			ia = len(s.Expect)
		}
		if ib < 0 {
			ib = len(s.Expect)
		}
		return ia - ib
	})
	s.Expect = nil
	if s.Charge != "" {
		lost := false
		for _, p := range s.Prev {
			lost = lost || !s.has(p)
		}
		if !lost {
			s.Restarts++
			if s.Restarts > s.MaxRestarts {
				s.Failed = fmt.Sprintf("%s (restart %d of at most %d: giving up)", s.Reason, s.Restarts, s.MaxRestarts)
			}
		}
	}
	s.Prev, s.Charge = nil, ""
}

// reserved counts the expected nodes that have not joined yet.
func (s *State) reserved() int {
	n := 0
	for _, e := range s.Expect {
		if !s.has(e) {
			n++
		}
	}
	return n
}

func (s *State) has(id string) bool {
	return slices.ContainsFunc(s.Nodes, func(m Member) bool { return m.ID == id })
}

func (s *State) waits(id string) bool {
	return slices.ContainsFunc(s.Waiting, func(m Member) bool { return m.ID == id })
}

func (s *State) clone() State {
	c := *s
	c.Nodes = slices.Clone(s.Nodes)
	c.Waiting = slices.Clone(s.Waiting)
	c.Expect = slices.Clone(s.Expect)
	c.Prev = slices.Clone(s.Prev)
	c.Done = slices.Clone(s.Done)
	c.Exited = slices.Clone(s.Exited)
	return c
}

func memberIDs(ms []Member) []string {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

// encode and decodeState are the state's wire form (JSON).
func (s State) encode() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic("launch: encoding the rendezvous state: " + err.Error()) // plain data: cannot fail
	}
	return b
}

func decodeState(b []byte) (*State, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("launch: decoding the rendezvous state (%d bytes): %w", len(b), err)
	}
	return &s, nil
}

// RoleKind is what an agent should be doing.
type RoleKind int

const (
	// RoleJoin: not registered; send EvJoin.
	RoleJoin RoleKind = iota
	// RoleStandby: the job is full; keep polling.
	RoleStandby
	// RoleWait: registered for an open round, or waiting for the next;
	// no workers run.
	RoleWait
	// RoleRun: run the workers of Assignment.
	RoleRun
	// RoleFinished: the job finished (every node done, or this node
	// arrived while it was finishing).
	RoleFinished
	// RoleFailed: the job failed (State.Failed).
	RoleFailed
)

func (k RoleKind) String() string {
	return [...]string{"join", "standby", "wait", "run", "finished", "failed"}[k]
}

// Assignment places one node's workers in a closed round.
type Assignment struct {
	Round     int
	NodeRank  int
	NumNodes  int
	RankBase  int // rank of this node's local rank 0
	NProc     int
	WorldSize int
	Restarts  int
	// Master is node rank 0's member entry.
	Master Member
}

// Role says what agent id should do in state st (nil: none yet).
func Role(st *State, id string) (RoleKind, Assignment) {
	if st == nil {
		return RoleJoin, Assignment{}
	}
	s := st
	switch {
	case s.Failed != "":
		return RoleFailed, Assignment{}
	case s.waits(id):
		return RoleWait, Assignment{}
	case !s.has(id):
		if len(s.Done) > 0 {
			return RoleFinished, Assignment{}
		}
		full := len(s.Nodes)+len(s.Waiting) >= s.MaxNodes
		if !s.Closed && !slices.Contains(s.Expect, id) {
			full = len(s.Nodes)+s.reserved() >= s.MaxNodes
		}
		if full {
			return RoleStandby, Assignment{}
		}
		return RoleJoin, Assignment{}
	case !s.Closed:
		return RoleWait, Assignment{}
	}
	if len(s.Done) == len(s.Nodes) {
		return RoleFinished, Assignment{}
	}
	a := Assignment{Round: s.Round, NumNodes: len(s.Nodes), Restarts: s.Restarts, Master: s.Nodes[0]}
	for i, m := range s.Nodes {
		if m.ID == id {
			a.NodeRank, a.RankBase, a.NProc = i, a.WorldSize, m.NProc
		}
		a.WorldSize += m.NProc
	}
	return RoleRun, a
}
