package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"
)

// Resolver finds a dialable address for a node name. Slurm names nodes
// (node0, cn[01-64]) that are often not in DNS or /etc/hosts: the cluster
// knows them from slurm.conf (NodeAddr), which scontrol reports. The zero
// value uses the system resolver and scontrol.
type Resolver struct {
	// LookupHost resolves a name (DNS, /etc/hosts); nil means
	// net.DefaultResolver.LookupHost.
	LookupHost func(ctx context.Context, host string) ([]string, error)
	// NodeAddr returns Slurm's NodeAddr for a node; nil means running
	// `scontrol -o show node NAME`.
	NodeAddr func(ctx context.Context, node string) (string, error)
	// LookupTimeout bounds each of the two; 0 means 3 s.
	LookupTimeout time.Duration
}

// ErrUnresolved is wrapped by Resolve's error when no address was found.
var ErrUnresolved = errors.New("rendezvous: cannot find the node's address")

// Resolve returns host itself when it is an IP address or the system
// resolver knows it, else Slurm's NodeAddr for it. It fails within about
// twice LookupTimeout, naming host and what was tried.
func (r Resolver) Resolve(ctx context.Context, host string) (string, error) {
	if host == "" || net.ParseIP(host) != nil {
		return host, nil
	}
	timeout := r.LookupTimeout
	if timeout == 0 {
		timeout = 3 * time.Second
	}
	lookup := r.LookupHost
	if lookup == nil {
		lookup = net.DefaultResolver.LookupHost
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	addrs, lerr := lookup(lctx, host)
	cancel()
	if lerr == nil && len(addrs) > 0 {
		return host, nil
	}
	if lerr == nil {
		lerr = errors.New("no addresses")
	}
	nodeAddr := r.NodeAddr
	if nodeAddr == nil {
		nodeAddr = scontrolNodeAddr
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	addr, serr := nodeAddr(sctx, host)
	cancel()
	if serr == nil && addr != "" && addr != host {
		if net.ParseIP(addr) != nil {
			return addr, nil
		}
		// NodeAddr may itself be a name; it must resolve.
		lctx, cancel := context.WithTimeout(ctx, timeout)
		addrs, err := lookup(lctx, addr)
		cancel()
		if err == nil && len(addrs) > 0 {
			return addr, nil
		}
		serr = fmt.Errorf("its NodeAddr %q does not resolve either: %v", addr, err)
	} else if serr == nil {
		serr = errors.New("no NodeAddr other than the name")
	}
	return "", fmt.Errorf("%w: %q: the resolver says %v; scontrol show node %s: %v (set MASTER_ADDR, or --master-addr, to its IP address)",
		ErrUnresolved, host, lerr, host, serr)
}

// scontrolNodeAddr asks Slurm for node's NodeAddr.
func scontrolNodeAddr(ctx context.Context, node string) (string, error) {
	path, err := exec.LookPath("scontrol")
	if err != nil {
		return "", fmt.Errorf("scontrol not found: %w", err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "-o", "show", "node", node)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(errOut.String()+" "+out.String()))
	}
	return parseNodeAddr(out.String())
}

// parseNodeAddr reads NodeAddr=… from `scontrol -o show node` output.
func parseNodeAddr(out string) (string, error) {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "NodeAddr="); ok && v != "" {
			return v, nil
		}
	}
	return "", fmt.Errorf("no NodeAddr in %q", strings.TrimSpace(out))
}

// ResolveMaster returns info with a Slurm-derived MasterAddr (the first
// host of the node list, a name) replaced by an address every task can
// dial (see Resolver.Resolve): a node name that is not in DNS would
// otherwise make every rank wait out its timeout. Other sources are
// returned as they are: a Kubernetes pod's name, for one, may resolve
// only once the pod runs, so dialing retries instead.
func ResolveMaster(ctx context.Context, info Info, r Resolver) (Info, error) {
	if info.Source != Slurm || info.MasterAddr == "" || info.WorldSize <= 1 {
		return info, nil
	}
	addr, err := r.Resolve(ctx, info.MasterAddr)
	if err != nil {
		return info, fmt.Errorf("rendezvous: rank %d: rank 0's host: %w", info.Rank, err)
	}
	info.MasterAddr = addr
	return info, nil
}
