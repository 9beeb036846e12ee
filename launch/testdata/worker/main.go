// Command worker is the program the launch tests start. Its first argument
// picks a behaviour; every mode first prints "pid N" and, except "env",
// joins the job's store and waits for every rank (a barrier), so the
// tests know all workers are up before anything fails.
//
//	env                 print the launcher's variables, the CPUs the worker
//	                    may run on and its GOMAXPROCS, and exit 0
//	exit RANK CODE      RANK writes 25 stderr lines and exits CODE; others sleep
//	selfkill RANK       RANK kills itself with SIGKILL; others sleep
//	ignoreterm RANK     like exit RANK 3, but the others ignore SIGTERM
//	signal              wait for a signal, print it, exit 0
//	restart             rank 1 exits 3 on the first run, all exit 0 afterwards
//	streams             write one line to stdout and one to stderr, exit 0
//	usage               write a flag error and 30 lines of usage to stderr,
//	                    exit 2 (as the flag package does)
//	slow MS             wait MS milliseconds before joining, then exit 0
//	peerabort [code1]   wait; a rank that gets SIGINT or SIGTERM tells the
//	                    others through the store, waits 300 ms (so they exit
//	                    first, as peers of a collective do on an abort
//	                    notice) and exits by rendezvous.Fail (128+signal, or 1
//	                    with code1); a rank told so exits 1 at once, having
//	                    recorded "peer rank N aborted" in its error file
//	elastic DIR [failonce]
//	                    print "ELASTIC round=… world=… rank=… restart=…", then
//	                    heartbeat through the store and watch the other
//	                    ranks' beats (as a collective would notice a dead
//	                    peer): exit 1 naming a peer silent for 1.5 s, exit 0
//	                    once DIR/stop exists; with failonce rank 1 exits 3
//	                    on its first run (COHORT_RESTART_COUNT=0)
//
// Modes that sleep start a grandchild ("sleep 300", printed as "child N")
// in their process group, so the tests can check it is killed too.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cohortml/cohort/distributed/rendezvous"
)

func main() {
	fmt.Printf("pid %d\n", os.Getpid())
	if len(os.Args) < 2 {
		fatal("usage: worker MODE [ARGS]")
	}
	mode := os.Args[1]
	if mode == "env" {
		for _, k := range []string{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
			"GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "COHORT_STORE_ADDR", "COHORT_TOKEN", "COHORT_RUN_ID",
			"COHORT_RESTART_COUNT", "COHORT_NUM_THREADS", "OMP_NUM_THREADS", "EXTRA"} {
			fmt.Printf("%s=%s\n", k, os.Getenv(k))
		}
		// The CPUs it may run on (Linux) and the Ps it got.
		if b, err := os.ReadFile("/proc/self/status"); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
					fmt.Printf("CPUS=%s\n", strings.TrimSpace(v))
				}
			}
		}
		fmt.Printf("GOMAXPROCS=%d\n", runtime.GOMAXPROCS(0))
	}
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		fatal(err.Error())
	}
	fmt.Printf("info %s\n", info)
	if mode == "env" {
		return
	}
	sctx := context.Background() // the other modes see signals the default way
	if mode == "peerabort" {
		var stop context.CancelFunc
		sctx, stop = rendezvous.SignalContext(sctx)
		defer stop()
	}
	ctx, cancel := context.WithTimeout(sctx, 60*time.Second)
	defer cancel()
	if mode == "slow" && len(os.Args) > 2 {
		ms, _ := strconv.Atoi(os.Args[2])
		time.Sleep(time.Duration(ms) * time.Millisecond)
	}
	st, err := rendezvous.Connect(ctx, info, rendezvous.Options{})
	if err != nil {
		fatal(err.Error())
	}
	switch mode {
	case "exit", "selfkill", "ignoreterm":
		startChild()
	}
	if mode == "ignoreterm" {
		signal.Ignore(syscall.SIGTERM)
	}
	// Barrier: every rank sets its key and waits for all.
	prefix := "test/" + strconv.Itoa(info.RestartCount) + "/"
	if err := st.Set(ctx, prefix+strconv.Itoa(info.Rank), []byte("up")); err != nil {
		fatal(err.Error())
	}
	keys := make([]string, info.WorldSize)
	for r := range keys {
		keys[r] = prefix + strconv.Itoa(r)
	}
	if err := st.Wait(ctx, keys...); err != nil {
		fatal(err.Error())
	}
	fmt.Println("ready")

	arg := func(i int) int {
		if len(os.Args) <= i {
			fatal("missing argument")
		}
		n, err := strconv.Atoi(os.Args[i])
		if err != nil {
			fatal(err.Error())
		}
		return n
	}
	switch mode {
	case "exit", "ignoreterm":
		target, code := arg(2), 3
		if mode == "exit" {
			code = arg(3)
		}
		if info.Rank == target {
			for i := 1; i <= 25; i++ {
				fmt.Fprintf(os.Stderr, "line %d\n", i)
			}
			os.Exit(code)
		}
		time.Sleep(5 * time.Minute)
	case "selfkill":
		if info.Rank == arg(2) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(5 * time.Minute)
	case "signal":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		fmt.Println("waiting")
		sig := <-ch
		fmt.Printf("got %v\n", sig)
	case "stop":
		// rank arg(2) stops at once as after a signal (exit 143); the
		// others, as if they learnt of the stop through the job, finish
		// their step and save (a second), then exit 143 too, unless a
		// signal comes first
		if info.Rank == arg(2) {
			os.Exit(143)
		}
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		select {
		case sig := <-ch:
			fmt.Printf("got %v before saving\n", sig)
		case <-time.After(time.Second):
			fmt.Println("saved")
		}
		os.Exit(143)
	case "restart":
		fmt.Printf("restart %d\n", info.RestartCount)
		if info.Rank == 1 && info.RestartCount == 0 {
			os.Exit(3)
		}
	case "elastic":
		elasticLoop(ctx, st, info)
	case "peerabort":
		peerAbort(sctx, st, info)
	case "slow":
	case "streams":
		fmt.Println("to stdout")
		fmt.Fprintln(os.Stderr, "to stderr")
	case "usage":
		fmt.Fprintln(os.Stderr, "flag provided but not defined: -epoch")
		for i := 1; i <= 30; i++ {
			fmt.Fprintf(os.Stderr, "  -flag%d int\n    \tusage line %d\n", i, i)
		}
		os.Exit(2)
	default:
		fatal("unknown mode " + mode)
	}
	// Rank 0 may serve nothing (the launcher does) but wait so no rank
	// closes the store under another's feet.
	st.Close()
}

func elasticLoop(ctx context.Context, st interface {
	Add(context.Context, string, int64) (int64, error)
}, info rendezvous.Info) {
	if len(os.Args) < 3 {
		fatal("elastic: missing DIR")
	}
	stop := os.Args[2] + "/stop"
	fmt.Printf("ELASTIC round=%s world=%d rank=%d restart=%d telastic=%s run=%s prefix=%s\n", os.Getenv("COHORT_ROUND"),
		info.WorldSize, info.Rank, info.RestartCount, os.Getenv("TORCHELASTIC_RESTART_COUNT"), info.RunID, info.StorePrefix)
	if len(os.Args) > 3 && os.Args[3] == "failonce" && info.Rank == 1 && info.RestartCount == 0 {
		fmt.Fprintln(os.Stderr, "failing once")
		os.Exit(3)
	}
	seen := make([]int64, info.WorldSize)
	changed := make([]time.Time, info.WorldSize)
	for r := range changed {
		changed[r] = time.Now()
	}
	for {
		if _, err := os.Stat(stop); err == nil {
			return
		}
		if _, err := st.Add(ctx, "beat/"+strconv.Itoa(info.Rank), 1); err != nil {
			fatal(err.Error())
		}
		for r := range seen {
			n, err := st.Add(ctx, "beat/"+strconv.Itoa(r), 0)
			if err != nil {
				fatal(err.Error())
			}
			if n != seen[r] {
				seen[r], changed[r] = n, time.Now()
			} else if time.Since(changed[r]) > 1500*time.Millisecond {
				fatal(fmt.Sprintf("peer rank %d lost", r))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func peerAbort(sctx context.Context, st interface {
	Set(context.Context, string, []byte) error
	Get(context.Context, string) ([]byte, error)
}, info rendezvous.Info) {
	told := make(chan string, 1)
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go func() {
		if v, err := st.Get(wctx, "test/abort"); err == nil {
			told <- string(v)
		}
	}()
	fmt.Println("waiting")
	select {
	case <-sctx.Done():
		bg, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st.Set(bg, "test/abort", []byte(strconv.Itoa(info.Rank)))
		time.Sleep(300 * time.Millisecond)
		err := fmt.Errorf("rank %d: all_reduce: cancelled locally: %w", info.Rank, context.Cause(sctx))
		fmt.Fprintln(os.Stderr, "worker:", err)
		code := rendezvous.Fail(sctx, err)
		if len(os.Args) > 2 && os.Args[2] == "code1" {
			code = 1
		}
		os.Exit(code)
	case r := <-told:
		err := fmt.Errorf("rank %d: all_reduce: process group aborted by peer rank %s", info.Rank, r)
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(rendezvous.Fail(sctx, err))
	}
}

func startChild() {
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		fatal(err.Error())
	}
	fmt.Printf("child %d\n", cmd.Process.Pid)
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "worker:", msg)
	os.Exit(2)
}
