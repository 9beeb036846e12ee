package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
)

// ErrNoCheckpoint is returned by Latest when a directory holds no complete
// checkpoint.
var ErrNoCheckpoint = errors.New("checkpoint: no complete checkpoint")

// Group is what Save needs from the job: this process's rank, the world
// size and a barrier that returns once every rank has entered it (or
// fails, bounded by ctx). Every rank of the group calls Save with the same
// dir and step. A distributed.ProcessGroup fits with
//
//	checkpoint.NewGroup(pg.Rank(), pg.Size(), func(ctx context.Context) error { return pg.Barrier(ctx).Wait() })
type Group interface {
	Rank() int
	Size() int
	Barrier(ctx context.Context) error
}

// NewGroup returns a Group from its parts.
func NewGroup(rank, size int, barrier func(ctx context.Context) error) Group {
	return funcGroup{rank, size, barrier}
}

// Single is the group of a process that saves alone (world size 1).
var Single Group = funcGroup{0, 1, func(context.Context) error { return nil }}

type funcGroup struct {
	rank, size int
	barrier    func(context.Context) error
}

func (g funcGroup) Rank() int                         { return g.rank }
func (g funcGroup) Size() int                         { return g.size }
func (g funcGroup) Barrier(ctx context.Context) error { return g.barrier(ctx) }

// Shard is one rank's piece of a named tensor: the elements
// [Offset, Offset+len(Data)) of the tensor flattened row-major, whose full
// shape is FullShape. A tensor saved whole is the Shard with Offset 0 and
// every element. Sharded wrappers (ZeRO, FSDP) describe each rank's
// partition of a flat parameter or optimizer buffer this way, and a job
// of any other world size or sharding reads back any slice it needs
// (Checkpoint.ReadSlice).
type Shard struct {
	Name      string
	FullShape []int
	Offset    int64
	Data      []float32
}

// Snapshot is what one rank contributes to a checkpoint.
type Snapshot struct {
	Step int64
	// Shards are this rank's tensor pieces; a rank holds at most one
	// piece of each name. Names are free-form; the helpers below use
	// "<prefix>/<state-dict key>".
	Shards []Shard
	// Meta holds job-wide values, JSON-encoded; only rank 0's are kept.
	Meta map[string]any
	// Local holds this rank's own values (loader position, RNG state),
	// JSON-encoded.
	Local map[string]any
}

// AddModule adds m's parameters and buffers, whole, as shards named
// prefix + "/" + the name names gives (nil: cohort's names, which for
// nn.Sequential are PyTorch's). The shards alias the live tensors: call
// Save before the next optimizer step.
func (s *Snapshot) AddModule(prefix string, m nn.Module, names NameMap) {
	for _, e := range ModuleEntries(m, names) {
		s.Shards = append(s.Shards, Shard{Name: prefix + "/" + e.Name, FullShape: e.Shape, Data: e.Data})
	}
}

// AddStateDict adds an optimizer's or a scheduler's state: its tensors,
// whole, as shards named prefix + "/" + key, and its kind and scalars as
// Meta[prefix]. Restore it with Checkpoint.LoadStateDict(prefix, …).
func (s *Snapshot) AddStateDict(prefix string, sd *optim.StateDict) {
	for _, k := range slices.Sorted(maps.Keys(sd.Tensors)) {
		t := sd.Tensors[k].Contiguous()
		s.Shards = append(s.Shards, Shard{Name: prefix + "/" + k, FullShape: slices.Clone(t.Shape()), Data: t.Data()})
	}
	if s.Meta == nil {
		s.Meta = map[string]any{}
	}
	s.Meta[prefix] = stateMeta{Kind: sd.Kind, Scalars: sd.Scalars}
}

type stateMeta struct {
	Kind    string             `json:"kind"`
	Scalars map[string]float64 `json:"scalars"`
}

// Options configures Save. The zero value keeps every checkpoint.
type Options struct {
	// Keep is how many complete checkpoints to keep, newest first; older
	// ones are deleted after a save commits. 0 keeps all.
	Keep int

	// wrap, in tests, wraps the shard file writer (to inject failures).
	wrap func(io.Writer) io.Writer
}

// StepDir returns the directory Save writes the checkpoint of step into.
func StepDir(dir string, step int64) string {
	return filepath.Join(dir, fmt.Sprintf("step-%010d", step))
}

const manifestName = "manifest.json"

func shardFileName(rank int) string { return fmt.Sprintf("rank-%05d.safetensors", rank) }
func indexFileName(rank int) string { return fmt.Sprintf("rank-%05d.json", rank) }

// Save writes the training state of every rank of g as the checkpoint of
// s.Step under dir, and returns its directory (StepDir). It is
// collective: every rank calls it with the same dir and step.
//
// Protocol: rank 0 (re)creates the step directory; barrier; every rank,
// in parallel, writes its shard file and then its index (size, SHA-256,
// slices, Local) atomically (temporary name, fsync, rename, fsync of the
// directory); barrier; rank 0 merges the indexes into manifest.json,
// written the same way, and only then deletes checkpoints beyond
// o.Keep; barrier; every rank checks the manifest exists. A crash or a
// failed write (a full disk) at any point leaves no manifest for this
// step, so Latest and Open never see the torn checkpoint and older ones
// stay intact. Save at a step that already has a checkpoint replaces it.
//
// Every rank takes part in every barrier even after a failure of its own,
// so no rank waits for one that gave up; each returns its own error, or
// an error naming the rank whose shard is missing. Blocking is bounded by
// ctx through the barrier.
func Save(ctx context.Context, dir string, g Group, s *Snapshot, o Options) (string, error) {
	rank, world := g.Rank(), g.Size()
	if rank < 0 || rank >= world || s == nil || s.Step < 0 || o.Keep < 0 {
		return "", fmt.Errorf("checkpoint: save: rank %d of %d, step %v, keep %d: invalid arguments", rank, world, stepOf(s), o.Keep)
	}
	stepDir := StepDir(dir, s.Step)
	var errs []error
	if rank == 0 {
		errs = append(errs, prepareStepDir(dir, stepDir))
		// Leftovers of writers killed earlier; failing to remove one does
		// not fail the save.
		removeStaleTemps(dir, time.Now())
	}
	fail := func(what string, err error) (string, error) {
		return "", &saveError{step: s.Step, rank: rank, what: what, err: errors.Join(append(errs, err)...)}
	}
	if err := g.Barrier(ctx); err != nil {
		return fail("barrier before writing", err)
	}
	errs = append(errs, writeRank(stepDir, rank, world, s, o))
	if err := g.Barrier(ctx); err != nil {
		return fail("barrier after writing", err)
	}
	if rank == 0 && errors.Join(errs...) == nil {
		errs = append(errs, commit(dir, stepDir, s.Step, world, o.Keep))
	}
	if err := g.Barrier(ctx); err != nil {
		return fail("barrier after commit", err)
	}
	if errors.Join(errs...) != nil {
		return fail("", nil)
	}
	if _, err := os.Stat(filepath.Join(stepDir, manifestName)); err != nil {
		return fail("rank 0 did not commit the manifest (see its error)", err)
	}
	return stepDir, nil
}

// saveError is a failed Save: the step, the rank, and the cause(s).
type saveError struct {
	step int64
	rank int
	what string
	err  error
}

func (e *saveError) Error() string {
	msg := fmt.Sprintf("checkpoint: save step %d: rank %d: ", e.step, e.rank)
	if e.what != "" {
		msg += e.what + ": "
	}
	// The causes are this package's errors; one prefix is enough.
	return msg + strings.ReplaceAll(e.err.Error(), "checkpoint: ", "")
}

func (e *saveError) Unwrap() error { return e.err }

func stepOf(s *Snapshot) any {
	if s == nil {
		return "nil snapshot"
	}
	return s.Step
}

// prepareStepDir makes an empty stepDir, first un-committing and removing
// whatever an earlier attempt left there.
func prepareStepDir(dir, stepDir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := removeCheckpoint(stepDir); err != nil {
		return err
	}
	if err := os.Mkdir(stepDir, 0o755); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", dir, err)
	}
	return nil
}

// removeCheckpoint deletes a checkpoint directory, its manifest first (and
// durably), so that a crash in the middle leaves an incomplete directory,
// never a manifest naming missing files.
func removeCheckpoint(stepDir string) error {
	err := os.Remove(filepath.Join(stepDir, manifestName))
	if err == nil {
		err = syncDir(stepDir)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint: removing %s: %w", stepDir, err)
	}
	if err := os.RemoveAll(stepDir); err != nil {
		return fmt.Errorf("checkpoint: removing %s: %w", stepDir, err)
	}
	return nil
}

// writeRank writes rank's shard file and then its index.
func writeRank(stepDir string, rank, world int, s *Snapshot, o Options) error {
	entries := make([]Entry, 0, len(s.Shards))
	ri := rankIndex{Rank: rank, WorldSize: world, Step: s.Step}
	seen := map[string]bool{}
	for _, sh := range s.Shards {
		n, err := numElements(sh.FullShape, 1<<62)
		if err != nil || sh.Name == "" || seen[sh.Name] || sh.Offset < 0 || int64(len(sh.Data)) > n-sh.Offset {
			return fmt.Errorf("checkpoint: rank %d: shard %q (shape %v, [%d, +%d)): empty or repeated name, bad shape or outside the tensor",
				rank, sh.Name, sh.FullShape, sh.Offset, len(sh.Data))
		}
		seen[sh.Name] = true
		shape := sh.FullShape
		if sh.Offset != 0 || int64(len(sh.Data)) != n {
			shape = []int{len(sh.Data)}
		}
		entries = append(entries, Entry{Name: sh.Name, Shape: shape, Data: sh.Data})
		ri.Tensors = append(ri.Tensors, TensorPlan{Name: sh.Name, Shape: sh.FullShape,
			Slices: []Slice{{Rank: rank, Offset: sh.Offset, Len: int64(len(sh.Data))}}})
	}
	var err error
	if ri.Local, err = encodeMeta(s.Local); err != nil {
		return fmt.Errorf("checkpoint: rank %d: local value %w", rank, err)
	}
	if rank == 0 {
		if ri.Meta, err = encodeMeta(s.Meta); err != nil {
			return fmt.Errorf("checkpoint: meta value %w", err)
		}
	}
	name := shardFileName(rank)
	n, sum, err := writeAtomic(filepath.Join(stepDir, name), o.wrap, func(w io.Writer) error {
		_, err := Write(w, entries, map[string]string{"format": "cohort", "rank": strconv.Itoa(rank), "step": strconv.FormatInt(s.Step, 10)})
		return err
	})
	if err != nil {
		return err
	}
	ri.File = FileInfo{Rank: rank, Name: name, Bytes: n, SHA256: sum}
	js, err := json.MarshalIndent(ri, "", "\t")
	if err != nil {
		return fmt.Errorf("checkpoint: rank %d: %w", rank, err)
	}
	_, _, err = writeAtomic(filepath.Join(stepDir, indexFileName(rank)), o.wrap, func(w io.Writer) error {
		_, err := w.Write(js)
		return err
	})
	return err
}

func encodeMeta(m map[string]any) (map[string]json.RawMessage, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		js, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		out[k] = js
	}
	return out, nil
}

// commit merges the ranks' indexes into the manifest, writes it, and
// prunes old checkpoints.
func commit(dir, stepDir string, step int64, world, keep int) error {
	idx := make([]rankIndex, 0, world)
	for r := range world {
		path := filepath.Join(stepDir, indexFileName(r))
		js, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("checkpoint: rank %d wrote no shard index (its write failed): %w", r, err)
		}
		var ri rankIndex
		if err := json.Unmarshal(js, &ri); err != nil {
			return fmt.Errorf("checkpoint: %s: %w", path, err)
		}
		idx = append(idx, ri)
	}
	m, err := buildManifest(step, world, idx)
	if err != nil {
		return err
	}
	js, err := m.encode()
	if err != nil {
		return err
	}
	if _, _, err := writeAtomic(filepath.Join(stepDir, manifestName), nil, func(w io.Writer) error {
		_, err := w.Write(js)
		return err
	}); err != nil {
		return err
	}
	return prune(dir, step, keep)
}

// stepDirs returns the step directories under dir, newest first.
func stepDirs(dir string) ([]int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var steps []int64
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "step-")
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.ParseInt(rest, 10, 64); err == nil && n >= 0 && StepDir(dir, n) == filepath.Join(dir, e.Name()) {
			steps = append(steps, n)
		}
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i] > steps[j] })
	return steps, nil
}

// prune keeps the newest keep complete checkpoints (0: all) and removes
// every incomplete one except the step just committed.
func prune(dir string, committed int64, keep int) error {
	steps, err := stepDirs(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	complete := 0
	var errs []error
	for _, st := range steps {
		path := StepDir(dir, st)
		_, err := readManifest(path)
		if err == nil {
			complete++
			if keep == 0 || complete <= keep || st == committed {
				continue
			}
		}
		if st == committed {
			continue
		}
		errs = append(errs, removeCheckpoint(path))
	}
	return errors.Join(errs...)
}

// readManifest reads and validates path/manifest.json.
func readManifest(path string) (*Manifest, error) {
	js, err := os.ReadFile(filepath.Join(path, manifestName))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(js, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrManifest, filepath.Join(path, manifestName), err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(path, manifestName), err)
	}
	return &m, nil
}

// Latest returns the directory and step of the newest complete checkpoint
// under dir: the highest step whose manifest.json exists and is valid.
// Directories without one (a save that crashed or failed) are skipped;
// Find also says which and why. It returns an error wrapping
// ErrNoCheckpoint when there is none, also when dir does not exist.
func Latest(dir string) (string, int64, error) {
	path, step, _, err := Find(dir)
	return path, step, err
}

// Skipped is a step directory newer than the checkpoint Find returned,
// passed over because it is not a complete checkpoint.
type Skipped struct {
	Dir  string
	Step int64
	// Reason says why: an error wrapping fs.ErrNotExist for a save that
	// did not finish (no manifest), ErrManifest for a manifest that does
	// not parse or validate.
	Reason error
}

func (s Skipped) String() string {
	if errors.Is(s.Reason, fs.ErrNotExist) {
		return fmt.Sprintf("%s: no manifest (a save that did not finish)", s.Dir)
	}
	return fmt.Sprintf("%s: %v", s.Dir, strings.ReplaceAll(s.Reason.Error(), "checkpoint: ", ""))
}

// Find is Latest that also returns the newer step directories it skipped,
// newest first, so that a program can say why it resumes from an older
// step (or from none). It removes the temporary files that writers killed
// while saving left in dir (see leftovers.go).
func Find(dir string) (path string, step int64, skipped []Skipped, err error) {
	steps, err := stepDirs(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", 0, nil, fmt.Errorf("checkpoint: %w", err)
	}
	removeStaleTemps(dir, time.Now())
	for _, st := range steps {
		path := StepDir(dir, st)
		m, err := readManifest(path)
		if err == nil && m.Step != st {
			err = fmt.Errorf("%w: %s: step %d in a directory of step %d", ErrManifest, filepath.Join(path, manifestName), m.Step, st)
		}
		if err == nil {
			return path, st, skipped, nil
		}
		skipped = append(skipped, Skipped{Dir: path, Step: st, Reason: err})
	}
	return "", 0, skipped, fmt.Errorf("%w in %s", ErrNoCheckpoint, dir)
}
