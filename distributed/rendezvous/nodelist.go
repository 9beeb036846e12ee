package rendezvous

import (
	"fmt"
	"strconv"
	"strings"
)

// maxExpandedHosts bounds ExpandNodeList so a malformed list such as
// "n[0-999999999]" is an error, not an allocation of billions of names.
const maxExpandedHosts = 1 << 16

// ExpandNodeList expands a Slurm host list such as "n[01-03,07],gpu5" into
// host names ("n01", "n02", "n03", "n07", "gpu5"), in order. Ranges keep
// the zero padding of their lower bound; several bracket groups in one
// name expand as a cartesian product ("r[1-2]n[1-2]" → r1n1, r1n2, r2n1,
// r2n2), as Slurm does.
func ExpandNodeList(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("rendezvous: empty Slurm node list")
	}
	var hosts []string
	for _, part := range splitTopLevel(list) {
		if part == "" {
			return nil, fmt.Errorf("rendezvous: node list %q: empty entry", list)
		}
		expanded, err := expandHost(part, maxExpandedHosts-len(hosts))
		if err != nil {
			return nil, fmt.Errorf("rendezvous: node list %q: %w", list, err)
		}
		hosts = append(hosts, expanded...)
	}
	return hosts, nil
}

// FirstNode returns the first host of a Slurm node list without expanding
// the rest.
func FirstNode(list string) (string, error) {
	parts := splitTopLevel(list)
	if strings.TrimSpace(list) == "" || parts[0] == "" {
		return "", fmt.Errorf("rendezvous: empty Slurm node list")
	}
	hosts, err := expandHost(parts[0], maxExpandedHosts)
	if err != nil {
		return "", fmt.Errorf("rendezvous: node list %q: %w", list, err)
	}
	return hosts[0], nil
}

// splitTopLevel splits at commas outside brackets.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(parts, strings.TrimSpace(s[start:]))
}

// expandHost expands one host expression with zero or more bracket groups,
// producing at most limit names.
func expandHost(expr string, limit int) ([]string, error) {
	open := strings.IndexByte(expr, '[')
	if open < 0 {
		if strings.ContainsAny(expr, "], \t") {
			return nil, fmt.Errorf("bad host name %q", expr)
		}
		return []string{expr}, nil
	}
	closeIdx := strings.IndexByte(expr[open:], ']')
	if closeIdx < 0 {
		return nil, fmt.Errorf("unclosed '[' in %q", expr)
	}
	closeIdx += open
	prefix, body, rest := expr[:open], expr[open+1:closeIdx], expr[closeIdx+1:]
	if strings.ContainsAny(prefix, "]") || strings.Contains(body, "[") {
		return nil, fmt.Errorf("bad brackets in %q", expr)
	}
	values, err := expandRanges(body, limit)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	tails, err := expandHost(rest, max(1, limit/len(values)))
	if err != nil {
		return nil, err
	}
	if len(values)*len(tails) > limit {
		return nil, fmt.Errorf("%q expands to more than %d hosts", expr, limit)
	}
	out := make([]string, 0, len(values)*len(tails))
	for _, v := range values {
		for _, t := range tails {
			out = append(out, prefix+v+t)
		}
	}
	return out, nil
}

// expandRanges expands "01-03,07" into "01", "02", "03", "07".
func expandRanges(body string, limit int) ([]string, error) {
	if body == "" {
		return nil, fmt.Errorf("empty brackets")
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isDigits(lo) || (isRange && !isDigits(hi)) {
			return nil, fmt.Errorf("bad range %q (want N or N-M with decimal N, M)", r)
		}
		if !isRange {
			out = append(out, lo)
			if len(out) > limit {
				return nil, fmt.Errorf("more than %d hosts", limit)
			}
			continue
		}
		a, errA := strconv.Atoi(lo)
		b, errB := strconv.Atoi(hi)
		if errA != nil || errB != nil || a > b {
			return nil, fmt.Errorf("bad range %q", r)
		}
		if b-a >= limit-len(out) {
			return nil, fmt.Errorf("range %q expands to more than %d hosts", r, limit)
		}
		width := len(lo)
		for n := a; n <= b; n++ {
			out = append(out, fmt.Sprintf("%0*d", width, n))
		}
	}
	return out, nil
}

func isDigits(s string) bool {
	if s == "" || len(s) > 9 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ExpandTasksPerNode expands Slurm's SLURM_TASKS_PER_NODE form, e.g.
// "2(x3),1" → [2 2 2 1].
func ExpandTasksPerNode(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("rendezvous: empty tasks-per-node list")
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		count, reps := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasPrefix(part[i:], "(x") || !strings.HasSuffix(part, ")") {
				return nil, fmt.Errorf("rendezvous: tasks per node %q: bad entry %q (want N or N(xM))", s, part)
			}
			count, reps = part[:i], part[i+2:len(part)-1]
		}
		n, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(reps)
		if err1 != nil || err2 != nil || n < 1 || r < 1 || r > maxExpandedHosts-len(out) {
			return nil, fmt.Errorf("rendezvous: tasks per node %q: bad entry %q (want N or N(xM), N, M >= 1)", s, part)
		}
		for range r {
			out = append(out, n)
		}
	}
	return out, nil
}
