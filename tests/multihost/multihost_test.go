package multihost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/launch/launchtest"
)

const (
	masterPort   = 29500
	nodes        = 2
	nprocPerNode = 2
	world        = nodes * nprocPerNode
	benchBytes   = 16 << 20
	// jobTimeout bounds one job; a healthy one takes a few seconds.
	jobTimeout = 2 * time.Minute
)

// prefix names every namespace this test binary creates.
func prefix() string { return fmt.Sprintf("coh%d-", os.Getpid()) }

// TestMain removes any namespace of this run still present at the end
// (and on SIGINT/SIGTERM), as a backstop to the per-test cleanups, and
// fails the run if it had to.
func TestMain(m *testing.M) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "multihost: %v: removing namespaces %s*\n", sig, prefix())
			deleteNamespaces(prefix())
			os.Exit(2)
		case <-stop:
		}
	}()
	code := m.Run()
	close(stop)
	<-stopped
	signal.Stop(sigs)
	if left, err := namespaces(prefix()); err == nil && len(left) > 0 {
		fmt.Fprintf(os.Stderr, "multihost: namespaces left behind: %v; removing them\n", left)
		deleteNamespaces(prefix())
		code = 1
	}
	os.Exit(code)
}

// suite is what the subtests share: the binaries, built once.
type suite struct {
	cohort, worker string
	jobs           int           // topologies made so far, for unique names
	baseline       time.Duration // the unlimited 16 MiB all-reduce, once measured
}

func TestMultiHost(t *testing.T) {
	if why := canCreateNamespaces(prefix() + "probe"); why != "" {
		t.Skipf("multihost: needs root and permission to create network namespaces (ip netns add): %s", why)
	}
	s := build(t)
	t.Run("collectives", s.testCollectives)
	t.Run("kill", s.testKill)
	t.Run("ratelimit", s.testRateLimit)
	t.Run("elastic", s.testElastic)
	t.Run("elastic-mnist", s.testElasticMNIST)
}

// tokenEnv returns a fresh random job secret as COHORT_TOKEN=….
func tokenEnv() string {
	tok := make([]byte, 16)
	rand.Read(tok)
	return "COHORT_TOKEN=" + hex.EncodeToString(tok)
}

// build compiles cmd/cohort and the worker into a temporary directory.
func build(t *testing.T) *suite {
	t.Helper()
	dir := t.TempDir()
	start := time.Now()
	if err := launchtest.Build(dir, "github.com/cohortml/cohort/cmd/cohort", "./testdata/worker"); err != nil {
		t.Fatal(err)
	}
	t.Logf("built cohort and worker in %v", time.Since(start).Round(time.Millisecond))
	return &suite{cohort: filepath.Join(dir, "cohort"), worker: filepath.Join(dir, "worker")}
}

// topology makes a fresh pair of hosts for one subtest, on its own /24
// inside 10.214.0.0/16.
func (s *suite) topology(t *testing.T) *topology {
	s.jobs++
	p := fmt.Sprintf("%s%d-", prefix(), s.jobs)
	subnet := fmt.Sprintf("10.214.%d", (os.Getpid()+s.jobs)%254+1)
	return newTopology(t, p, subnet, nodes)
}

// launch starts one `cohort run` per host, node i on host i, each running
// the worker with workerArgs.
func (s *suite) launch(t *testing.T, tp *topology, b *bell, workerArgs ...string) []*launcher {
	t.Helper()
	token := tokenEnv()
	var ls []*launcher
	for i, h := range tp.hosts {
		args := []string{
			"--nnodes", strconv.Itoa(nodes), "--nproc-per-node", strconv.Itoa(nprocPerNode),
			"--node-rank", strconv.Itoa(i), "--master-addr", tp.hosts[0].ip, "--master-port", strconv.Itoa(masterPort),
			"--grace-period", "2s", "--join-timeout", "60s", "--verbose",
			"--", s.worker,
		}
		ls = append(ls, startLauncher(t, b, fmt.Sprintf("node %d (%s, %s)", i, h.ns, h.ip), s.cohort, h,
			[]string{token}, append(args, workerArgs...)...))
	}
	return ls
}

// waitSuccess waits for every launcher and fails the test unless all
// exited 0; it returns their stdout lines together.
func waitSuccess(t *testing.T, ls []*launcher) []string {
	t.Helper()
	var lines []string
	failed := false
	for _, l := range ls {
		if code := l.wait(t, jobTimeout); code != 0 {
			t.Errorf("%s exited %d, want 0", l.name, code)
			failed = true
		}
		lines = append(lines, l.out.Lines()...)
	}
	if failed {
		for _, l := range ls {
			l.dump(t)
		}
		t.FailNow()
	}
	return lines
}

func ranks() []int {
	r := make([]int, world)
	for i := range r {
		r[i] = i
	}
	return r
}

// testCollectives runs the checking worker on 2 hosts × 2 ranks and
// verifies that every rank passed and which transport each link used.
func (s *suite) testCollectives(t *testing.T) {
	tp := s.topology(t)
	b := newBell()
	ls := s.launch(t, tp, b, "--mode", "check", "--world", strconv.Itoa(world), "--bench-bytes", strconv.Itoa(benchBytes))
	lines := waitSuccess(t, ls)

	// Every rank started on the right node, checked its collectives and
	// said so, through its own node's launcher.
	for node, l := range ls {
		ready := reports(l.out.Lines(), "READY")
		ok := reports(l.out.Lines(), "OK")
		for local := range nprocPerNode {
			rank := node*nprocPerNode + local
			r, have := ready[rank]
			switch {
			case !have:
				t.Errorf("%s: no READY from rank %d", l.name, rank)
			case r.fields["node"] != strconv.Itoa(node) || r.fields["local"] != strconv.Itoa(local):
				t.Errorf("%s: rank %d reports node %s local %s, want node %d local %d", l.name, rank, r.fields["node"], r.fields["local"], node, local)
			}
			if _, have := ok[rank]; !have {
				t.Errorf("%s: no OK from rank %d", l.name, rank)
			}
		}
	}
	checkTransports(t, tp, lines)
	if d, ok := benchTime(t, lines); ok {
		s.baseline = d
		t.Logf("unlimited: 16 MiB all-reduce, world %d over 2 hosts: median %v, algbw %.0f Mbit/s, busbw %.0f Mbit/s",
			world, d.Round(time.Microsecond), mbits(benchBytes, d), mbits(busBytes(), d))
	}
	if t.Failed() {
		for _, l := range ls {
			l.dump(t)
		}
	}
}

// checkTransports asserts, from the workers' SOCKETS and SHM reports,
// that ranks on different hosts hold a TCP connection to each other over
// the hosts' addresses and share no memory (subtest tcp-between-hosts),
// and that ranks on one host share a mapped file, i.e. shared memory, and
// hold no TCP connection (subtest shm-within-host).
func checkTransports(t *testing.T, tp *topology, lines []string) {
	t.Helper()
	socks, maps := reports(lines, "SOCKETS"), reports(lines, "SHM")
	conns := make(map[int][][2]string)
	shared := make(map[int][]string)
	for r := range world {
		sr, ok1 := socks[r]
		mr, ok2 := maps[r]
		if !ok1 || !ok2 {
			t.Fatalf("rank %d sent no SOCKETS or SHM report", r)
		}
		for _, c := range splitList(sr.fields["tcp"]) {
			l, rem, ok := strings.Cut(c, ">")
			if !ok {
				t.Fatalf("rank %d: bad connection %q", r, c)
			}
			if port(l) == masterPort || port(rem) == masterPort {
				continue // the job's store, served by node 0's launcher
			}
			conns[r] = append(conns[r], [2]string{l, rem})
		}
		shared[r] = splitList(mr.fields["maps"])
	}
	type pair struct{ a, b int }
	var cross, local []pair
	for a := range world {
		for b := a + 1; b < world; b++ {
			if a/nprocPerNode != b/nprocPerNode {
				cross = append(cross, pair{a, b})
			} else {
				local = append(local, pair{a, b})
			}
		}
	}
	hostIPs := []string{tp.hosts[0].ip, tp.hosts[1].ip}
	t.Run("tcp-between-hosts", func(t *testing.T) {
		for _, p := range cross {
			a, b := p.a, p.b
			links := linked(conns[a], conns[b], false)
			if len(links) == 0 {
				t.Errorf("ranks %d (host %d) and %d (host %d) share no TCP connection; rank %d holds %v, rank %d holds %v",
					a, a/nprocPerNode, b, b/nprocPerNode, a, conns[a], b, conns[b])
			}
			for _, c := range links {
				if !slices.Contains(hostIPs, hostOf(c[0])) || !slices.Contains(hostIPs, hostOf(c[1])) {
					t.Errorf("ranks %d and %d: connection %s>%s is not between the hosts' addresses %v", a, b, c[0], c[1], hostIPs)
				}
			}
			if common := intersect(shared[a], shared[b]); len(common) > 0 {
				t.Errorf("ranks %d and %d are on different hosts but map the same files %v", a, b, common)
			}
			t.Logf("ranks %d-%d: tcp %v", a, b, links)
		}
	})
	t.Run("shm-within-host", func(t *testing.T) {
		for _, p := range local {
			a, b := p.a, p.b
			links := linked(conns[a], conns[b], true)
			common := intersect(shared[a], shared[b])
			if len(common) == 0 {
				t.Errorf("ranks %d and %d share host %d but map no file in common: under transport auto they should use shared memory; they use tcp %v",
					a, b, a/nprocPerNode, links)
			}
			if len(links) > 0 {
				t.Errorf("ranks %d and %d share host %d but are connected over tcp %v", a, b, a/nprocPerNode, links)
			}
			t.Logf("ranks %d-%d: shared mappings %v, tcp %v", a, b, common, links)
		}
	})
}

// linked returns a's connections whose other end is one of b's. Two
// processes on different hosts cannot be joined through loopback, so
// loopback pairs count only on one host.
func linked(a, b [][2]string, sameHost bool) [][2]string {
	var out [][2]string
	for _, ca := range a {
		if !sameHost && net.ParseIP(hostOf(ca[0])).IsLoopback() {
			continue
		}
		for _, cb := range b {
			if ca[0] == cb[1] && ca[1] == cb[0] {
				out = append(out, ca)
			}
		}
	}
	return out
}

func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func hostOf(hostport string) string {
	h, _, _ := net.SplitHostPort(hostport)
	return h
}

func port(hostport string) int {
	_, p, _ := net.SplitHostPort(hostport)
	n, _ := strconv.Atoi(p)
	return n
}

// benchTime is the slowest rank's median all-reduce time from the BENCH
// reports.
func benchTime(t *testing.T, lines []string) (time.Duration, bool) {
	t.Helper()
	bench := reports(lines, "BENCH")
	if len(bench) != world {
		t.Errorf("BENCH reports from %d ranks, want %d", len(bench), world)
		return 0, false
	}
	var worst time.Duration
	for r, rep := range bench {
		if rep.fields["bytes"] != strconv.Itoa(benchBytes) {
			t.Errorf("rank %d timed %s bytes, want %d", r, rep.fields["bytes"], benchBytes)
		}
		sec, err := strconv.ParseFloat(rep.fields["seconds"], 64)
		if err != nil || sec <= 0 {
			t.Errorf("rank %d: bad time %q", r, rep.fields["seconds"])
			return 0, false
		}
		worst = max(worst, time.Duration(sec*float64(time.Second)))
	}
	return worst, true
}

// busBytes is what a ring all-reduce of benchBytes moves through each
// rank's link: 2(n−1)/n of the payload.
func busBytes() float64 { return benchBytes * 2 * float64(world-1) / float64(world) }

func mbits(bytes float64, d time.Duration) float64 { return bytes * 8 / d.Seconds() / 1e6 }

// testKill kills one worker on host 1 with SIGKILL while every rank loops
// on all-reduce, and checks that both launchers give up quickly, name the
// dead rank and leave no worker behind.
func (s *suite) testKill(t *testing.T) {
	tp := s.topology(t)
	b := newBell()
	ls := s.launch(t, tp, b, "--mode", "loop", "--loop-for", "90s")
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	looping, err := waitReports(ctx, b, "LOOPING", ranks(), ls...)
	if err != nil {
		for _, l := range ls {
			l.dump(t)
		}
		t.Fatal(err)
	}
	pids := make(map[int]int)
	for r, rep := range looping {
		pid, err := strconv.Atoi(rep.fields["pid"])
		if err != nil || pid <= 0 {
			t.Fatalf("rank %d: bad pid %q", r, rep.fields["pid"])
		}
		pids[r] = pid
		killWorkerOnCleanup(t, pid, s.worker)
	}
	const victim = world - 1 // local rank 1 on node 1
	if !workerAlive(pids[victim], s.worker) {
		t.Fatalf("rank %d (pid %d) is not running before the kill", victim, pids[victim])
	}
	if err := syscall.Kill(pids[victim], syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 rank %d (pid %d): %v", victim, pids[victim], err)
	}
	killed := time.Now()

	const bound = 10 * time.Second
	for _, l := range ls {
		if code := l.wait(t, jobTimeout); code == 0 {
			t.Errorf("%s exited 0 after rank %d was killed, want non-zero", l.name, victim)
		}
		took := l.exitedAt.Sub(killed)
		t.Logf("%s exited %v after the kill", l.name, took.Round(time.Millisecond))
		if took > bound {
			t.Errorf("%s took %v to exit after rank %d was killed, want at most %v", l.name, took.Round(time.Millisecond), victim, bound)
		}
	}
	// Each launcher's report names the dead rank: node 1 saw its worker
	// die; node 0 heard of it from node 1 (or from its own workers'
	// errors, which name the peer).
	dead := regexp.MustCompile(fmt.Sprintf(`\brank %d\b`, victim))
	for _, l := range ls {
		if !dead.MatchString(l.errOut.String()) {
			t.Errorf("%s: stderr never names rank %d", l.name, victim)
		}
	}
	if rep := lastLine(ls[1].errOut.Lines(), "cohort run:"); !strings.Contains(rep, fmt.Sprintf("rank %d failed", victim)) || !strings.Contains(rep, "signal 9") {
		t.Errorf("node 1's report %q does not say rank %d was killed by signal 9", rep, victim)
	}
	t.Logf("node 0 report: %s", lastLine(ls[0].errOut.Lines(), "cohort run:"))
	t.Logf("node 1 report: %s", lastLine(ls[1].errOut.Lines(), "cohort run:"))
	for r, pid := range pids {
		if workerAlive(pid, s.worker) {
			t.Errorf("rank %d (pid %d) still running after its launcher exited", r, pid)
		}
	}
	if t.Failed() {
		for _, l := range ls {
			l.dump(t)
		}
	}
}

// lastLine returns the last line starting with prefix, or "".
func lastLine(lines []string, prefix string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], prefix) {
			return lines[i]
		}
	}
	return ""
}

// testRateLimit shapes host 1's outgoing link to 200 Mbit/s, runs the
// checking worker, and checks that the job still succeeds and that a
// 16 MiB all-reduce cannot beat the link.
func (s *suite) testRateLimit(t *testing.T) {
	const (
		rate     = "200mbit"
		rateBits = 200e6
	)
	tp := s.topology(t)
	if err := tp.rateLimit(1, rate); err != nil {
		t.Skipf("cannot rate-limit a link here (tc tbf): %v", err)
	}
	b := newBell()
	ls := s.launch(t, tp, b, "--mode", "check", "--world", strconv.Itoa(world), "--bench-bytes", strconv.Itoa(benchBytes))
	lines := waitSuccess(t, ls)
	if ok := reports(lines, "OK"); len(ok) != world {
		t.Errorf("OK from %d ranks, want %d", len(ok), world)
	}
	d, ok := benchTime(t, lines)
	if !ok {
		t.FailNow()
	}
	alg, bus := mbits(benchBytes, d), mbits(busBytes(), d)
	t.Logf("host 1 egress limited to %s: 16 MiB all-reduce, world %d: median %v, algbw %.0f Mbit/s, busbw %.0f Mbit/s (%.2f × the limit)",
		rate, world, d.Round(time.Microsecond), alg, bus, bus*1e6/rateBits)
	if s.baseline > 0 {
		t.Logf("unlimited run took %v: the limit made it %.1f× slower", s.baseline.Round(time.Microsecond), d.Seconds()/s.baseline.Seconds())
	}
	// Host 0's ranks need every element reduced with host 1's data, so at
	// least the whole payload crosses the limited direction: algbw cannot
	// exceed the rate (slack for the bucket's burst and timing).
	if alg*1e6 > 1.5*rateBits {
		t.Errorf("algbw %.0f Mbit/s beats the %s link: the limit did not apply", alg, rate)
	}
	if bus*1e6 < rateBits/20 {
		t.Errorf("busbw %.0f Mbit/s is under a twentieth of the %s link", bus, rate)
	}
	// The shaped link carried the job's traffic.
	out, err := sh("ip", "netns", "exec", tp.hosts[1].ns, "tc", "-s", "qdisc", "show", "dev", "eth0")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Sent (\d+) bytes`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no byte count in tc output:\n%s", out)
	}
	sent, _ := strconv.ParseInt(m[1], 10, 64)
	t.Logf("the tbf qdisc on host 1 sent %d MiB", sent>>20)
	if !strings.Contains(out, "tbf") || sent < benchBytes {
		t.Errorf("the tbf qdisc on host 1 sent %d bytes, want at least the %d of one all-reduce:\n%s", sent, benchBytes, out)
	}
	if t.Failed() {
		for _, l := range ls {
			l.dump(t)
		}
	}
}
