package cluster

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/launch/launchtest"
)

// TestMpirun: four ranks started by OpenMPI's mpirun find each other from
// OMPI_COMM_WORLD_* (MASTER_PORT passed with -x, MASTER_ADDR defaulting to
// 127.0.0.1 because every rank shares this node), all-reduce and agree.
func TestMpirun(t *testing.T) {
	if m := missing("mpirun"); m != "" {
		t.Skipf("cluster: %s is not installed (apt-get install openmpi-bin)", m)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	check := bin(t, "collcheck")
	args := []string{"-np", "4", "--oversubscribe", "-x", "MASTER_PORT=" + strconv.Itoa(port), "-x", "COHORT_TOKEN=mpi-test"}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	start := time.Now()
	out, err := launchtest.Run(2*time.Minute, nil, "mpirun", append(args, check)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mpirun -np 4 collcheck: %v", time.Since(start).Round(time.Millisecond))
	for r := range 4 {
		if want := "OK rank=" + strconv.Itoa(r) + " world=4 source=openmpi"; !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
