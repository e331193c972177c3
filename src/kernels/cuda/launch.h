// kernels/cuda/launch.h — kernel launches with programmatic dependent launch (PDL, sm_90+).
//
// A kernel launched through launch_pdl may start while the kernel before it in the stream is still
// running (a CUDA graph captures the same edge), so its CTAs are resident and its constant loads
// (weights) are in flight by the time its inputs are ready: the launch latency and the ramp-up of
// each of a decode step's ~400 launches overlap the tail of the previous one. The contract, for
// every kernel launched this way:
//   - pdl_wait() before the first read of anything an earlier kernel wrote AND before the first
//     global write (an earlier kernel may still be reading the buffer); only data no kernel of
//     the step writes may be read before it: weights, biases, tables, the step's metadata
//     (positions, lengths, slots, block tables: uploaded before the step's first kernel, and no
//     kernel writes them) and K/V cache rows of earlier steps (keys before a row's new tokens);
//     every kernel's loads of such data are best issued there (a decode step's latency-bound
//     kernels each wait on one round trip fewer);
//   - a thread of every CTA calls pdl_wait() before the CTA exits, even with no work: a kernel's completion
//     then implies its predecessors', which later kernels rely on;
//   - pdl_trigger() once the kernel no longer needs its SM slots to itself: the next kernel may
//     then launch (its own pdl_wait still waits for this whole grid to finish and its writes
//     to be visible; the trigger fires when every CTA has issued it or exited).
// Kernels launched the ordinary way serialize fully, as before. pdl_wait is a no-op when the
// kernel was launched without the attribute, and both are compiled out below sm_90.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/check.h"

namespace rill::cuda {

/// Whether launch_pdl asks for overlap: the device is sm_90+ and RILL_PDL is not 0 (set by the
/// backend at start; see set_pdl_enabled).
bool pdl_enabled();
void set_pdl_enabled(bool on);
/// RILL_PDL: null → true; "1" → true; "0" → false; anything else → an error naming the variable.
bool parse_pdl_setting(const char* value);
/// Whether the latency-bound kernels of a decode step (add+RMSNorm, RoPE, SwiGLU, the split
/// attention and its combine) trigger before their wait rather than after it (pdl_wait_trigger).
bool pdl_early_trigger();
/// The RoPE (q/k-norm + RoPE + K/V write) kernel's and the decode attention's (split kernel, cluster
/// kernel, span combine) trigger: before their wait when pdl_early_trigger() or when
/// set_pdl_trigger chose that kernel alone.
bool pdl_rope_early_trigger();
bool pdl_attention_early_trigger();
/// The add + RMSNorm kernel's trigger: before its wait when pdl_early_trigger() or mode 4.
bool pdl_norm_early_trigger();
/// A parse_pdl_trigger mode: 0 after every wait, 1 before every wait, 2 / 3 / 4 before the wait in the
/// RoPE / the decode attention / the add + RMSNorm kernels only (4 is the backend's default; the others
/// are measurement knobs).
void set_pdl_trigger(int mode);
/// RILL_PDL_TRIGGER: null → the default (see the backend); "wait" → 0 (trigger after the wait);
/// "early" → 1 (before it); "rope" / "attention" / "norm" → 2 / 3 / 4 (before it in those kernels
/// only); anything else → an error naming the variable.
int parse_pdl_trigger(const char* value);

/// The GPU's global timer in ns (%globaltimer): trace builds and measurement aids.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t = 0;
#if defined(__CUDA_ARCH__)
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
#endif
  return t;
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#if defined(RILL_PDL_TRACE)
// Trace builds (cmake -DRILL_PDL_TRACE=ON; never the default): block (0, 0, 0)'s thread 0 of every
// kernel that calls pdl_wait records when it reached the wait and when the wait released it (the
// %globaltimer, ns) with the call site, in a host-mapped buffer written out at exit to the file
// named by RILL_PDL_TRACE (tools/pdl_trace_summary.py reads it). Release to release of consecutive
// kernels is a kernel's share of the step's critical path; arrival before the predecessor's
// release shows how early it became resident. Each translation unit has its own copy of the
// device-side handle, set through the registration below when the backend starts. A kernel may also
// call pdl_trace_done() where block (0, 0, 0)'s thread 0 ends its work: a record of its own (line -1,
// `release` the time), which the summary pairs with that kernel's wait to split its span into work
// (release to done) and hand-off (done to the next release); pdl_trace_mark(tag) records points
// inside the work the same way. Recording must not move what it measures: a record's slot comes
// from an atomic on the device counter, a round trip (~1 µs behind a decode GEMM's stream), so the
// wait's slot is reserved before the wait (its latency hides in the lead) and a mark only keeps its
// time in shared memory — pdl_trace_done writes the marks with its own record, after the work.
// (Before: an atomic after the wait and at each mark, ~1-2 µs each on block 0's path; run AC.)
struct PdlTraceRecord {
  unsigned long long arrive, release;
  int line;
  char file[20];  // the call site's file name, its last 19 characters
};
struct PdlTrace {
  PdlTraceRecord* records = nullptr;  // device view of the host-mapped buffer
  unsigned* count = nullptr;
  unsigned capacity = 0;
};
/// Records a function that copies the trace handle into one translation unit's device copy.
bool register_pdl_trace_unit(void (*set)(const PdlTrace&));
/// Allocates the buffer, hands it to every unit and writes it out at exit (RILL_PDL_TRACE unset: nothing).
void pdl_trace_start();
/// Whether the kernel `name` ("attention", "rope", "norm": the add + RMSNorm cluster kernel) is launched a
/// second time right after itself
/// (RILL_PDL_TRACE_TWICE, a comma-separated list): the repeat runs the same instructions and data with
/// its code just run — against the first launch, what a kernel's work costs when its code is warm in
/// the SM (run AD). Measurement only: a repeated RoPE rotates q twice, a repeated norm adds the residual
/// twice. Another name is refused.
bool pdl_trace_twice(const char* name);

#if defined(__CUDACC__)
namespace {
__device__ PdlTrace g_pdl_trace;
[[maybe_unused]] const bool g_pdl_trace_unit = register_pdl_trace_unit(
    [](const PdlTrace& t) { RILL_CUDA_CHECK(cudaMemcpyToSymbol(g_pdl_trace, &t, sizeof t)); });
}  // namespace
#endif

// The marks' slots (tags 1..kPdlTraceMarks): static shared memory of the kernels that mark only.
constexpr int kPdlTraceMarks = 9;
#if defined(__CUDACC__)
namespace {
__shared__ unsigned long long g_pdl_trace_marks[kPdlTraceMarks];
}  // namespace
#endif

// Reserves n consecutive record slots (the counter's round trip); capacity-checked at write.
__device__ __forceinline__ unsigned pdl_trace_reserve(unsigned n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // (g_pdl_trace exists in device code only)
  return atomicAdd(g_pdl_trace.count, n);
#else
  return 0;
#endif
}

// Writes record i (the call site's file name, its last 19 characters): posted stores, no wait.
__device__ __forceinline__ void pdl_trace_write(unsigned i, unsigned long long arrive, unsigned long long release,
                                                int line, const char* file) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (i >= g_pdl_trace.capacity) return;
  PdlTraceRecord& r = g_pdl_trace.records[i];
  r.arrive = arrive;
  r.release = release;
  r.line = line;
  int n = 0;
  while (file[n]) ++n;
  const int from = n > 19 ? n - 19 : 0;
  for (int j = 0; j < 20; ++j) r.file[j] = from + j < n ? file[from + j] : 0;
#endif
}

__device__ __forceinline__ bool pdl_trace_block0() {
#if defined(__CUDA_ARCH__)
  return !(threadIdx.x || threadIdx.y || blockIdx.x || blockIdx.y || blockIdx.z);
#else
  return false;
#endif
}

__device__ __forceinline__ void pdl_wait(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const bool rec = pdl_trace_block0() && g_pdl_trace.records;
  const unsigned long long arrive = rec ? global_ns() : 0;
  const unsigned slot = rec ? pdl_trace_reserve(1) : 0;  // requested before the wait
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (rec) pdl_trace_write(slot, arrive, global_ns(), line, file);
#endif
}
// The done record and every mark slot (a slot this kernel did not set holds an older time or
// garbage: the summary keeps a mark only between its kernel's release and done).
__device__ __forceinline__ void pdl_trace_done(const char* file = __builtin_FILE()) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (!pdl_trace_block0() || !g_pdl_trace.records) return;
  const unsigned long long now = global_ns();
  const unsigned slot = pdl_trace_reserve(1 + kPdlTraceMarks);
  pdl_trace_write(slot, 0, now, -1, file);
  for (int t = 0; t < kPdlTraceMarks; ++t) pdl_trace_write(slot + 1 + t, 0, g_pdl_trace_marks[t], -(11 + t), file);
#endif
}
// A point inside block (0, 0, 0)'s work (tag 1..kPdlTraceMarks; line -(10 + tag)), for splitting a
// kernel's work: kept in shared memory until pdl_trace_done (a kernel that marks must call it); the
// summary reports each tag's time after the kernel's release.
__device__ __forceinline__ void pdl_trace_mark(int tag) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (pdl_trace_block0() && g_pdl_trace.records) g_pdl_trace_marks[tag - 1] = global_ns();
#endif
}
// A mark at a time measured elsewhere (another block's, read by block (0, 0, 0)).
__device__ __forceinline__ void pdl_trace_mark_at(int tag, unsigned long long t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (pdl_trace_block0() && g_pdl_trace.records) g_pdl_trace_marks[tag - 1] = t;
#endif
}
#else
__device__ __forceinline__ void pdl_trace_done() {}
__device__ __forceinline__ void pdl_trace_mark(int) {}
__device__ __forceinline__ void pdl_trace_mark_at(int, unsigned long long) {}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
#endif

// A kernel's parameters read into the SM's constant cache before its wait: one word of every 32
// bytes of `p`, which must be a __grid_constant__ parameter (its address is then the parameter space
// itself, no copy). A parameter first used after the wait is otherwise a miss there — a memory round
// trip behind the next GEMM's weight burst, on the kernel's path (bench/RESULTS.md run AJ).
template <typename T>
__device__ __forceinline__ void warm_params(const T& p) {
#if defined(__CUDA_ARCH__)
  const unsigned* w = reinterpret_cast<const unsigned*>(&p);
  unsigned acc = 0;
#pragma unroll
  for (int i = 0; i < int(sizeof(T) / 4); i += 8) acc ^= w[i];
  asm volatile("" ::"r"(acc));
#endif
}
// A latency-bound kernel's wait with its trigger: after the wait, or before it when `early`
// (pdl_early_trigger: the next kernel — in a decode step, the next GEMM — then launches and
// requests its weights while this one still waits; its own wait still covers this whole grid).
#if defined(RILL_PDL_TRACE)
__device__ __forceinline__ void pdl_wait_trigger(bool early, int line = __builtin_LINE(),
                                                 const char* file = __builtin_FILE()) {
  if (early) pdl_trigger();
  pdl_wait(line, file);
  if (!early) pdl_trigger();
}
#else
__device__ __forceinline__ void pdl_wait_trigger(bool early) {
  if (early) pdl_trigger();
  pdl_wait();
  if (!early) pdl_trigger();
}
#endif

/// launch_pdl with thread-block clusters of `cluster` CTAs (1 × 1 × 1: none; sm_90+).
template <typename... Params, typename... Args>
void launch_pdl_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                        dim3 cluster, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2] = {};
  unsigned n = 0;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster.x;
    attr[n].val.clusterDim.y = cluster.y;
    attr[n].val.clusterDim.z = cluster.z;
    ++n;
  }
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  RILL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

/// kernel<<<grid, block, smem, stream>>>(args...), allowed to overlap its predecessor when
/// pdl_enabled(). Checked like every launch.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_pdl_cluster(kernel, grid, block, smem, stream, dim3(1, 1, 1), std::forward<Args>(args)...);
}

}  // namespace rill::cuda
