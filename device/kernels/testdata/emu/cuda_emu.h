// A CPU stand-in for the CUDA execution model, enough to run cohort's
// kernels in tests on a machine without a GPU (emulate_test.go). Each
// thread of a block is a coroutine (ucontext) on one OS thread; blocks run
// one after another. A thread runs until it reaches __syncthreads or a
// warp shuffle, where it waits until every live thread of its block (or
// lane of its warp) has arrived; threads that return drop out, as exited
// CUDA threads do. Should every live thread wait on a barrier that cannot
// complete (a __syncthreads under divergent control flow), the launch
// fails with "deadlock". Static __shared__ arrays are function statics
// (one block runs at a time); the test rewrites extern __shared__ arrays
// to point at the launch's dynamic buffer. Float operations round as the
// _rn intrinsics do when compiled with -ffp-contract=off.
#include <cmath>
#include <math.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <setjmp.h>
#include <ucontext.h>
#include <utility>
#include <vector>

struct emu_dim3 {
	unsigned x = 1, y = 1, z = 1;
};
inline emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

enum emu_state { EMU_RUN, EMU_BLOCK_WAIT, EMU_WARP_WAIT, EMU_DONE };

struct emu_thread {
	ucontext_t ctx; // the first entry only
	jmp_buf jb;     // where the thread waits
	bool started;
	char* stack = nullptr; // emu_stack bytes, never freed: one set per process
	emu_state state;
	emu_dim3 idx;
	float shfl;
};

struct emu_sched {
	jmp_buf main;
	std::vector<emu_thread> th;
	int cur;
	void (*fn)(void**);
	void** args;
};
inline emu_sched emu;
constexpr size_t emu_stack = 64 << 10;
inline float* emu_dyn_smem;

#define __global__
#define __device__
#define __forceinline__ inline
#define __align__(n) alignas(n)
#define __shared__ static

// Switches go through _setjmp/_longjmp, which save no signal mask and so
// make no system call; a thread's first entry goes through setcontext
// onto its own stack.
inline void emu_wait(emu_state s) {
	emu.th[emu.cur].state = s;
	if (!_setjmp(emu.th[emu.cur].jb))
		_longjmp(emu.main, 1);
}
inline void __syncthreads() { emu_wait(EMU_BLOCK_WAIT); }

// emu_shfl publishes v, waits for the warp's live lanes, and reads src's.
inline float emu_shfl(float v, int src) {
	int base = emu.cur & ~31;
	emu.th[emu.cur].shfl = v;
	emu_wait(EMU_WARP_WAIT);
	float r = emu.th[base + (src & 31)].shfl;
	emu_wait(EMU_WARP_WAIT); // nobody overwrites a slot before every lane has read
	return r;
}
inline float __shfl_xor_sync(unsigned, float v, int o) { return emu_shfl(v, (emu.cur & 31) ^ o); }
inline float __shfl_sync(unsigned, float v, int src) { return emu_shfl(v, src); }

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// emu_bf16_bits rounds to nearest even, NaN to a quiet NaN, as
// cvt.rn.bf16.f32 does.
inline unsigned short emu_bf16_bits(float x) {
	unsigned u = __float_as_uint(x);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (unsigned short)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (unsigned short)(u >> 16);
}

inline void emu_entry() {
	emu.fn(emu.args);
	emu.th[emu.cur].state = EMU_DONE;
	_longjmp(emu.main, 1);
}

// emu_run_block runs one block's threads to completion; false on deadlock.
inline bool emu_run_block(int nt) {
	for (;;) {
		bool ran = false;
		for (int t = 0; t < nt; t++) {
			if (emu.th[t].state != EMU_RUN)
				continue;
			emu.cur = t;
			threadIdx = emu.th[t].idx;
			if (!_setjmp(emu.main)) {
				if (!emu.th[t].started) {
					emu.th[t].started = true;
					setcontext(&emu.th[t].ctx);
				}
				_longjmp(emu.th[t].jb, 1);
			}
			ran = true;
		}
		// Release the warps whose live lanes all wait at a shuffle.
		for (int w = 0; w < nt; w += 32) {
			bool all = true, any = false;
			for (int t = w; t < w + 32 && t < nt; t++) {
				all &= emu.th[t].state == EMU_WARP_WAIT || emu.th[t].state == EMU_DONE;
				any |= emu.th[t].state == EMU_WARP_WAIT;
			}
			if (all && any)
				for (int t = w; t < w + 32 && t < nt; t++)
					if (emu.th[t].state == EMU_WARP_WAIT)
						emu.th[t].state = EMU_RUN, ran = true;
		}
		// Release the block when every live thread waits at __syncthreads.
		bool all = true, any = false, live = false;
		for (int t = 0; t < nt; t++) {
			all &= emu.th[t].state == EMU_BLOCK_WAIT || emu.th[t].state == EMU_DONE;
			any |= emu.th[t].state == EMU_BLOCK_WAIT;
			live |= emu.th[t].state != EMU_DONE;
		}
		if (all && any)
			for (int t = 0; t < nt; t++)
				if (emu.th[t].state == EMU_BLOCK_WAIT)
					emu.th[t].state = EMU_RUN, ran = true;
		if (!live)
			return true;
		if (!ran)
			return false;
	}
}

// emu_launch runs fn(args) over the grid, one block at a time.
inline bool emu_launch(void (*fn)(void**), void** args, emu_dim3 grid, emu_dim3 block, size_t shared) {
	gridDim = grid;
	blockDim = block;
	int nt = block.x * block.y * block.z;
	std::vector<float> dyn(shared / 4 + 1);
	emu_dyn_smem = dyn.data();
	emu.fn = fn;
	emu.args = args;
	if ((int)emu.th.size() < nt)
		emu.th.resize(nt);
	for (auto& th : emu.th)
		if (!th.stack)
			th.stack = new char[emu_stack];
	for (unsigned bz = 0; bz < grid.z; bz++)
		for (unsigned by = 0; by < grid.y; by++)
			for (unsigned bx = 0; bx < grid.x; bx++) {
				blockIdx = {bx, by, bz};
				for (int t = 0; t < nt; t++) {
					emu_thread& th = emu.th[t];
					th.idx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
					th.state = EMU_RUN;
					th.started = false;
					getcontext(&th.ctx);
					th.ctx.uc_stack.ss_sp = th.stack;
					th.ctx.uc_stack.ss_size = emu_stack;
					th.ctx.uc_link = nullptr;
					makecontext(&th.ctx, emu_entry, 0);
				}
				if (!emu_run_block(nt)) {
					std::fprintf(stderr, "emu: deadlock in block (%u, %u, %u): live threads wait on a barrier that cannot complete\n", bx, by, bz);
					return false;
				}
			}
	return true;
}

// emu_main reads a launch from the spec file argv[1]:
//
//	kernel NAME
//	grid X Y Z
//	block X Y Z
//	shared BYTES
//	buf PATH        (a pointer argument: the file's bytes, written back after the run)
//	i32 V | i64 V | f32 V
//
// and runs it with the kernel found by lookup.
typedef void (*emu_fn)(void**);
inline int emu_main(int argc, char** argv, emu_fn (*lookup)(const char*)) {
	if (argc != 2) {
		std::fprintf(stderr, "usage: emu SPEC\n");
		return 2;
	}
	FILE* f = std::fopen(argv[1], "r");
	if (!f) {
		std::perror(argv[1]);
		return 2;
	}
	char word[64], text[4096];
	emu_fn fn = nullptr;
	emu_dim3 grid, block;
	size_t shared = 0;
	std::vector<void*> args;
	std::vector<std::pair<std::string, std::vector<char>>> bufs;
	bufs.reserve(64);
	while (std::fscanf(f, "%63s %4095s", word, text) == 2) {
		std::string w = word;
		if (w == "kernel") {
			fn = lookup(text);
			if (!fn) {
				std::fprintf(stderr, "emu: no kernel %s\n", text);
				return 2;
			}
		} else if (w == "grid" || w == "block") {
			emu_dim3& d = w == "grid" ? grid : block;
			d.x = std::atoi(text);
			if (std::fscanf(f, "%u %u", &d.y, &d.z) != 2)
				return 2;
		} else if (w == "shared") {
			shared = std::atoll(text);
		} else if (w == "buf") {
			FILE* b = std::fopen(text, "rb");
			if (!b) {
				std::perror(text);
				return 2;
			}
			std::vector<char> data;
			char chunk[65536];
			size_t n;
			while ((n = std::fread(chunk, 1, sizeof chunk, b)) > 0)
				data.insert(data.end(), chunk, chunk + n);
			std::fclose(b);
			data.resize(data.size() + 16); // reads just past the end are the kernel's bug, not a crash here
			bufs.emplace_back(text, std::move(data));
			args.push_back(new void*(bufs.back().second.data()));
		} else if (w == "i32") {
			args.push_back(new int(std::atoi(text)));
		} else if (w == "i64") {
			args.push_back(new long long(std::atoll(text)));
		} else if (w == "f32") {
			args.push_back(new float(std::strtof(text, nullptr)));
		} else {
			std::fprintf(stderr, "emu: unknown line %s\n", word);
			return 2;
		}
	}
	std::fclose(f);
	if (!fn)
		return 2;
	// Pointer arguments are passed as the address of the pointer, as
	// cuLaunchKernel takes them.
	if (!emu_launch(fn, args.data(), grid, block, shared))
		return 1;
	for (auto& [path, data] : bufs) {
		FILE* b = std::fopen(path.c_str(), "wb");
		std::fwrite(data.data(), 1, data.size() - 16, b);
		std::fclose(b);
	}
	return 0;
}
