package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/distributed/store/memstore"
	"github.com/cohortml/cohort/distributed/store/tcpstore"
)

// Options configures Connect. The zero value works.
type Options struct {
	// ListenAddr is where rank 0 serves the store. The default is
	// MasterAddr:MasterPort when MasterAddr is a loopback address (a
	// single-host job), else ":MasterPort" (every interface: other hosts
	// must reach it; the token guards it).
	ListenAddr string
	// MaxFrameBytes bounds one store message (tcpstore.Options).
	MaxFrameBytes int64
	// Logger receives progress (Debug), slow-rendezvous notices (Info)
	// and the store server's log. nil means slog.Default().
	Logger *slog.Logger
}

// Connect returns the job's store:
//
//   - info.StoreAddr set (a launcher serves the store): every rank dials it,
//     and sees it through info.StorePrefix (WithPrefix) when that is set;
//   - a world of 1 with no StoreAddr: an in-process memstore;
//   - otherwise rank 0 serves a tcpstore on ListenAddr (see Options) and
//     every rank, rank 0 included, dials MasterAddr:MasterPort.
//
// A Slurm node name that is not in DNS is first replaced by its NodeAddr
// (ResolveMaster); when neither is found Connect fails within seconds.
// Dialing is retried with backoff until it succeeds or ctx ends, so ranks
// may start in any order; bound ctx (a few minutes) to turn a missing
// rank 0 into an error. A refused token is not retried. On rank 0 the
// returned store owns the server: closing it stops the store for every
// rank, so rank 0 should close it last (after a final barrier).
func Connect(ctx context.Context, info Info, opts Options) (store.Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	topts := tcpstore.Options{Token: info.Token, MaxFrameBytes: opts.MaxFrameBytes, Logger: log}
	if info.StoreAddr != "" {
		c, err := dialRank(ctx, info, info.StoreAddr, topts, log)
		if err != nil {
			return nil, err
		}
		return WithPrefix(c, info.StorePrefix), nil
	}
	if info.WorldSize <= 1 {
		return memstore.New(), nil
	}
	info, err := ResolveMaster(ctx, info, Resolver{})
	if err != nil {
		return nil, err
	}
	if info.MasterAddr == "" || info.MasterPort <= 0 || info.MasterPort > 65535 {
		return nil, fmt.Errorf("rendezvous: rank %d of %d: no store address: MasterAddr %q, MasterPort %d", info.Rank, info.WorldSize, info.MasterAddr, info.MasterPort)
	}
	addr := net.JoinHostPort(info.MasterAddr, strconv.Itoa(info.MasterPort))
	if info.Rank != 0 {
		return dialRank(ctx, info, addr, topts, log)
	}
	listen := opts.ListenAddr
	if listen == "" {
		listen = ":" + strconv.Itoa(info.MasterPort)
		if isLoopback(info.MasterAddr) {
			listen = addr
		}
	}
	srv, err := tcpstore.Listen(listen, topts)
	if err != nil {
		return nil, fmt.Errorf("rendezvous: rank 0 cannot serve the store (another job on this host using MASTER_PORT=%d?): %w", info.MasterPort, err)
	}
	c, err := dialRank(ctx, info, addr, topts, log)
	if err != nil {
		srv.Close()
		return nil, err
	}
	return &hosted{Client: c, srv: srv}, nil
}

// hosted is rank 0's store: a client of the server it owns.
type hosted struct {
	*tcpstore.Client
	srv *tcpstore.Server
}

func (h *hosted) Close() error {
	err := h.Client.Close()
	if serr := h.srv.Close(); err == nil {
		err = serr
	}
	return err
}

// Dial connects to the store served at addr ("host:port"), retrying with
// backoff until it succeeds, the server refuses token (an error wrapping
// tcpstore.ErrAuth, not retried) or ctx ends (an error wrapping ctx.Err()
// with the last dial error). Launchers use it to reach node 0's store.
func Dial(ctx context.Context, addr, token string, opts Options) (store.Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	c, err := dialRetry(ctx, addr, tcpstore.Options{Token: token, MaxFrameBytes: opts.MaxFrameBytes, Logger: log}, log)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// dialRank is dialRetry with errors naming the rank.
func dialRank(ctx context.Context, info Info, addr string, opts tcpstore.Options, log *slog.Logger) (*tcpstore.Client, error) {
	c, err := dialRetry(ctx, addr, opts, log.With("rank", info.Rank))
	if err != nil {
		hint := ""
		if !errors.Is(err, tcpstore.ErrAuth) {
			hint = " (is rank 0 running, and are MASTER_ADDR/MASTER_PORT right?)"
			if info.StoreAddr != "" {
				hint = " (is the launcher serving COHORT_STORE_ADDR still running?)"
			}
		}
		return nil, fmt.Errorf("rendezvous: rank %d of %d%s: %w", info.Rank, info.WorldSize, hint, err)
	}
	return c, nil
}

// dialRetry dials addr until it succeeds, authentication fails or ctx ends.
func dialRetry(ctx context.Context, addr string, opts tcpstore.Options, log *slog.Logger) (*tcpstore.Client, error) {
	const (
		firstBackoff = 10 * time.Millisecond
		maxBackoff   = time.Second
		notice       = 10 * time.Second
	)
	start := time.Now()
	lastNotice := start
	backoff := firstBackoff
	for attempt := 1; ; attempt++ {
		c, err := tcpstore.Dial(ctx, addr, opts)
		if err == nil {
			log.Debug("rendezvous: connected to store", "addr", addr, "attempts", attempt)
			return c, nil
		}
		if errors.Is(err, tcpstore.ErrAuth) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no store at %s after %v and %d attempts: %w; last error: %v",
				addr, time.Since(start).Round(time.Millisecond), attempt, ctx.Err(), err)
		}
		if time.Since(lastNotice) >= notice {
			log.Info("rendezvous: still waiting for the store", "addr", addr, "waited", time.Since(start).Round(time.Second), "err", err)
			lastNotice = time.Now()
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// isLoopback reports whether host is "localhost" or a loopback IP.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
