package tcp

import (
	"os"
	"strings"
	"testing"
)

// TestCongestion: Options.Congestion sets every connection's congestion
// control; the default replaces BBR with cubic on loopback (these
// connections) and keeps anything else; a name the kernel lacks fails
// Connect, naming it.
func TestCongestion(t *testing.T) {
	avail, err := os.ReadFile(procTCP + "tcp_available_congestion_control")
	if err != nil {
		t.Skipf("no congestion control list: %v", err)
	}
	sys := systemCongestion()
	auto := sys
	if sys == "bbr" {
		auto = "cubic"
	}
	cases := []struct{ opt, want string }{{"", auto}, {CongestionSystem, sys}}
	if strings.Contains(" "+string(avail)+" ", " reno ") {
		cases = append(cases, struct{ opt, want string }{"reno", "reno"})
	}
	for _, tc := range cases {
		w := connectWith(t, 3, Options{Congestion: tc.opt})
		for r, tr := range w.Transports {
			for p, l := range tr.(*Transport).links {
				if l == nil {
					continue
				}
				got, err := congestionOf(l.conn)
				if err != nil || got != tc.want {
					t.Errorf("Congestion %q: rank %d's link to %d uses %q (%v), want %q", tc.opt, r, p, got, err, tc.want)
				}
			}
		}
		for _, tr := range w.Transports {
			tr.Close()
		}
	}
	ts, errs := connectWorld(t, 2, func(int) Options { return Options{Token: []byte("t"), Congestion: "nosuch"} })
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), `"nosuch"`) {
			t.Errorf("rank %d: Congestion nosuch: %v, want an error naming it", r, err)
		}
		if ts[r] != nil {
			ts[r].Close()
		}
	}
}

// TestAutoCongestion: the default trades BBR for cubic on loopback
// connections only.
func TestAutoCongestion(t *testing.T) {
	for _, tc := range []struct {
		system   string
		loopback bool
		want     string
	}{{"bbr", true, "cubic"}, {"bbr", false, ""}, {"cubic", true, ""}, {"dctcp", false, ""}, {"", true, ""}} {
		if got := autoCongestion(tc.system, tc.loopback); got != tc.want {
			t.Errorf("autoCongestion(%q, loopback %v) = %q, want %q", tc.system, tc.loopback, got, tc.want)
		}
	}
}
