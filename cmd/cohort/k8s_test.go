package main

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// parseYAML reads the block YAML subset yamlOf writes (mappings,
// sequences, JSON-quoted strings, ints, bools, {} and []) into maps,
// slices and scalars. It fails on anything else, so a test that parses a
// manifest back also checks it is well-formed.
func parseYAML(t *testing.T, doc string) any {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(doc, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	p := &yamlParser{t: t, lines: lines}
	v := p.block(0)
	if p.i != len(lines) {
		t.Fatalf("yaml: line %d: %q: unexpected indentation", p.i+1, lines[p.i])
	}
	return v
}

type yamlParser struct {
	t     *testing.T
	lines []string
	i     int
}

func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

func (p *yamlParser) block(indent int) any {
	if p.i < len(p.lines) && strings.HasPrefix(strings.TrimSpace(p.lines[p.i]), "-") {
		return p.seq(indent)
	}
	return p.mapping(indent)
}

func (p *yamlParser) mapping(indent int) map[string]any {
	m := map[string]any{}
	for p.i < len(p.lines) && indentOf(p.lines[p.i]) == indent {
		line := strings.TrimSpace(p.lines[p.i])
		if strings.HasPrefix(line, "-") {
			break
		}
		k, rest := p.key(line)
		if _, dup := m[k]; dup {
			p.t.Fatalf("yaml: line %d: duplicate key %q", p.i+1, k)
		}
		p.i++
		if rest == "" {
			if p.i >= len(p.lines) || indentOf(p.lines[p.i]) <= indent {
				p.t.Fatalf("yaml: line %d: key %q has no value", p.i, k)
			}
			m[k] = p.block(indentOf(p.lines[p.i]))
		} else {
			m[k] = p.scalar(rest)
		}
	}
	return m
}

func (p *yamlParser) seq(indent int) []any {
	s := []any{}
	for p.i < len(p.lines) && indentOf(p.lines[p.i]) == indent && strings.HasPrefix(strings.TrimSpace(p.lines[p.i]), "-") {
		rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(p.lines[p.i]), "-"))
		switch {
		case rest == "":
			p.i++
			s = append(s, p.block(indentOf(p.lines[p.i])))
		case p.isKeyLine(rest):
			// "- k: v": a mapping whose keys sit two columns in.
			p.lines[p.i] = strings.Repeat(" ", indent+2) + rest
			s = append(s, p.mapping(indent+2))
		default:
			p.i++
			s = append(s, p.scalar(rest))
		}
	}
	return s
}

func (p *yamlParser) isKeyLine(l string) bool {
	if strings.HasPrefix(l, `"`) {
		var k string
		dec := json.NewDecoder(strings.NewReader(l))
		if err := dec.Decode(&k); err != nil {
			return false
		}
		return strings.HasPrefix(l[dec.InputOffset():], ":")
	}
	k, _, ok := strings.Cut(l, ":")
	return ok && plainKey.MatchString(k)
}

func (p *yamlParser) key(l string) (string, string) {
	if !p.isKeyLine(l) {
		p.t.Fatalf("yaml: line %d: %q is not KEY: VALUE", p.i+1, l)
	}
	if strings.HasPrefix(l, `"`) {
		var k string
		dec := json.NewDecoder(strings.NewReader(l))
		dec.Decode(&k)
		return k, strings.TrimSpace(l[dec.InputOffset()+1:])
	}
	k, rest, _ := strings.Cut(l, ":")
	return k, strings.TrimSpace(rest)
}

func (p *yamlParser) scalar(s string) any {
	switch {
	case s == "{}":
		return map[string]any{}
	case s == "[]":
		return []any{}
	case s == "true" || s == "false":
		return s == "true"
	case strings.HasPrefix(s, `"`):
		var v string
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			p.t.Fatalf("yaml: line %d: bad string %s: %v", p.i, s, err)
		}
		return v
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		p.t.Fatalf("yaml: line %d: %q is not a string, int or bool (unquoted strings are never written)", p.i, s)
	}
	return n
}

// path walks a parsed document: keys for mappings, ints for sequences.
func path(t *testing.T, v any, steps ...any) any {
	t.Helper()
	for _, s := range steps {
		switch k := s.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %q: not a mapping: %v", k, v)
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("no key %q in %v", k, m)
			}
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("at [%d]: not a long enough sequence: %v", k, v)
			}
			v = l[k]
		}
	}
	return v
}

func manifests(t *testing.T, args ...string) map[string]any {
	t.Helper()
	s, kind, err := parseK8sArgs(args, io.Discard)
	if err != nil {
		t.Fatalf("parseK8sArgs: %v", err)
	}
	s.token = "tok"
	var b strings.Builder
	if err := writeManifests(&b, s, kind); err != nil {
		t.Fatal(err)
	}
	docs := map[string]any{}
	for _, d := range strings.Split(b.String(), "---\n")[1:] {
		v := parseYAML(t, d)
		docs[fmt.Sprint(path(t, v, "kind"))] = v
	}
	return docs
}

func TestK8sFixed(t *testing.T) {
	docs := manifests(t, "--name", "mnist", "--image", "reg/cohort:1", "--nnodes", "3", "--nproc-per-node", "4", "--cpu", "4",
		"--", "/app/mnist", "-epochs", "2", "--weird: arg")
	for _, k := range []string{"Secret", "PyTorchJob", "Service", "Job", "JobSet"} {
		if _, ok := docs[k]; !ok {
			t.Fatalf("no %s among %v", k, docs)
		}
	}
	wantCmd := []any{"cohort", "run", "--nproc-per-node", "4"}
	tail := []any{"--", "/app/mnist", "-epochs", "2", "--weird: arg"}

	pj := docs["PyTorchJob"]
	if v := path(t, pj, "apiVersion"); v != "kubeflow.org/v1" {
		t.Errorf("PyTorchJob apiVersion %v", v)
	}
	if path(t, pj, "spec", "pytorchReplicaSpecs", "Master", "replicas") != 1 || path(t, pj, "spec", "pytorchReplicaSpecs", "Worker", "replicas") != 2 {
		t.Errorf("PyTorchJob replicas: %v", path(t, pj, "spec", "pytorchReplicaSpecs"))
	}
	c := path(t, pj, "spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 0)
	if got := path(t, c, "command"); !reflect.DeepEqual(got, append(append([]any{}, wantCmd...), tail...)) {
		t.Errorf("PyTorchJob command %v", got)
	}
	if path(t, c, "env", 0, "valueFrom", "secretKeyRef", "name") != "mnist-token" || path(t, c, "resources", "limits", "cpu") != "4" {
		t.Errorf("PyTorchJob container %v", c)
	}

	job := docs["Job"]
	if path(t, job, "spec", "completionMode") != "Indexed" || path(t, job, "spec", "completions") != 3 || path(t, job, "spec", "template", "spec", "subdomain") != "mnist" {
		t.Errorf("Job spec %v", path(t, job, "spec"))
	}
	jc := path(t, job, "spec", "template", "spec", "containers", 0, "command")
	want := append(append(append([]any{}, wantCmd...), "--nnodes", "3", "--master-addr", "mnist-0.mnist", "--master-port", "29500"), tail...)
	if !reflect.DeepEqual(jc, want) {
		t.Errorf("Job command %v\nwant %v", jc, want)
	}
	svc := docs["Service"]
	if path(t, svc, "spec", "clusterIP") != "None" || path(t, svc, "spec", "selector", jobLabel) != "mnist" ||
		path(t, job, "spec", "template", "metadata", "labels", jobLabel) != "mnist" {
		t.Errorf("the headless Service does not select the Job's pods: %v", svc)
	}

	js := docs["JobSet"]
	rj := path(t, js, "spec", "replicatedJobs", 0)
	jsc := path(t, rj, "template", "spec", "template", "spec", "containers", 0, "command")
	want[7] = "mnist-node-0-0.mnist"
	if !reflect.DeepEqual(jsc, want) || path(t, rj, "name") != "node" || path(t, js, "spec", "network", "subdomain") != "mnist" {
		t.Errorf("JobSet: %v", js)
	}
	if path(t, docs["Secret"], "stringData", "token") != "tok" {
		t.Errorf("Secret %v", docs["Secret"])
	}

	// Every pod mounts a memory-backed /dev/shm for the shm transport.
	for kind, pod := range map[string]any{
		"PyTorchJob": path(t, pj, "spec", "pytorchReplicaSpecs", "Worker", "template", "spec"),
		"Job":        path(t, job, "spec", "template", "spec"),
		"JobSet":     path(t, rj, "template", "spec", "template", "spec"),
	} {
		if path(t, pod, "containers", 0, "volumeMounts", 0, "mountPath") != "/dev/shm" || path(t, pod, "containers", 0, "volumeMounts", 0, "name") != "dshm" ||
			path(t, pod, "volumes", 0, "name") != "dshm" || path(t, pod, "volumes", 0, "emptyDir", "medium") != "Memory" {
			t.Errorf("%s pod: no memory-backed /dev/shm: %v", kind, pod)
		}
	}
}

// labelKey is Kubernetes' syntax of a label key: an optional DNS
// subdomain prefix and a slash, then a name of at most 63 characters.
var labelKey = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// TestK8sLabelKeys: every label and selector key of every manifest is a
// valid label key (the API server refuses the object otherwise).
func TestK8sLabelKeys(t *testing.T) {
	s, kind, err := parseK8sArgs([]string{"--image", "i", "--", "/usr/local/bin/mnist"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := writeManifests(&b, s, kind); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(v any, under string)
	walk = func(v any, under string) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if under == "labels" || under == "selector" {
					n++
					if !labelKey.MatchString(k) || len(k) > 253+1+63 {
						t.Errorf("label key %q is not valid in Kubernetes", k)
					}
				}
				walk(e, k)
			}
		case []any:
			for _, e := range x {
				walk(e, "")
			}
		}
	}
	for _, d := range strings.Split(b.String(), "---\n")[1:] {
		walk(parseYAML(t, d), "")
	}
	if n == 0 {
		t.Fatal("no labels found in the manifests")
	}
}

// TestK8sProgramWarning: a pod's program should be a binary in the image;
// a Go package path is warned about.
func TestK8sProgramWarning(t *testing.T) {
	for prog, warn := range map[string]bool{
		"/usr/local/bin/mnist": false, "mnist": false, "python3": false,
		"./examples/mnist": true, ".": true, "../train": true, "github.com/cohortml/cohort/examples/mnist": true,
	} {
		if got := programWarning(prog); (got != "") != warn {
			t.Errorf("programWarning(%q) = %q, want a warning: %v", prog, got, warn)
		} else if warn && !strings.Contains(got, prog) {
			t.Errorf("programWarning(%q) = %q: does not name the program", prog, got)
		}
	}
}

func TestK8sElastic(t *testing.T) {
	docs := manifests(t, "--image", "img", "--nnodes", "2:4", "--nproc-per-node", "2", "--max-restarts", "5", "--", "train")
	if _, ok := docs["Job"]; ok {
		t.Errorf("an elastic job got an Indexed Job: %v", docs)
	}
	pj := docs["PyTorchJob"]
	ep := path(t, pj, "spec", "elasticPolicy")
	if path(t, ep, "minReplicas") != 2 || path(t, ep, "maxReplicas") != 4 || path(t, ep, "maxRestarts") != 5 || path(t, ep, "rdzvBackend") != "c10d" {
		t.Errorf("elasticPolicy %v", ep)
	}
	if path(t, pj, "spec", "pytorchReplicaSpecs", "Worker", "replicas") != 4 || path(t, pj, "spec", "nprocPerNode") != "2" {
		t.Errorf("spec %v", path(t, pj, "spec"))
	}
}

func TestK8sErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no-image", []string{"prog"}, "--image"},
		{"no-program", []string{"--image", "i"}, "no program"},
		{"bad-name", []string{"--image", "i", "--name", "Bad_Name", "p"}, "DNS label"},
		{"elastic-indexed", []string{"--image", "i", "--nnodes", "1:3", "--kind", "indexed-job", "p"}, "needs --kind pytorchjob"},
		{"bad-kind", []string{"--image", "i", "--kind", "deployment", "p"}, "--kind"},
		{"bad-nnodes", []string{"--image", "i", "--nnodes", "0", "p"}, "--nnodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := parseK8sArgs(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseK8sArgs = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestYAMLRoundTrip: every value shape yamlOf writes parses back to the
// same data.
func TestYAMLRoundTrip(t *testing.T) {
	v := obj{{"a", "x: y"}, {"b", 3}, {"c", true}, {"d", obj{}}, {"e", []any{}}, {"f", []any{"1", 2, obj{{"g", obj{{"h", "i"}}}, {"j", []any{"k"}}}}},
		{"weird key", "\"quoted\"\n"}}
	got := parseYAML(t, yamlOf(v))
	want := map[string]any{"a": "x: y", "b": 3, "c": true, "d": map[string]any{}, "e": []any{},
		"f": []any{"1", 2, map[string]any{"g": map[string]any{"h": "i"}, "j": []any{"k"}}}, "weird key": "\"quoted\"\n"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n%s\ngot  %v\nwant %v", yamlOf(v), got, want)
	}
}
