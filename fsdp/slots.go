package fsdp

// slotTable is the gather bookkeeping of one rank, as a state machine with
// its I/O injected: which unit each reusable slot holds or is receiving,
// which gathers are in flight, whether the root is gathered. It decides
// when a gather starts and what must be waited for first; its owner
// (Model, through gatherIO) allocates the buffers, issues the all-gathers
// and waits for them. Tests drive it with transcripts (testdata/slots).
//
// Invariants, between calls: unit[s] is the unit slot s holds, or is
// receiving when busy[s] (−1: none); a unit u < units is only ever in slot
// u % len(unit); busy[s] implies unit[s] ≥ 0; rootBusy implies root.
type slotTable struct {
	io       gatherer
	units    int    // the non-root units; the root is unit units
	empty    []bool // per unit (root included): no elements to gather
	unit     []int
	busy     []bool
	root     bool // the root's values are gathered, or arriving (rootBusy)
	rootBusy bool
}

// gatherer is what a slotTable asks its owner to do. Slot −1 is the root's
// buffer.
type gatherer interface {
	// Gather starts gathering unit u's parameters into slot s.
	Gather(u, s int)
	// Wait waits for the gather into slot s of unit u; its error names it.
	Wait(u, s int) error
}

func newSlotTable(io gatherer, slots int, empty []bool) *slotTable {
	t := &slotTable{io: io, units: len(empty) - 1, empty: empty, unit: make([]int, slots), busy: make([]bool, slots)}
	t.clear()
	return t
}

// slotOf returns the slot unit u is gathered into.
func (t *slotTable) slotOf(u int) int { return u % len(t.unit) }

// clear marks every slot empty and the root not gathered.
func (t *slotTable) clear() {
	for s := range t.unit {
		t.unit[s] = -1
	}
	t.root = false
}

// Start begins gathering unit u, unless it is gathered or on its way. A
// slot receiving another unit is waited for first (its gather must land
// before the slot is overwritten).
func (t *slotTable) Start(u int) error {
	if u == t.units {
		if !t.root && !t.empty[u] {
			t.io.Gather(u, -1)
			t.root, t.rootBusy = true, true
		}
		return nil
	}
	s := t.slotOf(u)
	if t.empty[u] || t.unit[s] == u {
		return nil
	}
	if err := t.wait(s); err != nil {
		return err
	}
	t.unit[s] = u
	t.io.Gather(u, s)
	t.busy[s] = true
	return nil
}

// wait waits for the gather in flight into slot s, if any; on an error
// the slot holds nothing.
func (t *slotTable) wait(s int) error {
	if s < 0 {
		if !t.rootBusy {
			return nil
		}
		t.rootBusy = false
		if err := t.io.Wait(t.units, -1); err != nil {
			t.root = false
			return err
		}
		return nil
	}
	if !t.busy[s] {
		return nil
	}
	t.busy[s] = false
	if err := t.io.Wait(t.unit[s], s); err != nil {
		t.unit[s] = -1
		return err
	}
	return nil
}

// Hold gathers unit u (starting it if need be) and waits until its values
// are in its slot, which it returns (−1: the root's buffer).
func (t *slotTable) Hold(u int) (int, error) {
	if err := t.Start(u); err != nil {
		return 0, err
	}
	s := -1
	if u < t.units {
		s = t.slotOf(u)
	}
	return s, t.wait(s)
}

// Drop waits for every gather in flight (their errors resurface in the
// group) and marks everything not gathered.
func (t *slotTable) Drop() {
	_ = t.wait(-1)
	for s := range t.unit {
		_ = t.wait(s)
	}
	t.clear()
}
