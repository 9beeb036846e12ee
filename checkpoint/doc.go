// Package checkpoint saves and loads model weights as safetensors files
// that PyTorch reads, and whole training states as sharded checkpoint
// directories that a job of another world size can resume from.
//
// # Weights: safetensors
//
// SaveModel writes a module's state dict as one safetensors file (Write
// and NewFile are the format's writer and reader). Tensor names are the
// PyTorch state_dict() keys of the equivalent PyTorch module, so
//
//	model.load_state_dict(safetensors.torch.load_file(path))
//
// works with nothing renamed: nn.Sequential already names its children
// "0", "1", … as torch.nn.Sequential does (the MLP and LeNet need no map),
// and GPTNames maps models.GPT to the anchor gpt_mini.py. LoadModel reads
// such a file back (F32, F64, F16, BF16 and integer tensors, converted to
// float32) and names every missing and unexpected key when the file is of
// another model.
//
// # bfloat16 weights
//
// A BF16 tensor is what PyTorch writes for a bf16 module: its bits as
// little-endian uint16 (the top half of the float32 of the same value),
// header dtype "BF16". It loads into a float32 model widened exactly.
// SaveModel, SaveGPT2 and Write take WithDType(tensor.BFloat16) to write
// BF16 instead of F32, each value rounded to nearest, ties to even — bit
// for bit what PyTorch's .to(torch.bfloat16) gives (NaNs aside, which stay
// NaNs), so the file is half the size and loads into a bf16 PyTorch
// module with a strict load_state_dict. A dtype the writer does not know
// fails the write with an error naming the dtype and a tensor. Training
// state (Save) stays float32.
//
// # torch.save files
//
// LoadTorch reads a state dict saved with torch.save(module.state_dict(),
// path) (the zip format of PyTorch 1.6 and later) into a module as
// LoadModel does: FloatStorage, BFloat16Storage, HalfStorage and
// DoubleStorage tensors, any offset and strides, converted to float32
// (bf16 exactly). Its pickle reader knows only the opcodes and globals of
// a state dict (an OrderedDict, torch._utils._rebuild_tensor_v2 and
// _rebuild_parameter, the storage classes) and calls nothing by name: any
// other global, or another storage type, fails naming it. SaveTorch writes
// the archive torch.save writes for the state dict (FloatStorage, or
// BFloat16Storage with WithDType(tensor.BFloat16); records 64-byte
// aligned), which torch.load reads back for load_state_dict.
//
// SaveGPT2 and LoadGPT2 read and write models.GPT in the layout of Hugging
// Face transformers' GPT2LMHeadModel (GPT2Names; Conv1D projection weights
// stored [in, out]; the tied lm_head left out on save, and accepted on load
// when it equals wte; older versions' attention mask buffers skipped), so
// a model.safetensors from save_pretrained, GPT-2 small's included, loads
// into models.GPT2() and back.
//
// # Training state: a checkpoint directory
//
// Save is collective: every rank hands it a Snapshot (its Shards — whole
// tensors or flat slices of them — job-wide Meta and its own Local values)
// and the checkpoint of step 1200 becomes the directory dir/step-0000001200:
//
//	rank-00000.safetensors   rank 0's shards, one tensor per name
//	rank-00000.json          rank 0's index: file size, SHA-256, slices, Local
//	rank-00001.safetensors   … one pair per rank, written in parallel
//	manifest.json            the merged indexes; written last
//
// manifest.json (a Manifest) names the format version, step, world size,
// every rank's file with its byte size and SHA-256, every tensor's full
// shape and the flat slices [offset, offset+len) each rank holds, rank
// 0's Meta and every rank's Local. Every file is written to a temporary
// name, fsynced, renamed and its directory fsynced; the manifest is
// written only after every rank has finished its files, so a directory
// without a manifest — a crash or a full disk in the middle of a save — is
// never loaded, and older checkpoints are deleted (Options.Keep) only
// after the new one is committed. Latest finds the newest complete
// checkpoint; Resume opens it for a restarted program, refusing one saved
// by another run (its Meta "job" differs), and with data.Position for the
// epoch's samples makes a program's elastic resume two calls.
//
// Open reads one at any world size and sharding: Checkpoint.ReadSlice
// assembles any flat slice of any tensor from whichever ranks' files hold
// it, verifying each file's size and SHA-256 against the manifest on
// first use (ErrChecksum names the file). A data-parallel job saves its
// replicated model and optimizer from rank 0 (Snapshot.AddModule,
// AddStateDict) and every rank's loader position as Local; a sharded
// optimizer or model saves each rank's partition as Shards of the full
// tensors, and a job of another size reads its own partition back with
// ReadSlice.
//
// The package uses no process group: Save needs only a Group (rank, size,
// barrier), so it works in tests with goroutine ranks and in programs
// with a distributed.ProcessGroup (see NewGroup). Shard files and the manifest
// must be on a file system every rank sees.
package checkpoint
