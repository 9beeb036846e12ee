package warmheap

import (
	"syscall"
	"time"
)

// Tax charges the process's minor page faults a cost each, by busy
// waiting: on a machine whose faults are cheap it shows what a step
// would cost where they are dear. The zero Tax and a nil *Tax charge
// nothing.
type Tax struct {
	cost   time.Duration
	faults int64
	paid   time.Duration
}

// NewTax returns a Tax of cost per fault, counting from now.
func NewTax(cost time.Duration) *Tax { return &Tax{cost: cost, faults: MinorFaults()} }

// Pay waits cost × the minor faults since the last call (or NewTax).
func (t *Tax) Pay() {
	if t == nil || t.cost <= 0 {
		return
	}
	f := MinorFaults()
	d := time.Duration(f-t.faults) * t.cost
	t.faults = f
	t.paid += d
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// Paid is the time Pay has waited in all.
func (t *Tax) Paid() time.Duration {
	if t == nil {
		return 0
	}
	return t.paid
}

// Cost is the charge per fault.
func (t *Tax) Cost() time.Duration {
	if t == nil {
		return 0
	}
	return t.cost
}

// MinorFaults is the process's count of minor page faults so far.
func MinorFaults() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Minflt
}
