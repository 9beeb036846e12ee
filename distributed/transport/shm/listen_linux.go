package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cohortml/cohort/distributed/transport/internal/demux"
	"github.com/cohortml/cohort/distributed/transport/internal/handshake"
	"github.com/cohortml/cohort/distributed/transport/internal/mesh"
)

const protocolLabel = "cohort-shm/1"

// Listener is the first half of setting up a transport: this rank's
// segment and setup socket, whose address the caller publishes.
type Listener struct {
	rank, worldSize int
	opts            Options
	peers           []int // ascending
	seg             *segment
	bell            *bell   // nil: the progress goroutine sleeps on the doorbell futex
	probe           *uint64 // read by peers to test single copy (see probePeer)
	ln              *net.UnixListener
	once            mesh.Once // Connect or Close, once
}

// Listen validates the arguments, creates this rank's segment in
// Options.Dir and starts listening on a Unix-domain socket beside it.
func Listen(ctx context.Context, rank, worldSize int, opts Options) (*Listener, error) {
	peers, err := mesh.CheckListen("shm", rank, worldSize, opts.validate, opts.Peers)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults(len(peers) + 1)
	reclaimStale(opts.Dir, opts.Prefix)
	var pv [8]byte
	if _, err := rand.Read(pv[:]); err != nil {
		return nil, fmt.Errorf("shm: random probe: %w", err)
	}
	probe := new(uint64)
	*probe = binary.LittleEndian.Uint64(pv[:]) | 1
	seg, err := createSegment(opts.Dir, opts.Prefix, rank, worldSize, peers, int(opts.RingBytes), probe)
	if err != nil {
		return nil, err
	}
	var b *bell
	if !opts.noBell {
		if b, err = newBell(seg.path); err != nil { // nil: the doorbell futex serves
			if opts.Logger != nil {
				opts.Logger.Debug("shm: no doorbell FIFO; the progress goroutine sleeps on a futex", "rank", rank, "err", err)
			}
		} else {
			atomic.StoreUint32(seg.bellFIFO(), 1)
		}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", seg.path+".sock")
	if err != nil {
		b.unlink()
		b.close()
		seg.unlink()
		seg.unmap()
		return nil, fmt.Errorf("shm: rank %d: listen: %w", rank, err)
	}
	return &Listener{rank: rank, worldSize: worldSize, opts: opts, peers: peers, seg: seg, bell: b, probe: probe, ln: ln.(*net.UnixListener)}, nil
}

// Addr returns the address to publish to the other ranks: the segment's
// path.
func (l *Listener) Addr() string { return l.seg.path }

// Close removes the segment and socket; needed only if Connect is never
// called.
func (l *Listener) Close() error {
	if !l.once.Use() {
		return nil
	}
	l.ln.Close()
	l.bell.unlink()
	l.bell.close()
	err := l.seg.unlink()
	l.seg.unmap()
	return err
}

// Connect maps every peer's segment (every other rank's unless
// Options.Peers says otherwise), given every rank's published address
// (peerAddrs[r] is rank r's; the entries of this rank and of ranks that
// are not peers are ignored), connects the liveness sockets (dialling the
// lower peers, accepting the higher ones, authenticating each) and
// returns the transport. It fails, naming
// the missing ranks, if ctx ends first or a peer's segment or socket is
// unusable. The segment and socket files are removed when Connect
// returns, whether it succeeds or not.
func (l *Listener) Connect(ctx context.Context, peerAddrs []string) (*Transport, error) {
	if !l.once.Use() {
		return nil, fmt.Errorf("shm: rank %d: Connect called on a used or closed listener", l.rank)
	}
	ok := false
	segs := make([]*segment, l.worldSize)
	bells := make([]int, l.worldSize) // peers' doorbell FIFOs, or -1
	for i := range bells {
		bells[i] = -1
	}
	defer func() {
		l.ln.Close()
		l.seg.unlink()
		l.bell.unlink()
		if !ok {
			l.bell.close()
			l.seg.unmap()
			for _, s := range segs {
				if s != nil {
					s.unmap()
				}
			}
			for _, fd := range bells {
				if fd >= 0 {
					unix.Close(fd)
				}
			}
		}
	}()
	if len(peerAddrs) != l.worldSize {
		return nil, fmt.Errorf("shm: rank %d: %d peer addresses for world size %d", l.rank, len(peerAddrs), l.worldSize)
	}
	// Map every peer's segment before any handshake: once all handshakes
	// are done, every peer has mapped this rank's segment, and its file
	// can go.
	for _, r := range l.peers {
		addr := peerAddrs[r]
		if addr == "" {
			return nil, fmt.Errorf("shm: rank %d: no address for rank %d", l.rank, r)
		}
		s, err := openSegment(addr, r, l.worldSize, l.rank)
		if err != nil {
			return nil, fmt.Errorf("shm: rank %d: %w", l.rank, err)
		}
		segs[r] = s
		if atomic.LoadUint32(s.bellFIFO()) == 1 {
			if bells[r], err = openPeerBell(addr); err != nil {
				return nil, fmt.Errorf("shm: rank %d: rank %d's progress goroutine sleeps on a FIFO this rank cannot open: %w", l.rank, r, err)
			}
		}
		// Tell r whether this rank can read its memory (single copy);
		// r reads the answer once the handshake is done.
		cma := uint32(0)
		if l.opts.RendezvousBytes > 0 && probePeer(s) {
			cma = 1
		}
		atomic.StoreUint32(l.seg.slot(r).cma, cma)
	}
	conns, err := mesh.Connect(ctx, mesh.Config{
		Handshake: handshake.Config{Label: protocolLabel, Token: l.opts.Token, Rank: l.rank, WorldSize: l.worldSize},
		Peers:     l.peers,
		Listener:  l.ln,
		Dial: func(ctx context.Context, peer int) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", peerAddrs[peer]+".sock")
		},
		HandshakeTimeout: l.opts.HandshakeTimeout,
		Logger:           l.opts.Logger,
		Name:             "shm",
	})
	if err != nil {
		return nil, err
	}
	t := &Transport{
		rank: l.rank, size: l.worldSize, opts: l.opts, own: l.seg, bell: l.bell, probe: l.probe, pid: os.Getpid(), epoch: time.Now(),
		peers: make([]*peer, l.worldSize), self: demux.New(l.rank), pollerDone: make(chan struct{}),
	}
	for r, c := range conns {
		if c == nil {
			continue
		}
		s := segs[r]
		t.peers[r] = &peer{
			t: t, rank: r, seg: s,
			out:          s.slot(l.rank),
			peerDoorbell: s.doorbell(),
			peerSleeping: s.sleeping(),
			peerBell:     bells[r],
			in:           l.seg.slot(r),
			box:          demux.New(r),
			conn:         c,
			readerDone:   make(chan struct{}),
		}
	}
	t.chooseWaitNow()
	ok = true
	for _, p := range t.peers {
		if p != nil {
			go p.readLoop()
		}
	}
	go t.poll()
	return t, nil
}
