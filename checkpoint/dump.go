package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// dumpManifest is the FILE.json that the anchors' `gpt_bench.py
// --dump-init FILE` writes next to FILE: the tensors' names (cohort's
// parameter names), shapes and offsets in floats into FILE, which holds
// them as little-endian float32.
type dumpManifest struct {
	Numel   int `json:"numel"`
	Tensors []struct {
		Name   string `json:"name"`
		Shape  []int  `json:"shape"`
		Offset int    `json:"offset"`
	} `json:"tensors"`
}

// LoadDump replaces m's parameters by those in the raw float32 file path
// described by path.json (gpt_bench.py --dump-init's format). Every
// parameter must be there with its shape, and nothing else; every length
// and offset is checked against the file before anything is read.
func LoadDump(path string, m nn.Module) error {
	raw, err := os.ReadFile(path + ".json")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var man dumpManifest
	if err := json.Unmarshal(raw, &man); err != nil {
		return fmt.Errorf("checkpoint: %s.json: %w", path, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if len(b) != 4*man.Numel {
		return fmt.Errorf("checkpoint: %s has %d bytes, its manifest says %d float32 values", path, len(b), man.Numel)
	}
	sd := make(map[string]*tensor.Tensor, len(man.Tensors))
	for _, t := range man.Tensors {
		n := 1
		for _, d := range t.Shape {
			if d < 0 || d > man.Numel {
				n = man.Numel + 1
				break
			}
			n = min(n*d, man.Numel+1) // no overflow: anything larger is an error anyway
		}
		if t.Offset < 0 || t.Offset > man.Numel || n > man.Numel-t.Offset {
			return fmt.Errorf("checkpoint: %s.json: tensor %q (shape %v at offset %d) lies outside the %d values", path, t.Name, t.Shape, t.Offset, man.Numel)
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*(t.Offset+i):]))
		}
		sd[t.Name] = tensor.FromSlice(v, t.Shape...)
	}
	if err := nn.LoadStateDict(m, sd); err != nil {
		return fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return nil
}
