package alloc_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/cohortml/cohort/device/alloc"
	"github.com/cohortml/cohort/device/fakedev"
)

// The transcripts under testdata/ drive an allocator over a fake device.
// Commands:
//
//	new capacity=SIZE             a fresh device and allocator
//	alloc name=N size=SIZE [stream=S]
//	free name=N
//	record-stream name=N stream=S
//	use name=N stream=S           enqueue a use of N's memory on S
//	run stream=S | run-all        execute queued work
//	fail-record on|off            make RecordEvent fail
//	empty-cache | stats | snapshot
//
// SIZE is bytes, or a number with KiB, MiB or GiB.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var (
			dev    *fakedev.Device
			a      *alloc.Allocator
			blocks map[string]*alloc.Block
			tags   map[string]int
			seen   int // violations already reported
		)
		violations := func() string {
			v := dev.Violations()[seen:]
			seen += len(v)
			if len(v) > 0 {
				return "violations:\n" + strings.Join(v, "\n")
			}
			return ""
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			arg := func(key string) string {
				for _, a := range d.CmdArgs {
					if a.Key == key && len(a.Vals) > 0 {
						return a.Vals[0]
					}
				}
				return ""
			}
			size := func(key string) int64 {
				n, err := parseSize(arg(key))
				if err != nil {
					d.Fatalf(t, "%s: %v", key, err)
				}
				return n
			}
			stream := func() alloc.Stream {
				s, _ := strconv.ParseUint(arg("stream"), 0, 64)
				return alloc.Stream(s)
			}
			block := func() *alloc.Block {
				b := blocks[arg("name")]
				if b == nil {
					d.Fatalf(t, "no block %q", arg("name"))
				}
				return b
			}
			switch d.Cmd {
			case "new":
				dev = fakedev.New(size("capacity"))
				a = alloc.New(dev)
				blocks, tags, seen = map[string]*alloc.Block{}, map[string]int{}, 0
				return ""
			case "alloc":
				name := arg("name")
				b, err := a.Alloc(size("size"), stream())
				if err != nil {
					return "error: " + err.Error()
				}
				blocks[name] = b
				tags[name] = len(tags) + 1
				if b.Size() > 0 {
					dev.Claim(b.Stream(), b.Ptr(), b.Size(), tags[name])
				}
				rounded := int64(0)
				if b.Size() > 0 {
					rounded = alloc.RoundSize(b.Size())
				}
				return fmt.Sprintf("%s: ptr=%#x size=%d stream=%d", name, b.Ptr(), rounded, b.Stream())
			case "free":
				if err := a.Free(block()); err != nil {
					return "error: " + err.Error()
				}
				return ""
			case "record-stream":
				a.RecordStream(block(), stream())
				return ""
			case "use":
				b := block()
				dev.Use(stream(), b.Ptr(), b.Size(), tags[arg("name")])
				return ""
			case "run":
				dev.Run(stream())
				return violations()
			case "run-all":
				dev.RunAll()
				return violations()
			case "fail-record":
				dev.FailRecord = d.CmdArgs[0].Key == "on"
				return ""
			case "empty-cache":
				if err := a.EmptyCache(); err != nil {
					return "error: " + err.Error()
				}
				return fmt.Sprintf("device used %s in %d allocations", alloc.Bytes(dev.Used()), dev.Allocations())
			case "stats":
				return strings.ReplaceAll(a.Stats().String(), "; ", "\n")
			case "snapshot":
				var out strings.Builder
				for _, s := range a.Snapshot() {
					kind := "large"
					if s.Small {
						kind = "small"
					}
					fmt.Fprintf(&out, "segment %#x %s stream=%d %s\n", s.Ptr, alloc.Bytes(s.Bytes), s.Stream, kind)
					for _, b := range s.Blocks {
						fmt.Fprintf(&out, "  %#x %d %s\n", b.Ptr, b.Bytes, b.State)
					}
				}
				return out.String()
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if t, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = t, m
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}
