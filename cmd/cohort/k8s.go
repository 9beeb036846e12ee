package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/internal/cli"
)

const k8sUsage = `usage: cohort k8s --image IMAGE [flags] [--] PROGRAM [ARGS...]

Writes Kubernetes manifests (YAML, on stdout) that run PROGRAM under
cohort run on --nnodes pods of --nproc-per-node workers each:

  pytorchjob   a Kubeflow PyTorchJob (training-operator): its PET_* variables
               give cohort run the node count, node rank and master; with
               --nnodes MIN:MAX an elastic job (elasticPolicy, c10d rendezvous)
  indexed-job  a headless Service and an Indexed Job: JOB_COMPLETION_INDEX is
               the node rank, pod 0 (NAME-0.NAME) serves the job's store
  jobset       a JobSet (jobset.x-k8s.io) of one indexed replicated job
  all          all of them (the default), as separate YAML documents

Each also gets a Secret with a random COHORT_TOKEN, and a memory-backed
/dev/shm for the shared-memory transport between a pod's workers.

The image must hold the cohort binary (--cohort, default "cohort", found
in the image's PATH) and PROGRAM, a binary in the image: an absolute path
such as /usr/local/bin/mnist, or a name in its PATH. The image that
` + "`go run ./cmd/cohort-image`" + ` builds holds cohort, mnist and gpt in
/usr/local/bin and the examples' data. A Go package path (./examples/mnist)
would be built by each pod, so the image would need Go, the source and the
module cache: cohort k8s warns about one.

flags:
`

// k8sSpec is what the manifests are made from.
type k8sSpec struct {
	name, namespace, image, cohort string
	minNodes, maxNodes, nproc      int
	port, maxRestarts              int
	cpu, memory                    string
	command                        []string
	token                          string
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$`)

func parseK8sArgs(args []string, usageOut io.Writer) (k8sSpec, string, error) {
	fs := cli.NewFlagSet("cohort k8s", k8sUsage, usageOut)
	var s k8sSpec
	var nnodes, kind string
	fs.StringVar(&s.name, "name", "cohort-job", "the job's name (a DNS label)")
	fs.StringVar(&s.namespace, "namespace", "", "namespace of the objects (default: none set)")
	fs.StringVar(&s.image, "image", "", "container image holding cohort and the program, e.g. one built by go run ./cmd/cohort-image (required)")
	fs.StringVar(&s.cohort, "cohort", "cohort", "path of the cohort binary in the image")
	fs.StringVar(&nnodes, "nnodes", "2", "pods (nodes): N, or MIN:MAX for an elastic PyTorchJob")
	fs.IntVar(&s.nproc, "nproc-per-node", 1, "workers per pod")
	fs.IntVar(&s.port, "port", 29500, "port of the job's store on pod 0")
	fs.IntVar(&s.maxRestarts, "max-restarts", 3, "restarts before the job fails (PyTorchJob elastic policy, Job backoffLimit, JobSet maxRestarts)")
	fs.StringVar(&s.cpu, "cpu", "", "CPU request and limit per pod (e.g. 4)")
	fs.StringVar(&s.memory, "memory", "", "memory request and limit per pod (e.g. 8Gi)")
	fs.StringVar(&kind, "kind", "all", "pytorchjob, indexed-job, jobset or all")
	if err := fs.Parse(args); err != nil {
		return s, "", err
	}
	s.command = fs.Args()
	var err error
	if s.minNodes, s.maxNodes, err = parseNNodes(nnodes); err != nil {
		return s, "", err
	}
	switch {
	case s.image == "":
		return s, "", errors.New("--image is required")
	case len(s.command) == 0:
		return s, "", errors.New("no program given")
	case !dnsLabel.MatchString(s.name):
		return s, "", fmt.Errorf("--name %q: want a lower-case DNS label of at most 42 characters", s.name)
	case s.nproc < 1:
		return s, "", fmt.Errorf("--nproc-per-node %d: want >= 1", s.nproc)
	case s.port < 1 || s.port > 65535:
		return s, "", fmt.Errorf("--port %d: want a TCP port", s.port)
	case s.maxRestarts < 0:
		return s, "", fmt.Errorf("--max-restarts %d: want >= 0", s.maxRestarts)
	}
	switch kind {
	case "pytorchjob", "all":
	case "indexed-job", "jobset":
		if s.minNodes != s.maxNodes {
			return s, "", fmt.Errorf("--kind %s runs a fixed number of pods; --nnodes %s needs --kind pytorchjob", kind, nnodes)
		}
	default:
		return s, "", fmt.Errorf("--kind %q: want pytorchjob, indexed-job, jobset or all", kind)
	}
	return s, kind, nil
}

// runK8s is `cohort k8s`.
func runK8s(args []string) int {
	s, kind, err := parseK8sArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort k8s: %v\n", err)
		return 2
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		fmt.Fprintf(os.Stderr, "cohort k8s: %v\n", err)
		return 1
	}
	s.token = hex.EncodeToString(b)
	if w := programWarning(s.command[0]); w != "" {
		fmt.Fprintf(os.Stderr, "cohort k8s: warning: %s\n", w)
	}
	if err := writeManifests(os.Stdout, s, kind); err != nil {
		fmt.Fprintf(os.Stderr, "cohort k8s: %v\n", err)
		return 1
	}
	return 0
}

// programWarning says what is wrong with prog as the program a pod runs,
// or "" when it names a binary: an absolute path, or a name looked up in
// the image's PATH. Anything else with a slash is a relative path or a Go
// package path, which cohort run in the pod would build with go.
func programWarning(prog string) string {
	if strings.HasPrefix(prog, "/") || !strings.Contains(prog, "/") && prog != "." && prog != ".." {
		return ""
	}
	return fmt.Sprintf("%s is a Go package or a relative path: each pod would build it, so the image needs Go, the source and the module cache; "+
		"give the absolute path of a binary in the image instead (go run ./cmd/cohort-image puts cohort, mnist and gpt in /usr/local/bin)", prog)
}

// jobLabel is the label naming a pod's job (a valid label key: one
// DNS-subdomain prefix, one name).
const jobLabel = "cohort/job"

// writeManifests writes the manifests of kind as YAML documents.
func writeManifests(w io.Writer, s k8sSpec, kind string) error {
	docs := []obj{s.secret()}
	if kind == "pytorchjob" || kind == "all" {
		docs = append(docs, s.pytorchJob())
	}
	if s.minNodes == s.maxNodes && (kind == "indexed-job" || kind == "all") {
		docs = append(docs, s.service(), s.indexedJob())
	}
	if s.minNodes == s.maxNodes && (kind == "jobset" || kind == "all") {
		docs = append(docs, s.jobSet())
	}
	for _, d := range docs {
		if _, err := io.WriteString(w, "---\n"+yamlOf(d)); err != nil {
			return err
		}
	}
	return nil
}

// obj is a manifest node: a mapping whose keys print in the order given
// (kv pairs), a list, or a scalar (string, int, bool).
type obj = []kv

type kv struct {
	k string
	v any
}

func (s k8sSpec) meta(name string) obj {
	m := obj{{"name", name}}
	if s.namespace != "" {
		m = append(m, kv{"namespace", s.namespace})
	}
	return append(m, kv{"labels", obj{{"app.kubernetes.io/name", "cohort"}, {jobLabel, s.name}}})
}

func (s k8sSpec) secret() obj {
	return obj{{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", s.meta(s.name + "-token")},
		{"type", "Opaque"}, {"stringData", obj{{"token", s.token}}}}
}

// container is the pod's one container running cohort run with extra
// launcher flags.
func (s k8sSpec) container(name string, runFlags ...string) obj {
	cmd := []any{s.cohort, "run", "--nproc-per-node", strconv.Itoa(s.nproc)}
	for _, f := range runFlags {
		cmd = append(cmd, f)
	}
	cmd = append(cmd, "--")
	for _, a := range s.command {
		cmd = append(cmd, a)
	}
	c := obj{{"name", name}, {"image", s.image}, {"command", cmd},
		{"env", []any{obj{{"name", "COHORT_TOKEN"}, {"valueFrom", obj{{"secretKeyRef", obj{{"name", s.name + "-token"}, {"key", "token"}}}}}}}},
		{"ports", []any{obj{{"name", "cohort-store"}, {"containerPort", s.port}}}},
		{"volumeMounts", []any{obj{{"name", "dshm"}, {"mountPath", "/dev/shm"}}}}}
	if s.cpu != "" || s.memory != "" {
		r := obj{}
		if s.cpu != "" {
			r = append(r, kv{"cpu", s.cpu})
		}
		if s.memory != "" {
			r = append(r, kv{"memory", s.memory})
		}
		c = append(c, kv{"resources", obj{{"requests", r}, {"limits", r}}})
	}
	return c
}

// podSpec is a pod of the container c, with restart policy restart ("":
// the controller's default) and the memory-backed /dev/shm that c mounts
// (a container runtime's own is 64 MiB).
func podSpec(c obj, restart string, extra ...kv) obj {
	spec := obj{}
	spec = append(spec, extra...)
	if restart != "" {
		spec = append(spec, kv{"restartPolicy", restart})
	}
	return append(spec, kv{"containers", []any{c}},
		kv{"volumes", []any{obj{{"name", "dshm"}, {"emptyDir", obj{{"medium", "Memory"}}}}}})
}

// pytorchJob: the training-operator sets PET_NNODES, PET_NODE_RANK,
// PET_MASTER_ADDR and PET_MASTER_PORT (and, elastic, PET_RDZV_*), which
// cohort run reads; the container only names the workers per node.
func (s k8sSpec) pytorchJob() obj {
	pod := func() obj {
		return obj{{"spec", podSpec(s.container("pytorch"), "")}}
	}
	spec := obj{}
	var replicas obj
	if s.minNodes == s.maxNodes {
		replicas = obj{{"Master", obj{{"replicas", 1}, {"restartPolicy", "OnFailure"}, {"template", pod()}}}}
		if s.maxNodes > 1 {
			replicas = append(replicas, kv{"Worker", obj{{"replicas", s.maxNodes - 1}, {"restartPolicy", "OnFailure"}, {"template", pod()}}})
		}
		spec = append(spec, kv{"runPolicy", obj{{"backoffLimit", s.maxRestarts}}})
	} else {
		spec = append(spec, kv{"elasticPolicy", obj{{"rdzvBackend", "c10d"}, {"rdzvPort", s.port},
			{"minReplicas", s.minNodes}, {"maxReplicas", s.maxNodes}, {"maxRestarts", s.maxRestarts}}})
		replicas = obj{{"Worker", obj{{"replicas", s.maxNodes}, {"restartPolicy", "OnFailure"}, {"template", pod()}}}}
	}
	spec = append(spec, kv{"nprocPerNode", strconv.Itoa(s.nproc)}, kv{"pytorchReplicaSpecs", replicas})
	return obj{{"apiVersion", "kubeflow.org/v1"}, {"kind", "PyTorchJob"}, {"metadata", s.meta(s.name)}, {"spec", spec}}
}

func (s k8sSpec) service() obj {
	return obj{{"apiVersion", "v1"}, {"kind", "Service"}, {"metadata", s.meta(s.name)},
		{"spec", obj{{"clusterIP", "None"}, {"publishNotReadyAddresses", true},
			{"selector", obj{{jobLabel, s.name}}},
			{"ports", []any{obj{{"name", "cohort-store"}, {"port", s.port}}}}}}}
}

// indexedJob: pod i is NAME-i.NAME (the Service's subdomain), its
// JOB_COMPLETION_INDEX is its node rank; pod 0 serves the store.
func (s k8sSpec) indexedJob() obj {
	master := fmt.Sprintf("%s-0.%s", s.name, s.name)
	c := s.container("cohort", "--nnodes", strconv.Itoa(s.maxNodes), "--master-addr", master, "--master-port", strconv.Itoa(s.port))
	return obj{{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"metadata", s.meta(s.name)},
		{"spec", obj{{"completionMode", "Indexed"}, {"completions", s.maxNodes}, {"parallelism", s.maxNodes},
			{"backoffLimit", s.maxRestarts},
			{"template", obj{{"metadata", obj{{"labels", obj{{jobLabel, s.name}}}}},
				{"spec", podSpec(c, "Never", kv{"subdomain", s.name})}}}}}}
}

// jobSet: pod i of replicated job "node" is NAME-node-0-i.NAME.
func (s k8sSpec) jobSet() obj {
	master := fmt.Sprintf("%s-node-0-0.%s", s.name, s.name)
	c := s.container("cohort", "--nnodes", strconv.Itoa(s.maxNodes), "--master-addr", master, "--master-port", strconv.Itoa(s.port))
	job := obj{{"completionMode", "Indexed"}, {"completions", s.maxNodes}, {"parallelism", s.maxNodes}, {"backoffLimit", 0},
		{"template", obj{{"spec", podSpec(c, "Never")}}}}
	return obj{{"apiVersion", "jobset.x-k8s.io/v1alpha2"}, {"kind", "JobSet"}, {"metadata", s.meta(s.name)},
		{"spec", obj{{"network", obj{{"enableDNSHostnames", true}, {"subdomain", s.name}}},
			{"failurePolicy", obj{{"maxRestarts", s.maxRestarts}}},
			{"replicatedJobs", []any{obj{{"name", "node"}, {"replicas", 1}, {"template", obj{{"spec", job}}}}}}}}}
}

// yamlOf writes v as block YAML. Strings are double-quoted with JSON's
// escapes (valid YAML), so no value is ever misread as another type.
func yamlOf(v obj) string {
	var b strings.Builder
	writeMap(&b, v, 0)
	return b.String()
}

func writeMap(b *strings.Builder, m obj, indent int) {
	if len(m) == 0 {
		return
	}
	for _, e := range m {
		b.WriteString(strings.Repeat(" ", indent))
		b.WriteString(quoteKey(e.k) + ":")
		writeValue(b, e.v, indent)
	}
}

// writeValue writes what follows "key:" or "-".
func writeValue(b *strings.Builder, v any, indent int) {
	switch x := v.(type) {
	case obj:
		if len(x) == 0 {
			b.WriteString(" {}\n")
			return
		}
		b.WriteString("\n")
		writeMap(b, x, indent+2)
	case []any:
		if len(x) == 0 {
			b.WriteString(" []\n")
			return
		}
		b.WriteString("\n")
		for _, item := range x {
			b.WriteString(strings.Repeat(" ", indent+2) + "-")
			if m, ok := item.(obj); ok && len(m) > 0 {
				// "- k: v" then the other keys under it.
				b.WriteString(" " + quoteKey(m[0].k) + ":")
				writeValue(b, m[0].v, indent+4)
				writeMap(b, m[1:], indent+4)
				continue
			}
			writeValue(b, item, indent+2)
		}
	default:
		b.WriteString(" " + scalar(x) + "\n")
	}
}

func scalar(v any) string {
	switch x := v.(type) {
	case string:
		q, _ := json.Marshal(x)
		return string(q)
	case int:
		return strconv.Itoa(x)
	case bool:
		return strconv.FormatBool(x)
	}
	panic(fmt.Sprintf("cohort k8s: no YAML form for %T", v)) // programmer error: the manifests hold only these
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_./-]+$`)

func quoteKey(k string) string {
	if plainKey.MatchString(k) {
		return k
	}
	return scalar(k)
}
