// Package data feeds training loops: datasets, samplers that decide which
// rank sees which sample in which order, and a Loader that collates samples
// into batch tensors on worker goroutines.
//
// # Datasets
//
// A Dataset is indexable (Len, Get); an IterableDataset is a stream. A
// Sample is dense float32 features X with a shape plus integer labels
// (a class index, or one target per sequence position) and optional
// real-valued targets. Datasets return slices that may alias their own
// memory: callers treat a Sample as read-only.
//
// # Samplers
//
// Samplers are pure functions of their configuration, the seed and the
// epoch: the same (seed, epoch) gives the same order on every machine.
// DistributedSampler reproduces torch.utils.data.DistributedSampler index
// for index (PyTorch 1.13): MT19937 seeded with init_genrand(seed+epoch),
// PyTorch's CPU randperm, head padding (or a cut with drop-last) to a
// multiple of the world size, and a rank-strided split. It also offers a
// contiguous-block strategy and a length-bucketing batch strategy
// (BucketSampler) that cuts padding for variable-length sequences.
//
// # Loader
//
// Loader runs a batch plan (lists of indices) through Workers goroutines
// and yields batches in plan order, whatever the number of workers:
//
//	for b, err := range loader.Batches(ctx) { … }
//
// Batch memory is recycled: a batch is valid until the loop body returns,
// and steady-state collation allocates nothing. Breaking out of the loop
// or cancelling ctx stops the workers before Batches returns. The loader's
// State (seed, epoch, position, plan fingerprint) can be saved and
// restored so a resumed run yields exactly the batches an uninterrupted
// run would have yielded next; DistributedSampler.Unseen and ListSampler
// re-split an interrupted epoch for a different world size. Position puts
// them together for a job's checkpoints: where every rank is in the epoch,
// Redeal when the job resumes at another world size, Share for this
// rank's samples, so each is used once per epoch whatever the resizes.
//
// StreamLoader does the same for an IterableDataset.
package data
