package multihost

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/launch/launchtest"
)

// cmdTimeout bounds every ip/tc invocation.
const cmdTimeout = 20 * time.Second

// sh runs a command (ip, tc) in the current namespace and returns its
// combined output; the error names the command and includes the output.
func sh(name string, args ...string) (string, error) {
	return launchtest.Run(cmdTimeout, nil, name, args...)
}

// namespaces lists the network namespaces whose names start with prefix.
func namespaces(prefix string) ([]string, error) {
	out, err := sh("ip", "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(out, "\n") {
		// "NAME" or "NAME (id: N)"
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// deleteNamespaces removes every namespace named with prefix and returns
// the errors met.
func deleteNamespaces(prefix string) error {
	names, err := namespaces(prefix)
	if err != nil {
		return err
	}
	var errs []string
	for _, ns := range names {
		if _, err := sh("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// canCreateNamespaces reports why this process cannot create network
// namespaces ("" when it can), trying one under probe.
func canCreateNamespaces(probe string) string {
	if os.Geteuid() != 0 {
		return fmt.Sprintf("running as uid %d, not root", os.Geteuid())
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("%s (iproute2) not found: %v", tool, err)
		}
	}
	if _, err := sh("ip", "netns", "add", probe); err != nil {
		return err.Error()
	}
	if _, err := sh("ip", "netns", "del", probe); err != nil {
		return err.Error()
	}
	return ""
}

// host is one simulated machine: a namespace whose eth0 has ip.
type host struct {
	ns string
	ip string
}

// topology is a set of hosts joined by a bridge in a hub namespace:
//
//	hub namespace:  br0 ── v0 ┐   ┌ v1 ── …
//	                          │   │
//	host i:             eth0 = subnet.(i+1)/24
//
// The veth pairs are created with both ends inside the namespaces, so
// the initial namespace never holds an interface or a route of the
// topology; no namespace has a default route.
type topology struct {
	prefix string
	hub    string
	hosts  []host
}

// newTopology builds n hosts named prefix+"h0"… on subnet ("10.214.7")
// and registers its removal (namespaces, and with them every interface
// and qdisc) with t.Cleanup, also when the build fails halfway.
func newTopology(t *testing.T, prefix, subnet string, n int) *topology {
	t.Helper()
	tp := &topology{prefix: prefix, hub: prefix + "hub"}
	t.Cleanup(func() {
		if err := deleteNamespaces(prefix); err != nil {
			t.Errorf("removing namespaces %s*: %v", prefix, err)
		}
		if left, err := namespaces(prefix); err != nil || len(left) > 0 {
			t.Errorf("namespaces left after teardown: %v (%v)", left, err)
		}
	})
	run := func(args ...string) {
		t.Helper()
		if _, err := sh("ip", args...); err != nil {
			t.Fatalf("building the topology: %v", err)
		}
	}
	run("netns", "add", tp.hub)
	run("-n", tp.hub, "link", "set", "lo", "up")
	run("-n", tp.hub, "link", "add", "br0", "type", "bridge")
	run("-n", tp.hub, "link", "set", "br0", "up")
	for i := range n {
		h := host{ns: fmt.Sprintf("%sh%d", prefix, i), ip: fmt.Sprintf("%s.%d", subnet, i+1)}
		port := fmt.Sprintf("v%d", i)
		run("netns", "add", h.ns)
		run("link", "add", "eth0", "netns", h.ns, "type", "veth", "peer", "name", port, "netns", tp.hub)
		run("-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
		run("-n", h.ns, "link", "set", "lo", "up")
		run("-n", h.ns, "link", "set", "eth0", "up")
		run("-n", tp.hub, "link", "set", port, "master", "br0", "up")
		if out, err := sh("ip", "-n", h.ns, "route", "show", "default"); err != nil || strings.TrimSpace(out) != "" {
			t.Fatalf("host %s must have no default route, has %q (%v)", h.ns, out, err)
		}
		tp.hosts = append(tp.hosts, h)
	}
	return tp
}

// rateLimit shapes host i's outgoing traffic with a token bucket
// (tc tbf). The qdisc goes away with the namespace.
func (tp *topology) rateLimit(i int, rate string) error {
	_, err := sh("ip", "netns", "exec", tp.hosts[i].ns, "tc", "qdisc", "add", "dev", "eth0", "root",
		"tbf", "rate", rate, "burst", "64kb", "latency", "50ms")
	return err
}
