// Command worker is the program the multi-host tests start under
// `cohort run` in each network namespace. It joins the job with
// distributed.InitFromEnv and, depending on --mode:
//
//	check  verifies RANK/WORLD_SIZE/LOCAL_RANK against the group and the
//	       expected world, runs all-reduce, all-gather and broadcast over
//	       several sizes and compares every element exactly, reports which
//	       connections this process holds (TCP sockets, shared file
//	       mappings), optionally times a large all-reduce, and prints OK.
//	loop   all-reduces and verifies a buffer over and over until the group
//	       fails (then it exits 1) or --loop-for has passed or --stop-file
//	       exists (exit 0).
//
// Every report is one stdout line starting with a keyword (READY, SOCKETS,
// SHM, BENCH, LOOPING, OK) followed by key=value fields, which the tests
// parse from the launcher's "[rank N] " prefixed output.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native and MPI backends
)

func main() {
	var (
		mode       = flag.String("mode", "check", "check or loop")
		world      = flag.Int("world", 0, "expected WORLD_SIZE (0: do not check)")
		benchBytes = flag.Int64("bench-bytes", 0, "time an all-reduce of this many bytes (check mode; 0: none)")
		benchIters = flag.Int("bench-iters", 3, "timed all-reduces after one warm-up")
		loopFor    = flag.Duration("loop-for", time.Minute, "loop mode: stop after this long")
		stopFile   = flag.String("stop-file", "", "loop mode: also stop (exit 0) once this file exists")
		timeout    = flag.Duration("timeout", 2*time.Minute, "bound on the whole run")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	switch *mode {
	case "check":
		err = check(ctx, *world, *benchBytes, *benchIters)
	case "loop":
		err = loop(ctx, *loopFor, *stopFile)
	default:
		err = fmt.Errorf("unknown --mode %q (want check or loop)", *mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker: %v\n", err)
		os.Exit(1)
	}
}

// envInts reads integer variables the launcher must have set.
func envInts(names ...string) ([]int, error) {
	ns := make([]int, len(names))
	for i, name := range names {
		v := os.Getenv(name)
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", name, v, err)
		}
		ns[i] = n
	}
	return ns, nil
}

// join connects to the job and checks the launcher's variables against the
// group it got.
func join(ctx context.Context, world int) (distributed.ProcessGroup, error) {
	v, err := envInts("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")
	if err != nil {
		return nil, err
	}
	rank, size, local, localSize, node := v[0], v[1], v[2], v[3], v[4]
	if world > 0 && size != world {
		return nil, fmt.Errorf("WORLD_SIZE=%d, want %d", size, world)
	}
	if rank != node*localSize+local {
		return nil, fmt.Errorf("RANK=%d but NODE_RANK=%d, LOCAL_WORLD_SIZE=%d, LOCAL_RANK=%d", rank, node, localSize, local)
	}
	pg, err := distributed.InitFromEnv(ctx)
	if err != nil {
		return nil, err
	}
	if pg.Rank() != rank || pg.Size() != size {
		pg.Close()
		return nil, fmt.Errorf("group is rank %d of %d, environment says %d of %d", pg.Rank(), pg.Size(), rank, size)
	}
	fmt.Printf("READY rank=%d pid=%d node=%d local=%d\n", rank, os.Getpid(), node, local)
	return pg, nil
}

// sizes are the element counts every collective is checked at.
var sizes = []int{0, 1, 1000, 1<<20 + 3}

func check(ctx context.Context, world int, benchBytes int64, benchIters int) (err error) {
	pg, err := join(ctx, world)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := pg.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	rank := pg.Rank()
	for _, n := range sizes {
		if err := checkAllReduce(ctx, pg, n); err != nil {
			return err
		}
		if err := checkAllGather(ctx, pg, n); err != nil {
			return err
		}
		for _, root := range []int{0, pg.Size() - 1} {
			if err := checkBroadcast(ctx, pg, n, root); err != nil {
				return err
			}
		}
	}
	if benchBytes > 0 {
		med, err := bench(ctx, pg, int(benchBytes/4), benchIters)
		if err != nil {
			return err
		}
		fmt.Printf("BENCH rank=%d bytes=%d iters=%d seconds=%.6f\n", rank, benchBytes/4*4, benchIters, med.Seconds())
	}
	// Every rank holds all its connections until every rank has looked.
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return fmt.Errorf("barrier before inspection: %w", err)
	}
	socks, err := tcpSockets()
	if err != nil {
		return err
	}
	maps, err := sharedMappings()
	if err != nil {
		return err
	}
	fmt.Printf("SOCKETS rank=%d tcp=%s\n", rank, strings.Join(socks, ","))
	fmt.Printf("SHM rank=%d maps=%s\n", rank, strings.Join(maps, ","))
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return fmt.Errorf("barrier after inspection: %w", err)
	}
	fmt.Printf("OK rank=%d\n", rank)
	return nil
}

// Every value below is an integer under 2^24, so float32 holds it and any
// sum of them exactly, whatever order the ranks add in.

func checkAllReduce(ctx context.Context, pg distributed.ProcessGroup, n int) error {
	w, r := pg.Size(), pg.Rank()
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = float32((r + 1) * (i%1021 + 1))
	}
	if err := pg.AllReduce(ctx, distributed.F32(buf), distributed.Sum).Wait(); err != nil {
		return fmt.Errorf("all-reduce sum n=%d: %w", n, err)
	}
	ranks := w * (w + 1) / 2
	for i, v := range buf {
		if want := float32(ranks * (i%1021 + 1)); v != want {
			return fmt.Errorf("all-reduce sum n=%d: element %d = %v, want %v", n, i, v, want)
		}
	}
	for i := range buf {
		buf[i] = float32((r*7919 + i) % 100003)
	}
	if err := pg.AllReduce(ctx, distributed.F32(buf), distributed.Max).Wait(); err != nil {
		return fmt.Errorf("all-reduce max n=%d: %w", n, err)
	}
	for i, v := range buf {
		want := float32(0)
		for q := range w {
			want = max(want, float32((q*7919+i)%100003))
		}
		if v != want {
			return fmt.Errorf("all-reduce max n=%d: element %d = %v, want %v", n, i, v, want)
		}
	}
	return nil
}

func checkAllGather(ctx context.Context, pg distributed.ProcessGroup, n int) error {
	w, r := pg.Size(), pg.Rank()
	in := make([]float32, n)
	for i := range in {
		in[i] = float32(r*100000 + i%65521)
	}
	out := make([]float32, w*n)
	if err := pg.AllGather(ctx, distributed.F32(out), distributed.F32(in)).Wait(); err != nil {
		return fmt.Errorf("all-gather n=%d: %w", n, err)
	}
	for q := range w {
		for i, v := range out[q*n : (q+1)*n] {
			if want := float32(q*100000 + i%65521); v != want {
				return fmt.Errorf("all-gather n=%d: rank %d's element %d = %v, want %v", n, q, i, v, want)
			}
		}
	}
	return nil
}

func checkBroadcast(ctx context.Context, pg distributed.ProcessGroup, n, root int) error {
	buf := make([]float32, n)
	for i := range buf {
		buf[i] = float32(pg.Rank()*1000003 + i%8191) // differs on every rank
	}
	if err := pg.Broadcast(ctx, distributed.F32(buf), root).Wait(); err != nil {
		return fmt.Errorf("broadcast n=%d root=%d: %w", n, root, err)
	}
	for i, v := range buf {
		if want := float32(root*1000003 + i%8191); v != want {
			return fmt.Errorf("broadcast n=%d root=%d: element %d = %v, want %v", n, root, i, v, want)
		}
	}
	return nil
}

// bench returns the median time of iters all-reduces of n float32s, each
// started together after a barrier, following one warm-up.
func bench(ctx context.Context, pg distributed.ProcessGroup, n, iters int) (time.Duration, error) {
	buf := make([]float32, n)
	times := make([]time.Duration, 0, iters)
	for it := range iters + 1 {
		if err := pg.Barrier(ctx).Wait(); err != nil {
			return 0, fmt.Errorf("bench barrier: %w", err)
		}
		start := time.Now()
		if err := pg.AllReduce(ctx, distributed.F32(buf), distributed.Sum).Wait(); err != nil {
			return 0, fmt.Errorf("bench all-reduce of %d bytes: %w", 4*n, err)
		}
		if it > 0 {
			times = append(times, time.Since(start))
		}
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

func loop(ctx context.Context, loopFor time.Duration, stopFile string) (err error) {
	pg, err := join(ctx, 0)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := pg.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	const n = 1 << 16
	buf := make([]float32, n)
	end := time.Now().Add(loopFor)
	ranks := float32(pg.Size() * (pg.Size() + 1) / 2)
	for it := 0; time.Now().Before(end); it++ {
		if stopFile != "" && it%16 == 0 {
			if _, err := os.Stat(stopFile); err == nil {
				break
			}
		}
		for i := range buf {
			buf[i] = float32(pg.Rank() + 1)
		}
		if err := pg.AllReduce(ctx, distributed.F32(buf), distributed.Sum).Wait(); err != nil {
			return fmt.Errorf("rank %d: all-reduce iteration %d: %w", pg.Rank(), it, err)
		}
		for i, v := range buf {
			if v != ranks {
				return fmt.Errorf("rank %d: all-reduce iteration %d: element %d = %v, want %v", pg.Rank(), it, i, v, ranks)
			}
		}
		if it == 0 {
			fmt.Printf("LOOPING rank=%d pid=%d world=%d round=%s restart=%s\n", pg.Rank(), os.Getpid(), pg.Size(),
				os.Getenv("COHORT_ROUND"), os.Getenv("COHORT_RESTART_COUNT"))
		}
	}
	return nil
}

// tcpSockets lists this process's established TCP connections as
// "local>remote" (IPv4-mapped IPv6 addresses written as IPv4), read from
// /proc: the sockets among this process's descriptors, looked up in its
// network namespace's connection tables.
func tcpSockets() ([]string, error) {
	inodes, err := socketInodes()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(table)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
			if len(fields) < 10 || fields[3] != "01" || !inodes[fields[9]] {
				continue
			}
			local, err1 := procAddr(fields[1])
			remote, err2 := procAddr(fields[2])
			if err := errors.Join(err1, err2); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", table, err)
			}
			out = append(out, local+">"+remote)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", table, err)
		}
	}
	slices.Sort(out)
	return out, nil
}

// socketInodes returns the inode numbers of this process's sockets.
func socketInodes() (map[string]bool, error) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	inodes := make(map[string]bool)
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue // closed meanwhile (the directory's own descriptor, say)
		}
		if ino, ok := strings.CutPrefix(l, "socket:["); ok {
			inodes[strings.TrimSuffix(ino, "]")] = true
		}
	}
	return inodes, nil
}

// procAddr decodes /proc/net/tcp's "HEXADDR:HEXPORT"; the address is the
// kernel's in-memory bytes, 32-bit words in host (little-endian) order.
func procAddr(s string) (string, error) {
	h, p, ok := strings.Cut(s, ":")
	port, err := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || (len(h) != 8 && len(h) != 32) {
		return "", fmt.Errorf("bad address %q", s)
	}
	ip := make(net.IP, len(h)/2)
	for w := 0; w < len(h)/8; w++ {
		v, err := strconv.ParseUint(h[8*w:8*w+8], 16, 32)
		if err != nil {
			return "", fmt.Errorf("bad address %q", s)
		}
		ip[4*w], ip[4*w+1], ip[4*w+2], ip[4*w+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(port))), nil
}

// sharedMappings lists the files this process has mapped shared
// ("major:minor:inode"), which is how shared-memory transports reach a peer:
// two processes mapping the same file share memory.
func sharedMappings() ([]string, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := make(map[string]bool)
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode [path]
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || len(fields[1]) < 4 || fields[1][3] != 's' || fields[4] == "0" {
			continue
		}
		key := fields[3] + ":" + fields[4]
		if !seen[key] {
			seen[key] = true
			out = append(out, key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}
