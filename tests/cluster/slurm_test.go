package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/launch/launchtest"
)

// slurm is a 2-node Slurm cluster in network namespaces: node0 and node1
// at subnet.1 and subnet.2, joined by a bridge in a hub namespace, with
// slurmctld on node0. Node names are in no DNS and no /etc/hosts; only
// slurm.conf's NodeAddr knows them.
type slurm struct {
	prefix, subnet, dir, conf string
	nodes                     []string // namespace per node
}

// TestSlurm trains MNIST (DDP, 4 ranks, one small epoch) on the cluster
// three ways and checks a missing host fails fast.
func TestSlurm(t *testing.T) {
	if os.Getenv("COHORT_CLUSTER_TESTS") != "1" {
		t.Skip("cluster: the Slurm cluster test takes about a minute; set COHORT_CLUSTER_TESTS=1 (as root) to run it")
	}
	if os.Geteuid() != 0 {
		t.Skipf("cluster: Slurm in network namespaces needs root (uid %d)", os.Geteuid())
	}
	if m := missing("slurmctld", "slurmd", "srun", "sbatch", "sinfo", "munge", "munged", "ip", "nsenter"); m != "" {
		t.Skipf("cluster: %s is not installed (apt-get install slurmctld slurmd slurm-client munge)", m)
	}
	c := startSlurm(t)
	cohort, mnist := bin(t, "cohort"), bin(t, "mnist")
	train := []string{mnist, "-epochs", "1", "-limit", "512"}
	checkTrained := func(t *testing.T, out string) {
		t.Helper()
		if !strings.Contains(out, "on 4 rank(s)") || !strings.Contains(out, "test accuracy:") {
			t.Errorf("MNIST did not train on 4 ranks:\n%s", out)
		}
		for r := range 4 {
			if !regexp.MustCompile(fmt.Sprintf(`(?m)^(%d: )?(\[rank %d\] )?epoch 1: train loss`, r, r)).MatchString(out) {
				t.Errorf("rank %d did not report its epoch:\n%s", r, out)
			}
		}
	}
	t.Run("srun-cohort-run", func(t *testing.T) {
		start := time.Now()
		out, err := c.run(3*time.Minute, []string{"COHORT_TOKEN=slurm-test"}, append([]string{"srun", "-N2", "-n2", cohort, "run", "--nproc-per-node", "2"}, train...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("srun -N2 -n2 cohort run --nproc-per-node 2 mnist: %v", time.Since(start).Round(time.Millisecond))
		checkTrained(t, out)
	})
	t.Run("srun-direct", func(t *testing.T) {
		start := time.Now()
		out, err := c.run(3*time.Minute, []string{"COHORT_TOKEN=slurm-test"}, append([]string{"srun", "-N2", "-n4", "-l"}, train...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("srun -N2 -n4 mnist: %v", time.Since(start).Round(time.Millisecond))
		checkTrained(t, out)
	})
	t.Run("sbatch", func(t *testing.T) {
		script := filepath.Join(c.dir, "job.sh")
		log := filepath.Join(c.dir, "job.out")
		body := "#!/bin/bash\n#SBATCH -N2\n#SBATCH -n2\nexport COHORT_TOKEN=sbatch-test\nsrun " + cohort + " run --nproc-per-node 2 " + strings.Join(train, " ") + "\n"
		if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := c.run(3*time.Minute, nil, "sbatch", "--wait", "-o", log, script); err != nil {
			b, _ := os.ReadFile(log)
			t.Fatalf("%v\njob output:\n%s", err, b)
		}
		t.Logf("sbatch --wait (srun cohort run inside): %v", time.Since(start).Round(time.Millisecond))
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		checkTrained(t, string(b))
	})
	t.Run("unknown-host-fails-fast", func(t *testing.T) {
		start := time.Now()
		out, err := c.run(time.Minute, []string{"COHORT_TOKEN=t", "MASTER_ADDR=nosuchnode"}, append([]string{"srun", "-N2", "-n2", cohort, "run", "--nproc-per-node", "2"}, train...)...)
		took := time.Since(start)
		if err == nil {
			t.Fatalf("a job whose master is nosuchnode succeeded:\n%s", out)
		}
		if !strings.Contains(out, `"nosuchnode"`) || !strings.Contains(out, "MASTER_ADDR") {
			t.Errorf("the error does not name the host and the fix:\n%s", out)
		}
		if took > 20*time.Second {
			t.Errorf("failing took %v; want seconds", took)
		}
		t.Logf("unknown master host: failed in %v", took.Round(time.Millisecond))
	})
}

// run runs a Slurm client command inside node0's namespace.
func (c *slurm) run(timeout time.Duration, env []string, args ...string) (string, error) {
	full := append([]string{"--net=/var/run/netns/" + c.nodes[0], "env", "SLURM_CONF=" + c.conf}, env...)
	return launchtest.Run(timeout, nil, "nsenter", append(full, args...)...)
}

// startSlurm builds the namespaces, starts munged if none answers, and
// slurmctld and two slurmd; every piece is removed by t.Cleanup.
func startSlurm(t *testing.T) *slurm {
	t.Helper()
	c := &slurm{prefix: fmt.Sprintf("cls%d-", os.Getpid()), subnet: fmt.Sprintf("10.215.%d", os.Getpid()%250+1)}
	// Slurm's daemons run as root; the spool and state directories must
	// be root's, and the paths short.
	dir, err := os.MkdirTemp("", "cohort-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir, c.conf = dir, filepath.Join(dir, "slurm.conf")
	t.Cleanup(func() { os.RemoveAll(dir) })

	ip := func(args ...string) {
		t.Helper()
		if _, err := launchtest.Run(20*time.Second, nil, "ip", args...); err != nil {
			t.Fatalf("building the cluster's network: %v", err)
		}
	}
	hub := c.prefix + "hub"
	t.Cleanup(func() {
		for _, ns := range append([]string{hub}, c.nodes...) {
			launchtest.Run(20*time.Second, nil, "ip", "netns", "del", ns)
		}
	})
	ip("netns", "add", hub)
	ip("-n", hub, "link", "set", "lo", "up")
	ip("-n", hub, "link", "add", "br0", "type", "bridge")
	ip("-n", hub, "link", "set", "br0", "up")
	for i := range 2 {
		ns := fmt.Sprintf("%sn%d", c.prefix, i)
		c.nodes = append(c.nodes, ns)
		ip("netns", "add", ns)
		ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", fmt.Sprintf("p%d", i), "netns", hub)
		ip("-n", ns, "addr", "add", fmt.Sprintf("%s.%d/24", c.subnet, i+1), "dev", "eth0")
		ip("-n", ns, "link", "set", "lo", "up")
		ip("-n", ns, "link", "set", "eth0", "up")
		ip("-n", hub, "link", "set", fmt.Sprintf("p%d", i), "master", "br0", "up")
		if out, err := launchtest.Run(10*time.Second, nil, "ip", "-n", ns, "route", "show", "default"); err != nil || strings.TrimSpace(out) != "" {
			t.Fatalf("namespace %s must have no default route, has %q (%v)", ns, out, err)
		}
	}

	if _, err := launchtest.Run(10*time.Second, nil, "munge", "-n"); err != nil {
		startMunged(t)
	}

	host, _ := os.Hostname()
	conf := fmt.Sprintf(`ClusterName=cohort
SlurmctldHost=%[1]s(%[2]s.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=%[3]s/state
SlurmdSpoolDir=%[3]s/spool-%%n
SlurmctldPidFile=%[3]s/slurmctld.pid
SlurmdPidFile=%[3]s/slurmd-%%n.pid
SlurmctldLogFile=%[3]s/slurmctld.log
SlurmdLogFile=%[3]s/slurmd-%%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
NodeName=node0 NodeAddr=%[2]s.1 CPUs=2 RealMemory=8000 State=UNKNOWN
NodeName=node1 NodeAddr=%[2]s.2 CPUs=2 RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
`, host, c.subnet, dir)
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	// Stop the daemons by the pids they wrote (they daemonize).
	t.Cleanup(func() {
		pids, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, f := range pids {
			killPidFile(t, f)
		}
	})
	daemon := func(ns string, args ...string) {
		t.Helper()
		// nsenter, not ip netns exec: the latter remounts /sys and slurmd
		// then finds no cgroup filesystem.
		if out, err := launchtest.Run(30*time.Second, nil, "nsenter", append([]string{"--net=/var/run/netns/" + ns}, args...)...); err != nil {
			t.Fatalf("starting %s: %v\n%s", args[0], err, out)
		}
	}
	slurmctld, _ := lookTool("slurmctld")
	slurmd, _ := lookTool("slurmd")
	daemon(c.nodes[0], slurmctld, "-f", c.conf)
	daemon(c.nodes[0], slurmd, "-f", c.conf, "-N", "node0")
	daemon(c.nodes[1], slurmd, "-f", c.conf, "-N", "node1")
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := c.run(10*time.Second, nil, "sinfo", "-h", "-N", "-o", "%N %t")
		if strings.Contains(out, "node0 idle") && strings.Contains(out, "node1 idle") {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "slurmctld.log"))
			t.Fatalf("the Slurm nodes are not idle after 60 s: %q\nslurmctld.log:\n%s", out, log)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return c
}

// startMunged starts a munged (creating a key if there is none) and
// stops it, by its pid, at the end of the test.
func startMunged(t *testing.T) {
	t.Helper()
	for _, d := range []string{"/run/munge", "/var/log/munge", "/var/lib/munge", "/etc/munge"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat("/etc/munge/munge.key"); err != nil || fi.Size() == 0 {
		if _, err := launchtest.Run(10*time.Second, nil, "sh", "-c", "dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null && chmod 400 /etc/munge/munge.key"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := launchtest.Run(10*time.Second, nil, "chown", "-R", "munge:munge", "/run/munge", "/var/log/munge", "/var/lib/munge", "/etc/munge"); err != nil {
		t.Fatal(err)
	}
	munged, _ := lookTool("munged")
	if out, err := launchtest.Run(20*time.Second, nil, "runuser", "-u", "munge", "--", munged); err != nil {
		t.Fatalf("starting munged: %v\n%s", err, out)
	}
	t.Cleanup(func() { killPidFile(t, "/run/munge/munged.pid") })
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := launchtest.Run(5*time.Second, nil, "munge", "-n"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("munged does not answer")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// killPidFile stops the process whose pid the file holds: SIGTERM, then
// SIGKILL after 5 s.
func killPidFile(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}
