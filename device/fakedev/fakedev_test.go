package fakedev_test

import (
	"errors"
	"testing"

	"github.com/cohortml/cohort/device/alloc"
	"github.com/cohortml/cohort/device/alloc/memtest"
	"github.com/cohortml/cohort/device/fakedev"
)

func TestEventOrdering(t *testing.T) {
	d := fakedev.New(1 << 20)
	p, err := d.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	d.Claim(1, p, 4096, 7)
	d.Use(1, p, 4096, 7)
	e, _ := d.RecordEvent(1)
	if done, _ := d.EventDone(e); done {
		t.Fatal("event done before its stream ran")
	}
	// Stream 2 waits for e, then uses the memory as tag 7: no violation
	// even though stream 2 is run first (the wait runs nothing by itself).
	if err := d.Wait(2, e); err != nil {
		t.Fatal(err)
	}
	d.Use(2, p, 4096, 7)
	if d.Step(2) {
		t.Fatal("stream 2 stepped past a wait on an incomplete event")
	}
	d.Run(2) // runs stream 1 as far as e, then stream 2
	if done, _ := d.EventDone(e); !done || d.Queued(2) != 0 || d.Queued(1) != 0 {
		t.Fatalf("after Run(2): event done %v, queued %d and %d", done, d.Queued(1), d.Queued(2))
	}
	if v := d.Violations(); len(v) != 0 {
		t.Fatalf("violations %v", v)
	}
	// A use racing a new claim on another stream is a violation.
	d.Use(3, p, 512, 7)
	d.Claim(4, p, 4096, 8)
	d.Run(4)
	d.Run(3)
	if v := d.Violations(); len(v) != 1 {
		t.Fatalf("violations %v, want one", v)
	}
}

func TestSyncEventRunsOnlyWhatItNeeds(t *testing.T) {
	d := fakedev.New(1 << 20)
	p, _ := d.Alloc(512)
	d.Claim(1, p, 512, 1)
	e, _ := d.RecordEvent(1)
	d.Use(1, p, 512, 1)
	if err := d.SyncEvent(e); err != nil {
		t.Fatal(err)
	}
	if d.Queued(1) != 1 {
		t.Errorf("SyncEvent ran %d ops past its event", 1-d.Queued(1))
	}
	if err := d.DestroyEvent(e); err != nil || d.Events() != 0 {
		t.Errorf("DestroyEvent: %v, %d events left", err, d.Events())
	}
	if _, err := d.EventDone(e); err == nil {
		t.Error("EventDone of a destroyed event: no error")
	}
}

func TestMemoryFull(t *testing.T) {
	d := fakedev.New(1 << 20)
	if _, err := d.Alloc(1<<20 + 1); !errors.Is(err, alloc.ErrMemFull) {
		t.Fatalf("Alloc over capacity: %v", err)
	}
	p, _ := d.Alloc(1 << 20)
	if free, total, _ := d.Info(); free != 0 || total != 1<<20 {
		t.Errorf("Info = %d, %d", free, total)
	}
	if err := d.Free(p); err != nil || d.Used() != 0 || d.Allocations() != 0 {
		t.Errorf("Free: %v, used %d", err, d.Used())
	}
	if err := d.Free(p); err == nil {
		t.Error("double free: no error")
	}
}

func TestMemConformance(t *testing.T) { memtest.Run(t, fakedev.New(64<<20), 1, 2) }
