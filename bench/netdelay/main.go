package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command: it serves until ctx ends and returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("netdelay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var r Relay
	listen := fs.String("listen", ":15001", "address to accept connections on")
	fs.DurationVar(&r.Delay, "delay", 2*time.Millisecond, "one-way delay added to each direction")
	fs.StringVar(&r.Upstream, "upstream", "", "relay every connection here (default: its original destination, after a netfilter redirect)")
	fs.IntVar(&r.QueueBytes, "queue", DefaultQueueBytes, "bytes of one direction held at most (at least rate × delay)")
	fs.IntVar(&r.ChunkBytes, "chunk", DefaultChunkBytes, "bytes read at most at a time")
	fs.DurationVar(&r.DialTimeout, "dial-timeout", DefaultDialTime, "bound on dialling a destination")
	verbose := fs.Bool("v", false, "report connections that end with an error")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "netdelay: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *verbose {
		r.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	}
	if err := r.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "netdelay: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "netdelay: listening on %s, delay %v each way\n", ln.Addr(), r.Delay)
	if err := r.Serve(ctx, ln); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
