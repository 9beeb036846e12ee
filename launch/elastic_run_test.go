package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/launch/launchtest"
)

// agentSpec is an elastic agent run as a child process of the test
// binary (see runAgentProcess), so a test can kill it with SIGKILL.
type agentSpec struct {
	Endpoint, Token string
	Min, Max, NProc int
	MaxRestarts     int
	Host            HostMode
	KeepAlive       time.Duration
	Program         string
	Args            []string
}

const agentEnv = "LAUNCH_TEST_AGENT"

// runAgentProcess is the child side: TestMain calls it when agentEnv is
// set, and it never returns.
func runAgentProcess(spec string) {
	var s agentSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	err := Run(context.Background(), Config{
		NProcPerNode: s.NProc, Program: s.Program, Args: s.Args, Env: os.Environ(), Token: s.Token,
		Stdout: os.Stdout, Stderr: os.Stderr, Signals: sigs, GracePeriod: 2 * time.Second,
		Elastic: Elastic{Endpoint: s.Endpoint, ID: "proc-test", MinNodes: s.Min, MaxNodes: s.Max, MaxRestarts: s.MaxRestarts,
			Host: s.Host, KeepAliveInterval: s.KeepAlive, LastCallTimeout: time.Second},
		JoinTimeout: time.Minute, ExitBarrierTimeout: 10 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// elasticConfig is one in-process elastic agent of a test job.
func elasticConfig(t *testing.T, endpoint string, min, max, maxRestarts int, args ...string) Config {
	t.Helper()
	cfg := testConfig(2, args...)
	cfg.Elastic = Elastic{Endpoint: endpoint, ID: "test", MinNodes: min, MaxNodes: max, MaxRestarts: maxRestarts,
		KeepAliveInterval: time.Second, LastCallTimeout: 500 * time.Millisecond, MonitorInterval: 100 * time.Millisecond}
	cfg.JoinTimeout = 30 * time.Second
	cfg.ExitBarrierTimeout = 10 * time.Second
	return cfg
}

func endpoint(t *testing.T) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))) }

// waitOutput waits up to d until pattern has matched n times in out.
func waitOutput(t *testing.T, what string, out *launchtest.Output, pattern string, n int, d time.Duration) {
	t.Helper()
	if err := out.Wait(regexp.MustCompile(pattern), n, nil, d); err != nil {
		t.Fatalf("%s: %v:\n%s", what, err, out)
	}
}

// TestElasticRestart: a worker that fails once restarts the group; the
// second generation sees COHORT_RESTART_COUNT=1 and succeeds.
func TestElasticRestart(t *testing.T) {
	cfg := elasticConfig(t, endpoint(t), 1, 1, 1, "restart")
	err, took := run(t, cfg)
	out, errOut := cfg.Stdout.(*launchtest.Output).String(), cfg.Stderr.(*launchtest.Output).String()
	if err != nil {
		t.Fatalf("Run = %v; want success after one restart\n%s\n%s", err, out, errOut)
	}
	for _, want := range []string{"[rank 1] restart 0", "[rank 0] restart 1", "[rank 1] restart 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`cohort run: rank 1 \(local rank 1 on node 0, pid \d+\) exited with code 3; restarting the job`).MatchString(errOut) {
		t.Errorf("stderr does not name the failed rank and its exit code:\n%s", errOut)
	}
	if !strings.Contains(errOut, "cohort run: round 1: node rank 0 of 1, ranks 0..1 of world 2, restart 1") {
		t.Errorf("stderr lacks round 1's announcement:\n%s", errOut)
	}
	t.Logf("failed once and restarted in %v", took.Round(time.Millisecond))
}

// TestElasticRestartsExhausted: past --max-restarts the job fails with
// the worker's error.
func TestElasticRestartsExhausted(t *testing.T) {
	cfg := elasticConfig(t, endpoint(t), 1, 1, 1, "exit", "1", "3")
	err, took := run(t, cfg)
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 || we.Status.Code != 3 {
		t.Fatalf("Run = %v; want rank 1's failure\n%s", err, cfg.Stderr.(*launchtest.Output).String())
	}
	if n := strings.Count(cfg.Stderr.(*launchtest.Output).String(), "exited with code 3; restarting the job"); n != 2 {
		t.Errorf("%d failures announced; want 2 (the first restarted, the second exceeded --max-restarts 1)", n)
	}
	if took > 20*time.Second {
		t.Errorf("took %v", took)
	}
	assertNoneAlive(t, cfg.Stdout.(*launchtest.Output).String(), 8)
}

// TestElasticTwoNodesRestart: a worker failing on node 0 restarts the
// workers of both nodes (the other ranks notice the dead peer and fail
// too, which does not count again); the job then runs with
// COHORT_RESTART_COUNT=1 everywhere.
func TestElasticTwoNodesRestart(t *testing.T) {
	ep, dir := endpoint(t), t.TempDir()
	var agents []*elasticAgent
	for node := range 2 {
		cfg := elasticConfig(t, ep, 2, 2, 1, "elastic", dir, "failonce")
		cfg.Elastic.Host = []HostMode{HostYes, HostNo}[node]
		ag := startElastic(cfg)
		defer ag.cancel()
		agents = append(agents, ag)
	}
	failed := time.Now()
	for i, ag := range agents {
		waitOutput(t, fmt.Sprintf("agent %d", i), ag.stdout(), `ELASTIC round=\d+ world=4 rank=\d restart=1 telastic=1`, 2, 30*time.Second)
	}
	t.Logf("first start, failure and restart of 4 ranks on 2 agents: %v", time.Since(failed).Round(time.Millisecond))
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, ag := range agents {
		if err := <-ag.done; err != nil {
			t.Errorf("agent %d: %v\n%s", i, err, ag.out())
		}
	}
	all := agents[0].out() + agents[1].out()
	if !regexp.MustCompile(`cohort run: rank 1 \(local rank 1 on node \d, pid \d+\) exited with code 3; restarting the job`).MatchString(all) {
		t.Errorf("no agent named rank 1's exit code:\n%s", all)
	}
	if n := strings.Count(all, "restart=2"); n > 0 {
		t.Errorf("the restart was counted more than once:\n%s", all)
	}
}

// elasticAgent is one in-process agent of TestElasticLeaveJoin.
type elasticAgent struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan error
}

func startElastic(cfg Config) *elasticAgent {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	a := &elasticAgent{cfg: cfg, cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- Run(ctx, cfg) }()
	return a
}

// stdout is the output of the agent's workers.
func (a *elasticAgent) stdout() *launchtest.Output { return a.cfg.Stdout.(*launchtest.Output) }

func (a *elasticAgent) out() string {
	return a.cfg.Stdout.(*launchtest.Output).String() + a.cfg.Stderr.(*launchtest.Output).String()
}

// TestElasticLeaveJoin: two agents in this process; one leaves (its
// context ends, as on SIGTERM) and the other continues at world 2 in a
// new round; a third joins and the job grows back to world 4. Scale
// events are not restarts.
func TestElasticLeaveJoin(t *testing.T) {
	ep, dir := endpoint(t), t.TempDir()
	mk := func(host HostMode) Config {
		cfg := elasticConfig(t, ep, 1, 2, 0, "elastic", dir)
		cfg.Elastic.Host = host
		return cfg
	}
	a := startElastic(mk(HostYes))
	defer a.cancel()
	b := startElastic(mk(HostNo))
	defer b.cancel()
	waitOutput(t, "agent a", a.stdout(), `ELASTIC round=\d+ world=4`, 2, 30*time.Second)
	waitOutput(t, "agent b", b.stdout(), `ELASTIC round=\d+ world=4`, 2, 30*time.Second)

	left := time.Now()
	b.cancel()
	if err := <-b.done; !errors.Is(err, context.Canceled) {
		t.Errorf("the leaving agent returned %v; want context.Canceled", err)
	}
	waitOutput(t, "agent a", a.stdout(), `ELASTIC round=\d+ world=2 rank=\d restart=0`, 2, 30*time.Second)
	t.Logf("leave → training at world 2: %v", time.Since(left).Round(time.Millisecond))

	joined := time.Now()
	c := startElastic(mk(HostNo))
	defer c.cancel()
	// Node ranks follow the join order, so a may have held ranks 2-3 in
	// round 0: count world-4 starts in later rounds.
	waitOutput(t, "agent c", c.stdout(), `ELASTIC round=\d+ world=4 rank=\d restart=0`, 2, 30*time.Second)
	waitOutput(t, "agent a", a.stdout(), `ELASTIC round=[1-9]\d* world=4 rank=\d restart=0`, 2, 30*time.Second)
	t.Logf("join → training at world 4: %v", time.Since(joined).Round(time.Millisecond))

	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, ag := range map[string]*elasticAgent{"a": a, "c": c} {
		if err := <-ag.done; err != nil {
			t.Errorf("agent %s: %v\n%s", name, err, ag.out())
		}
	}
	rounds := regexp.MustCompile(`\[rank \d\] ELASTIC round=(\d+) world=(\d+) rank=[02] `).FindAllStringSubmatch(a.out(), -1)
	var seq []string
	for _, m := range rounds {
		seq = append(seq, "round "+m[1]+" world "+m[2])
	}
	if len(seq) < 3 || !strings.HasSuffix(seq[0], "world 4") || !strings.HasSuffix(seq[len(seq)-1], "world 4") || !strings.Contains(strings.Join(seq, ","), "world 2") {
		t.Errorf("rank 0 ran %v; want world 4, then 2, then 4", seq)
	}
}

// TestElasticProcessKill: two agents as processes on 127.0.0.1; one is
// killed with SIGKILL (its workers die with it), the other resumes at
// world 2; a new agent process joins and the job resumes at world 4.
// It measures the time from the kill to the survivors training again.
// Heartbeats are 1 s; COHORT_ELASTIC_TESTS=1 runs it with the default
// 5 s.
func TestElasticProcessKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts agent processes")
	}
	keepAlive := time.Second
	if os.Getenv("COHORT_ELASTIC_TESTS") == "1" {
		keepAlive = 0 // the default, 5 s
	}
	ep, dir := endpoint(t), t.TempDir()
	start := func(host HostMode) (*exec.Cmd, *launchtest.Output) {
		spec, _ := json.Marshal(agentSpec{Endpoint: ep, Token: "tok", Min: 1, Max: 2, NProc: 2, Host: host,
			KeepAlive: keepAlive, Program: workerBin, Args: []string{"elastic", dir}})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), agentEnv+"="+string(spec))
		out := &launchtest.Output{}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		t.Cleanup(func() {
			once.Do(func() {
				cmd.Process.Kill()
				cmd.Wait()
			})
		})
		return cmd, out
	}
	p0, out0 := start(HostYes)
	p1, out1 := start(HostNo)
	waitOutput(t, "agent 0", out0, `ELASTIC round=\d+ world=4`, 2, 60*time.Second)
	waitOutput(t, "agent 1", out1, `ELASTIC round=\d+ world=4`, 2, 60*time.Second)

	if err := p1.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	p1.Wait()
	waitOutput(t, "agent 0", out0, `ELASTIC round=\d+ world=2 rank=\d restart=0`, 2, 60*time.Second)
	resumed := time.Since(killed)
	t.Logf("agent killed (SIGKILL) → survivors training at world 2: %v (keep-alive %v)", resumed.Round(time.Millisecond), cmp(keepAlive, 5*time.Second))
	if resumed > 10*time.Second {
		t.Errorf("the survivors took %v to resume; want under 10 s", resumed)
	}

	joined := time.Now()
	p2, out2 := start(HostNo)
	waitOutput(t, "agent 2", out2, `ELASTIC round=\d+ world=4 rank=\d restart=0`, 2, 60*time.Second)
	t.Logf("agent joined → training at world 4: %v", time.Since(joined).Round(time.Millisecond))

	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, p := range []*exec.Cmd{p0, p2} {
		if err := p.Wait(); err != nil {
			t.Errorf("agent %d: %v\n%s", i*2, err, []*launchtest.Output{out0, out2}[i].String())
		}
	}
	assertNoneAlive(t, out1.String(), 2)
}

func cmp(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
