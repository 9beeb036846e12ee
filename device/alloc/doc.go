// Package alloc is a caching allocator for device memory, in the manner of
// PyTorch's CUDACachingAllocator, in pure Go over an injected [Mem] (the
// real one, [CUDA], calls cuMemAlloc and cuMemFree; tests use fakedev).
//
// cuMemAlloc and cuMemFree are slow and cuMemFree synchronises the device,
// so freed blocks are kept and reused:
//
//   - a request is rounded up to a multiple of 512 bytes;
//   - requests up to 1 MiB are carved from 2 MiB segments shared by small
//     blocks; larger ones get a segment of their own, rounded up to 2 MiB;
//   - the smallest cached block that fits is used (best fit) and split
//     when the rest is worth keeping (any rest in a small segment, more
//     than 1 MiB in a large one); a freed block merges with free
//     neighbours in its segment;
//   - each stream has its own pools: a block freed by work on stream S goes
//     back to S's pool, where the next request on S may take it at once,
//     since S runs its work in order. A block also used on another stream
//     must be declared with [Allocator.RecordStream]; Free then records an
//     event on each such stream and the block is reused only once those
//     events have completed (torch.Tensor.record_stream);
//   - when the device is full, Alloc waits for those events, returns every
//     wholly free segment to the device and tries once more; then it fails
//     with an [*OutOfMemoryError] naming the request, the allocated and
//     reserved bytes, the device's free and total bytes, and the remedies.
//
// [Stats] counts allocated, requested and reserved bytes with their peaks
// (torch.cuda.max_memory_allocated is PeakAllocatedBytes), and
// [Allocator.Snapshot] lists segments and blocks (torch.cuda.memory_snapshot).
//
// # Ownership, concurrency, blocking
//
// An [Allocator] is safe for concurrent use; one mutex guards it, and Mem
// is called with it held. A [*Block] belongs to its caller from Alloc to
// Free; the allocator keeps no reference to a live block's contents. Free
// never blocks on the device (events are recorded, not waited for); Alloc
// blocks in Mem.Alloc, and when memory is short, in waiting for pending
// events and in Mem.Free (which, for CUDA, synchronises the device), as
// does EmptyCache.
package alloc
