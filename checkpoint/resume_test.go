package checkpoint

import (
	"context"
	"strings"
	"testing"
)

func TestResume(t *testing.T) {
	type job struct {
		Model string
		Seed  uint64
	}
	if ck, _, err := Resume("", job{}); ck != nil || err != nil {
		t.Fatalf(`Resume(""): %v, %v; want nothing`, ck, err)
	}
	dir := t.TempDir()
	if ck, _, err := Resume(dir, job{}); ck != nil || err != nil {
		t.Fatalf("Resume of an empty directory: %v, %v; want nothing", ck, err)
	}
	this := job{Model: "mlp", Seed: 1}
	g := NewGroup(0, 1, func(context.Context) error { return nil })
	s := &Snapshot{Step: 7, Meta: map[string]any{"job": this}}
	if _, err := Save(context.Background(), dir, g, s, Options{}); err != nil {
		t.Fatal(err)
	}
	ck, _, err := Resume(dir, this)
	if err != nil || ck == nil || ck.Step() != 7 {
		t.Fatalf("Resume of this run's checkpoint: %v, %v", ck, err)
	}
	ck.Close()
	if ck, _, err := Resume(dir, job{Model: "cnn", Seed: 1}); ck != nil || err == nil || !strings.Contains(err.Error(), "is of another run") {
		t.Fatalf("Resume of another run's checkpoint: %v, %v; want an error saying so", ck, err)
	}
}
