// Package cluster runs cohort under real cluster launchers on this
// machine, the way a user would:
//
//   - OpenMPI: `mpirun --allow-run-as-root --oversubscribe -np 4` starts a
//     collective check program (testdata/collcheck) whose ranks come from
//     OMPI_COMM_WORLD_* (TestMpirun; skipped, saying why, without mpirun).
//   - Slurm: a real 2-node Slurm cluster (slurmctld, two slurmd, munge) in
//     network namespaces, as ../shared/netns/slurm.sh builds it, trains
//     MNIST with DDP through `srun -N2 -n2 cohort run --nproc-per-node 2`,
//     `srun -N2 -n4 mnist` and `sbatch`, with node names that are in no DNS
//     (TestSlurm). It needs root, slurmctld, slurmd, srun and munge, and
//     COHORT_CLUSTER_TESTS=1 (it takes about a minute).
//
// The namespace rules of tests/multihost hold here too: every process
// that talks over the cluster's addresses runs inside a namespace the test
// made; no namespace has a default route; daemons are stopped by the pids
// they wrote, namespaces removed, on failure too.
//
//	go test ./tests/cluster/                            # mpirun only
//	COHORT_CLUSTER_TESTS=1 go test -v ./tests/cluster/  # and Slurm (root)
package cluster
