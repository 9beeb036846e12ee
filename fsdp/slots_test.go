package fsdp

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// scriptGatherer records what a slotTable asks of its owner; a wait fails
// when its unit is in failing.
type scriptGatherer struct {
	out     *strings.Builder
	failing map[int]bool
}

func (g *scriptGatherer) Gather(u, s int) {
	fmt.Fprintf(g.out, "gather unit %d into %s\n", u, slotName(s))
}

func (g *scriptGatherer) Wait(u, s int) error {
	if g.failing[u] {
		delete(g.failing, u)
		fmt.Fprintf(g.out, "wait unit %d in %s: fails\n", u, slotName(s))
		return errors.New("gather failed")
	}
	fmt.Fprintf(g.out, "wait unit %d in %s\n", u, slotName(s))
	return nil
}

func slotName(s int) string {
	if s < 0 {
		return "root"
	}
	return fmt.Sprintf("slot %d", s)
}

// state renders the table: each slot's unit (* while arriving) and the root.
func (t *slotTable) state() string {
	var b strings.Builder
	b.WriteString("slots:")
	for s, u := range t.unit {
		switch {
		case u < 0:
			b.WriteString(" -")
		case t.busy[s]:
			fmt.Fprintf(&b, " %d*", u)
		default:
			fmt.Fprintf(&b, " %d", u)
		}
	}
	switch {
	case t.rootBusy:
		b.WriteString(" root: arriving")
	case t.root:
		b.WriteString(" root: gathered")
	default:
		b.WriteString(" root: -")
	}
	return b.String() + "\n"
}

// TestSlotTranscripts replays testdata/slots/*.txt (datadriven; go test
// -rewrite rewrites them): "init units=N slots=S [empty=(u,…)]" sets a
// table up (unit N is the root), then "start u=…", "hold u=…", "drop" and
// "fail u=…" (the next wait for unit u fails) drive it; each command
// prints what the table asked its owner to do and the table's state.
func TestSlotTranscripts(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "slots", "*.txt"))
	if len(files) == 0 {
		t.Fatal("no transcripts in testdata/slots")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var tab *slotTable
			var out strings.Builder
			g := &scriptGatherer{out: &out, failing: map[int]bool{}}
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				out.Reset()
				var u int
				switch d.Cmd {
				case "init":
					var units, slots int
					var empty []int
					d.ScanArgs(t, "units", &units)
					d.ScanArgs(t, "slots", &slots)
					d.MaybeScanArgs(t, "empty", &empty)
					e := make([]bool, units+1)
					for _, i := range empty {
						e[i] = true
					}
					tab = newSlotTable(g, slots, e)
				case "start":
					d.ScanArgs(t, "u", &u)
					if err := tab.Start(u); err != nil {
						fmt.Fprintf(&out, "error: %v\n", err)
					}
				case "hold":
					d.ScanArgs(t, "u", &u)
					s, err := tab.Hold(u)
					if err != nil {
						fmt.Fprintf(&out, "error: %v\n", err)
					} else {
						fmt.Fprintf(&out, "unit %d held in %s\n", u, slotName(s))
					}
				case "drop":
					tab.Drop()
				case "fail":
					d.ScanArgs(t, "u", &u)
					g.failing[u] = true
				default:
					d.Fatalf(t, "unknown command %q", d.Cmd)
				}
				return out.String() + tab.state()
			})
		})
	}
}
