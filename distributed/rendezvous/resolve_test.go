package rendezvous

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	notFound := func(context.Context, string) ([]string, error) { return nil, errors.New("no such host") }
	hosts := func(known ...string) func(context.Context, string) ([]string, error) {
		return func(_ context.Context, h string) ([]string, error) {
			for _, k := range known {
				if k == h {
					return []string{"192.0.2.1"}, nil
				}
			}
			return nil, errors.New("no such host")
		}
	}
	slurm := func(addr string, err error) func(context.Context, string) (string, error) {
		return func(context.Context, string) (string, error) { return addr, err }
	}
	tests := []struct {
		name    string
		host    string
		r       Resolver
		want    string
		wantErr string
	}{
		{"ip", "10.213.0.1", Resolver{LookupHost: notFound, NodeAddr: slurm("", errors.New("unused"))}, "10.213.0.1", ""},
		{"in-dns", "cn01", Resolver{LookupHost: hosts("cn01"), NodeAddr: slurm("", errors.New("unused"))}, "cn01", ""},
		{"slurm-nodeaddr", "node0", Resolver{LookupHost: notFound, NodeAddr: slurm("10.213.0.1", nil)}, "10.213.0.1", ""},
		{"slurm-nodeaddr-name", "node0", Resolver{LookupHost: hosts("node0-ib"), NodeAddr: slurm("node0-ib", nil)}, "node0-ib", ""},
		{"nodeaddr-is-name", "node0", Resolver{LookupHost: notFound, NodeAddr: slurm("node0", nil)}, "", `"node0": the resolver says no such host; scontrol show node node0: no NodeAddr other than the name`},
		{"no-scontrol", "node0", Resolver{LookupHost: notFound, NodeAddr: slurm("", errors.New("scontrol not found"))}, "", "scontrol not found"},
		{"nodeaddr-unresolvable", "node0", Resolver{LookupHost: notFound, NodeAddr: slurm("node0-ib", nil)}, "", `NodeAddr "node0-ib" does not resolve`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.r.Resolve(context.Background(), tc.host)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrUnresolved) || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "MASTER_ADDR") {
					t.Fatalf("Resolve = %q, %v; want ErrUnresolved containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Resolve = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestResolveBounded: a resolver that hangs (DNS unreachable) costs at
// most the lookup timeout, twice, never the join timeout.
func TestResolveBounded(t *testing.T) {
	hang := func(ctx context.Context, _ string) ([]string, error) { <-ctx.Done(); return nil, ctx.Err() }
	hangNode := func(ctx context.Context, _ string) (string, error) { <-ctx.Done(); return "", ctx.Err() }
	start := time.Now()
	_, err := Resolver{LookupHost: hang, NodeAddr: hangNode, LookupTimeout: 50 * time.Millisecond}.Resolve(context.Background(), "node0")
	if !errors.Is(err, ErrUnresolved) || time.Since(start) > 2*time.Second {
		t.Fatalf("Resolve = %v after %v; want ErrUnresolved within about 100 ms", err, time.Since(start))
	}
}

func TestParseNodeAddr(t *testing.T) {
	out := "NodeName=node0 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.213.0.1 NodeHostName=node0 Version=22.05.8\n"
	if a, err := parseNodeAddr(out); err != nil || a != "10.213.0.1" {
		t.Fatalf("parseNodeAddr = %q, %v", a, err)
	}
	if _, err := parseNodeAddr("Node node9 not found\n"); err == nil {
		t.Fatal("parseNodeAddr of a missing node: want an error")
	}
}

func TestResolveMaster(t *testing.T) {
	r := Resolver{LookupHost: func(context.Context, string) ([]string, error) { return nil, errors.New("no such host") },
		NodeAddr: func(context.Context, string) (string, error) { return "10.213.0.1", nil }}
	in := Info{Source: Slurm, Rank: 2, WorldSize: 4, MasterAddr: "node0", MasterPort: 10040}
	got, err := ResolveMaster(context.Background(), in, r)
	if err != nil || got.MasterAddr != "10.213.0.1" {
		t.Fatalf("ResolveMaster = %+v, %v", got, err)
	}
	k8s := Info{Source: IndexedJob, Rank: 1, WorldSize: 2, MasterAddr: "job-0.svc", MasterPort: 29500}
	if got, err := ResolveMaster(context.Background(), k8s, r); err != nil || got != k8s {
		t.Fatalf("ResolveMaster changed a non-Slurm info: %+v, %v", got, err)
	}
}
