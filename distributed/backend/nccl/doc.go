// Package nccl is the NCCL backend of package distributed, registered as
// "nccl" (Options.Backend, or COHORT_BACKEND=nccl through InitFromEnv):
// NVIDIA's collective library, loaded at run time (device/nccl), on one
// GPU per rank.
//
// Init loads libnccl and the CUDA driver, takes the GPU of this rank
// (LOCAL_RANK among the visible devices), refuses a second rank of the job
// on the same GPU (NCCL would hang or fail; the native backend is the way
// to run more ranks than GPUs), and joins a communicator: rank 0 creates
// the unique id and sets it in the job's authenticated store under
// <Prefix>/nccl/id, the others get it with the op's context bound by
// Group.Timeout (COHORT_TIMEOUT). Every subgroup (distributed.NewGroup,
// and so every dimension of a Mesh) joins a communicator of its own, its
// id under its parent's prefix.
//
// Each group has a communication stream of its own. Ops are enqueued on
// it in issue order, after an event of the compute stream when one is set
// (SetComputeStream), and each op's completion is an event recorded after
// it. Work.Wait makes the host wait; WaitStream makes a stream wait on
// the device, so that compute overlaps communication. Host buffers
// (distributed.Buffer) are staged through device memory on the same
// stream; AllReduceDevice takes device memory itself (the seam that device
// tensors and DDP buckets use).
//
// Failures. Every op is recorded on the host in the group's flight ring
// (Flight), with the native backend's sequence numbers. While an op runs,
// the group polls its completion event, ncclCommGetAsyncError and the
// op's deadline: on a communicator error (a dead peer), a timeout or an
// ended context it aborts the communicator (ncclCommAbort), so that the
// ranks blocked with it unblock, and the op fails with an
// *distributed.OpError naming op, seq and rank; every later op fails
// wrapping it (ErrAborted).
//
// What NCCL does not have is built as PyTorch's ProcessGroupNCCL builds
// it: all-to-all, gather and scatter from sends and receives in one NCCL
// group call, the barrier from a one-element all-reduce. Sends and
// receives between two ranks match in issue order; their tags are
// recorded but not matched.
//
// The group sees NCCL and the GPU through three small interfaces (Comm,
// Joiner, Device); the tests run the group over a fake that does the
// collectives in host memory between goroutines.
package nccl
