package checkpoint

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// killChildEnv makes this test binary the child of TestKillDuringSave: it
// saves checkpoints into the named directory until killed.
const killChildEnv = "COHORT_CHECKPOINT_KILL_CHILD"

// stepValues is the content of tensor "w" in the checkpoint of step.
func stepValues(step int64, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(step) + float32(i%1000)*1e-3
	}
	return out
}

const killTensorLen = 1 << 20 // 4 MB per checkpoint: the kill often lands mid-write

// TestKillDuringSave kills (SIGKILL) a process that saves checkpoints in a
// loop at random moments: the newest complete checkpoint must always
// load, with valid checksums and the content of its step, whatever the
// kill tore.
func TestKillDuringSave(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		for step := int64(1); ; step++ {
			s := &Snapshot{Step: step, Shards: []Shard{{Name: "w", FullShape: []int{killTensorLen}, Data: stepValues(step, killTensorLen)}}}
			if _, err := Save(context.Background(), dir, Single, s, Options{Keep: 2}); err != nil {
				fmt.Println("error:", err)
				os.Exit(1)
			}
			fmt.Println("saved", step)
		}
	}
	if testing.Short() {
		t.Skip("starts and kills processes")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for trial := range 5 {
		t.Run(fmt.Sprintf("trial=%d", trial), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringSave$")
			cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			for sc.Scan() && !strings.HasPrefix(sc.Text(), "saved 2") {
				if strings.HasPrefix(sc.Text(), "error") {
					t.Fatal(sc.Text())
				}
			}
			delay := time.Duration(rng.IntN(400)) * time.Millisecond
			time.Sleep(delay) // a random moment of the next saves, not a synchronisation
			cmd.Process.Kill()
			cmd.Wait()
			path, step, err := Latest(dir)
			if err != nil {
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(dir)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Logf("killed %v after step 2: directories %v, latest complete step %d", delay, names, step)
			c, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			w, err := c.Tensor("w")
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(w.Data(), stepValues(step, killTensorLen)) {
				t.Errorf("checkpoint of step %d holds other values", step)
			}
		})
	}
}
