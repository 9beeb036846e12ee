package rendezvous

import (
	"fmt"
	"strconv"
	"strings"
)

// Node is what a launcher (cohort run) learns about its node from the
// environment; its flags override every field.
type Node struct {
	// Source is where NumNodes and NodeRank came from: Slurm,
	// "kubeflow" (PyTorchJob's PET_* variables), IndexedJob, or "" when
	// the environment says nothing about nodes.
	Source Source
	// NumNodes is the node count, 0 when not given or elastic.
	NumNodes int
	// MinNodes and MaxNodes are an elastic node range (PET_NNODES=MIN:MAX),
	// both 0 when the node count is fixed.
	MinNodes, MaxNodes int
	// RdzvEndpoint and RdzvID are an elastic job's rendezvous store
	// (host:port) and job id in it: PET_RDZV_ENDPOINT and PET_RDZV_ID, as
	// an elastic PyTorchJob sets them ("" when not given).
	RdzvEndpoint, RdzvID string
	// NodeRank is this node's index, 0 when not given.
	NodeRank int
	// MasterAddr and MasterPort locate node 0 ("" and 0 when not given).
	MasterAddr string
	MasterPort int
	// Token is COHORT_TOKEN, RunID is COHORT_RUN_ID (may be empty).
	Token string
	RunID string
}

// Kubeflow is the source of a PyTorchJob's launcher variables (PET_*).
const Kubeflow Source = "kubeflow"

// NodeFromEnv reads a launcher's view of the job: how many nodes, which
// one this is and where node 0 is. Precedence, first match wins:
//
//  1. PET_NNODES set: Kubeflow PyTorchJob's torchrun variables
//     (PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT).
//     PET_NNODES=MIN:MAX is an elastic job: MinNodes and MaxNodes are set,
//     PET_NODE_RANK is not needed (the rendezvous assigns node ranks) and
//     PET_RDZV_ENDPOINT / PET_RDZV_ID name its rendezvous.
//  2. SLURM_PROCID set (`srun cohort run …`): one launcher per node is
//     required (srun --ntasks-per-node=1); SLURM_NODEID is the node rank,
//     the step's node count the node count, the first host of its node
//     list node 0, and the port as in FromEnv.
//  3. JOB_COMPLETION_INDEX set: an Indexed Job with one launcher per pod;
//     the index is the node rank (the node count comes from the flags).
//
// MASTER_ADDR and MASTER_PORT, when set, override the defaults above (but
// not PET_MASTER_*). COHORT_TOKEN and COHORT_RUN_ID are read in every
// case. Errors wrap ErrEnv.
func NodeFromEnv(getenv func(string) string) (Node, error) {
	e := env(getenv)
	n := Node{Token: e("COHORT_TOKEN"), RunID: e("COHORT_RUN_ID")}
	var err error
	switch {
	case e.has("PET_NNODES"):
		n.Source = Kubeflow
		v := e("PET_NNODES")
		if lo, hi, ok := strings.Cut(v, ":"); ok {
			if n.MinNodes, n.MaxNodes, err = ParseNodeRange(lo, hi); err != nil {
				return Node{}, envErr("PET_NNODES=%q: %v", v, err)
			}
			n.RdzvEndpoint, n.RdzvID = e("PET_RDZV_ENDPOINT"), e("PET_RDZV_ID")
		} else {
			if n.NumNodes, err = e.need("PET_NNODES", 1, ""); err != nil {
				return Node{}, err
			}
			if n.NodeRank, err = e.need("PET_NODE_RANK", 0, "PyTorchJob sets it with PET_NNODES"); err != nil {
				return Node{}, err
			}
		}
		n.MasterAddr = e("PET_MASTER_ADDR")
		if p, ok, err := e.intVar("PET_MASTER_PORT", 1); err != nil {
			return Node{}, err
		} else if ok {
			n.MasterPort = p
		}
	case e.has("SLURM_PROCID"):
		n.Source = Slurm
		in, err := e.slurm()
		if err != nil {
			return Node{}, err
		}
		if in.LocalWorldSize != 1 || in.LocalRank != 0 {
			return Node{}, envErr("Slurm runs %d tasks on this node (SLURM_LOCALID=%d): run one cohort run per node (srun --ntasks-per-node=1 cohort run --nproc-per-node N …)", in.LocalWorldSize, in.LocalRank)
		}
		n.NodeRank = in.NodeRank
		n.NumNodes = in.NumNodes
		if n.NumNodes == 0 {
			n.NumNodes = in.WorldSize
		}
		n.MasterAddr, n.MasterPort = in.MasterAddr, in.MasterPort
	case e.has("JOB_COMPLETION_INDEX"):
		n.Source = IndexedJob
		if n.NodeRank, err = e.need("JOB_COMPLETION_INDEX", 0, ""); err != nil {
			return Node{}, err
		}
	}
	if n.Source != Kubeflow || n.MasterAddr == "" {
		if v := e("MASTER_ADDR"); v != "" {
			n.MasterAddr = v
		}
	}
	if n.Source != Kubeflow || n.MasterPort == 0 {
		if p, ok, err := e.intVar("MASTER_PORT", 1); err != nil {
			return Node{}, err
		} else if ok {
			n.MasterPort = p
		}
	}
	if n.MasterPort > 65535 {
		return Node{}, envErr("master port %d: want a TCP port, 1..65535", n.MasterPort)
	}
	if n.NumNodes > 0 && n.NodeRank >= n.NumNodes {
		return Node{}, envErr("node rank %d but %d nodes (from %s): node rank must be < node count", n.NodeRank, n.NumNodes, n.Source)
	}
	return n, nil
}

// ParseNodeRange parses the two halves of a MIN:MAX node range
// (torchrun's --nnodes 1:4): 1 <= MIN <= MAX.
func ParseNodeRange(lo, hi string) (minNodes, maxNodes int, err error) {
	minNodes, err1 := strconv.Atoi(strings.TrimSpace(lo))
	maxNodes, err2 := strconv.Atoi(strings.TrimSpace(hi))
	if err1 != nil || err2 != nil || minNodes < 1 || maxNodes < minNodes {
		return 0, 0, fmt.Errorf("node range %s:%s: want MIN:MAX with 1 <= MIN <= MAX", lo, hi)
	}
	return minNodes, maxNodes, nil
}

// String formats Node for logs.
func (n Node) String() string {
	src := string(n.Source)
	if src == "" {
		src = "flags"
	}
	return fmt.Sprintf("node %d of %d, master %s (from %s)", n.NodeRank, n.NumNodes, strconv.Quote(n.MasterAddr+":"+strconv.Itoa(n.MasterPort)), src)
}
