package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// ErrChecksum is wrapped by the error for a shard file whose size or
// SHA-256 differs from the manifest's (truncated, altered, replaced).
var ErrChecksum = errors.New("checkpoint: checksum mismatch")

// Checkpoint reads a complete checkpoint written by Save, at any world
// size and sharding: every read is planned from the manifest's slices, so
// a job of world M assembles any slice of a tensor saved by N ranks.
// Shard files are opened on first use and verified against the manifest's
// size and SHA-256 then. A Checkpoint is used by one goroutine at a time.
type Checkpoint struct {
	Dir      string
	Manifest *Manifest
	plans    map[string]*TensorPlan
	files    map[int]*File
	closers  []*os.File
}

// Open reads and validates the manifest of the checkpoint directory path
// (as returned by Latest or Save). A directory without a manifest is not
// a checkpoint.
func Open(path string) (*Checkpoint, error) {
	m, err := readManifest(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("checkpoint: %s: no %s, not a complete checkpoint: %w", path, manifestName, err)
		}
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	c := &Checkpoint{Dir: path, Manifest: m, plans: map[string]*TensorPlan{}, files: map[int]*File{}}
	for i := range m.Tensors {
		c.plans[m.Tensors[i].Name] = &m.Tensors[i]
	}
	return c, nil
}

// Close closes the shard files opened so far.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, f := range c.closers {
		errs = append(errs, f.Close())
	}
	c.closers, c.files = nil, map[int]*File{}
	return errors.Join(errs...)
}

// Step returns the training step the checkpoint was taken at.
func (c *Checkpoint) Step() int64 { return c.Manifest.Step }

// WorldSize returns the number of ranks that wrote it.
func (c *Checkpoint) WorldSize() int { return c.Manifest.WorldSize }

// Shape returns the full shape of the named tensor.
func (c *Checkpoint) Shape(name string) ([]int, bool) {
	p, ok := c.plans[name]
	if !ok {
		return nil, false
	}
	return p.Shape, true
}

// Names returns the names of the tensors that start with prefix, sorted.
func (c *Checkpoint) Names(prefix string) []string {
	var out []string
	for _, t := range c.Manifest.Tensors {
		if strings.HasPrefix(t.Name, prefix) {
			out = append(out, t.Name)
		}
	}
	return out
}

// file returns rank's shard file, verifying it on first use.
func (c *Checkpoint) file(rank int) (*File, error) {
	if f, ok := c.files[rank]; ok {
		return f, nil
	}
	fi := c.Manifest.Files[rank]
	path := filepath.Join(c.Dir, fi.Name)
	n, sum, err := fileSHA256(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: shard of rank %d: %w", rank, err)
	}
	if n != fi.Bytes {
		return nil, fmt.Errorf("%w: %s: %d bytes, the manifest says %d (truncated or replaced)", ErrChecksum, path, n, fi.Bytes)
	}
	if sum != fi.SHA256 {
		return nil, fmt.Errorf("%w: %s: SHA-256 %s, the manifest says %s", ErrChecksum, path, sum, fi.SHA256)
	}
	osf, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	f, err := NewFile(osf, fi.Bytes)
	if err != nil {
		osf.Close()
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	c.files[rank] = f
	c.closers = append(c.closers, osf)
	return f, nil
}

// ReadSlice fills dst with the elements [offset, offset+len(dst)) of the
// named tensor flattened row-major, gathered from whichever ranks' files
// hold them.
func (c *Checkpoint) ReadSlice(name string, offset int64, dst []float32) error {
	p, ok := c.plans[name]
	if !ok {
		return fmt.Errorf("checkpoint: %s: no tensor %q", c.Dir, name)
	}
	n, _ := numElements(p.Shape, 1<<62)
	if offset < 0 || offset > n || int64(len(dst)) > n-offset {
		return fmt.Errorf("checkpoint: tensor %q: elements [%d, %d) outside its %d", name, offset, offset+int64(len(dst)), n)
	}
	for _, pc := range planRead(*p, offset, int64(len(dst))) {
		f, err := c.file(pc.Rank)
		if err != nil {
			return err
		}
		ti, ok := f.Tensors[name]
		if !ok || pc.SrcOffset+pc.Len > ti.NumElements() {
			return fmt.Errorf("%w: %s: tensor %q missing or shorter than the manifest's slice", ErrManifest,
				filepath.Join(c.Dir, c.Manifest.Files[pc.Rank].Name), name)
		}
		if err := f.ReadFloat32(name, pc.SrcOffset, dst[pc.DstOffset:pc.DstOffset+pc.Len]); err != nil {
			return err
		}
	}
	return nil
}

// Tensor returns the whole named tensor.
func (c *Checkpoint) Tensor(name string) (*tensor.Tensor, error) {
	shape, ok := c.Shape(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint: %s: no tensor %q", c.Dir, name)
	}
	t := tensor.New(shape...)
	if err := c.ReadSlice(name, 0, t.Data()); err != nil {
		return nil, err
	}
	return t, nil
}

// LoadModule loads the tensors saved by Snapshot.AddModule(prefix, …) into
// m. Missing keys, unexpected keys and shape mismatches are listed in one
// error wrapping ErrKeys, and then nothing is loaded.
func (c *Checkpoint) LoadModule(prefix string, m nn.Module, names NameMap) error {
	shapes := map[string][]int{}
	for _, name := range c.Names(prefix + "/") {
		shapes[strings.TrimPrefix(name, prefix+"/")] = c.plans[name].Shape
	}
	if err := loadModule(m, names, shapes, func(key string, dst []float32) error {
		return c.ReadSlice(prefix+"/"+key, 0, dst)
	}); err != nil {
		return fmt.Errorf("checkpoint: %s: %q: %w", c.Dir, prefix, err)
	}
	return nil
}

// StateLoader is an optimizer or a scheduler.
type StateLoader interface {
	LoadStateDict(sd *optim.StateDict) error
}

// LoadStateDict restores the state saved by Snapshot.AddStateDict(prefix,
// …) into o, which checks kinds, keys and shapes.
func (c *Checkpoint) LoadStateDict(prefix string, o StateLoader) error {
	var sm stateMeta
	if err := c.Meta(prefix, &sm); err != nil {
		return err
	}
	sd := &optim.StateDict{Kind: sm.Kind, Tensors: map[string]*tensor.Tensor{}, Scalars: sm.Scalars}
	if sd.Scalars == nil {
		sd.Scalars = map[string]float64{}
	}
	for _, name := range c.Names(prefix + "/") {
		t, err := c.Tensor(name)
		if err != nil {
			return err
		}
		sd.Tensors[strings.TrimPrefix(name, prefix+"/")] = t
	}
	if err := o.LoadStateDict(sd); err != nil {
		return fmt.Errorf("checkpoint: %s: %q: %w", c.Dir, prefix, err)
	}
	return nil
}

// Meta decodes the job-wide value saved under key into v.
func (c *Checkpoint) Meta(key string, v any) error {
	raw, ok := c.Manifest.Meta[key]
	if !ok {
		return fmt.Errorf("checkpoint: %s: no meta value %q", c.Dir, key)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("checkpoint: %s: meta value %q: %w", c.Dir, key, err)
	}
	return nil
}

// Local decodes rank's own value saved under key into v.
func (c *Checkpoint) Local(rank int, key string, v any) error {
	if rank < 0 || rank >= c.Manifest.WorldSize {
		return fmt.Errorf("checkpoint: %s: rank %d outside the saving world of %d", c.Dir, rank, c.Manifest.WorldSize)
	}
	raw, ok := c.Manifest.Local[rank][key]
	if !ok {
		return fmt.Errorf("checkpoint: %s: rank %d saved no local value %q", c.Dir, rank, key)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("checkpoint: %s: rank %d local value %q: %w", c.Dir, rank, key, err)
	}
	return nil
}
