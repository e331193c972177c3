// kernels/cuda/runtime.cpp — device query and the RAII wrappers' factories.
#include "kernels/cuda/runtime.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <string_view>

#include "core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace rill::cuda {

namespace {
std::atomic<bool> g_pdl{false};
std::atomic<int> g_pdl_trigger{0};  // a parse_pdl_trigger mode (set_pdl_trigger)
}

bool pdl_early_trigger() { return g_pdl_trigger.load(std::memory_order_relaxed) == 1; }
bool pdl_rope_early_trigger() {
  const int mode = g_pdl_trigger.load(std::memory_order_relaxed);
  return mode == 1 || mode == 2;
}
bool pdl_norm_early_trigger() {
  const int mode = g_pdl_trigger.load(std::memory_order_relaxed);
  return mode == 1 || mode == 4;
}
bool pdl_attention_early_trigger() {
  const int mode = g_pdl_trigger.load(std::memory_order_relaxed);
  return mode == 1 || mode == 3;
}
void set_pdl_trigger(int mode) { g_pdl_trigger.store(mode, std::memory_order_relaxed); }

int parse_pdl_trigger(const char* value) {
  if (!value) return -1;
  const std::string_view v(value);
  if (v == "wait") return 0;
  if (v == "early") return 1;
  if (v == "rope") return 2;
  if (v == "attention") return 3;
  if (v == "norm") return 4;
  fail("RILL_PDL_TRIGGER: must be wait, early, rope, attention or norm (when the latency-bound kernels let the "
       "next kernel launch: after their wait, before it, or before it in the RoPE, the decode attention or the "
       "add + RMSNorm kernels only), got '{}'",
       v);
}

bool pdl_enabled() { return g_pdl.load(std::memory_order_relaxed); }
void set_pdl_enabled(bool on) { g_pdl.store(on, std::memory_order_relaxed); }

bool parse_pdl_setting(const char* value) {
  if (!value) return true;
  const std::string_view v(value);
  if (v == "1") return true;
  if (v == "0") return false;
  fail("RILL_PDL: must be 0 (kernels never overlap) or 1 (the default), got '{}'", v);
}

#if defined(RILL_PDL_TRACE)
namespace {
std::vector<void (*)(const PdlTrace&)>& pdl_trace_units() {
  static std::vector<void (*)(const PdlTrace&)> units;
  return units;
}
PdlTraceRecord* g_trace_host = nullptr;
unsigned g_trace_capacity = 0;
std::string g_trace_path;

void write_pdl_trace() {
  std::FILE* f = std::fopen(g_trace_path.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "seq,arrive_ns,release_ns,file,line\n");
  // Every slot: a done record reserves its kernel's mark slots too, and a mark never set may hold 0
  // (the buffer starts zeroed, so unused slots are skipped as well).
  for (unsigned i = 0; i < g_trace_capacity; ++i) {
    const PdlTraceRecord& r = g_trace_host[i];
    if (r.release == 0) continue;
    char file[21] = {};
    std::memcpy(file, r.file, 20);
    std::fprintf(f, "%u,%llu,%llu,%s,%d\n", i, r.arrive, r.release, file, r.line);
  }
  std::fclose(f);
}
}  // namespace

bool register_pdl_trace_unit(void (*set)(const PdlTrace&)) {
  pdl_trace_units().push_back(set);
  return true;
}

bool pdl_trace_twice(const char* name) {
  static const std::string list = [] {
    std::string l(",");
    if (const char* v = std::getenv("RILL_PDL_TRACE_TWICE")) l.append(v);
    l.append(",");
    for (size_t at = 1; at < l.size(); at = l.find(',', at) + 1) {  // each name, a typo named in the error
      const std::string_view item(l.data() + at, l.find(',', at) - at);
      if (!item.empty() && item != "attention" && item != "rope" && item != "norm")
        fail("RILL_PDL_TRACE_TWICE: a comma-separated list of attention, rope, norm; got '{}'", item);
    }
    return l;
  }();
  std::string key(",");
  key.append(name).append(",");
  return list.find(key) != std::string::npos;
}

void pdl_trace_start() {
  const char* path = std::getenv("RILL_PDL_TRACE");
  if (!path || g_trace_host) return;
  g_trace_path = path;
  if (std::FILE* f = std::fopen(path, "w")) std::fclose(f);  // fail now, not silently at exit
  else fail("RILL_PDL_TRACE: cannot write the trace file '{}'", path);
  g_trace_capacity = 1u << 21;
  const size_t bytes = size_t(g_trace_capacity) * sizeof(PdlTraceRecord);
  RILL_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&g_trace_host), bytes, cudaHostAllocMapped));
  std::memset(g_trace_host, 0, bytes);
  PdlTrace t;
  RILL_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&t.records), g_trace_host, 0));
  RILL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&t.count), sizeof(unsigned)));
  RILL_CUDA_CHECK(cudaMemset(t.count, 0, sizeof(unsigned)));
  t.capacity = g_trace_capacity;
  for (auto set : pdl_trace_units()) set(t);
  std::atexit(write_pdl_trace);  // runs before the CUDA runtime's own exit handlers (registered earlier)
}
#endif

DeviceInfo open_device(int ordinal) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA device {}: no usable CUDA driver/device ({})", ordinal, cudaGetErrorString(err));
  }
  if (ordinal < 0 || ordinal >= count)
    fail("CUDA device {} does not exist ({} device(s) present)", ordinal, count);
  RILL_CUDA_CHECK(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  RILL_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = prop.name;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.num_sms = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.max_smem_per_block = prop.sharedMemPerBlockOptin;
  info.l2_bytes = size_t(prop.l2CacheSize);
  if (prop.major < 8)
    fail("CUDA device {} ({}) has compute capability {}.{}; rill's CUDA backend needs sm_80 or newer "
         "(bf16 tensor cores); use --device cpu",
         ordinal, prop.name, prop.major, prop.minor);
  return info;
}

Stream Stream::create() {
  cudaStream_t s = nullptr;
  RILL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}

void Stream::synchronize() const { RILL_CUDA_CHECK(cudaStreamSynchronize(get())); }

bool Stream::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  RILL_CUDA_CHECK(cudaStreamIsCapturing(get(), &status));
  return status != cudaStreamCaptureStatusNone;
}

Event Event::create(bool timing) {
  cudaEvent_t e = nullptr;
  RILL_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}

void Event::record(cudaStream_t stream) const { RILL_CUDA_CHECK(cudaEventRecord(get(), stream)); }
void Event::synchronize() const { RILL_CUDA_CHECK(cudaEventSynchronize(get())); }

float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.f;
  RILL_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

CublasHandle CublasHandle::create(cudaStream_t stream) {
  cublasHandle_t h = nullptr;
  RILL_CUBLAS_CHECK(cublasCreate(&h));
  CublasHandle owned(h);
  RILL_CUBLAS_CHECK(cublasSetStream(h, stream));
  return owned;
}

CublasLtHandle CublasLtHandle::create() {
  cublasLtHandle_t h = nullptr;
  RILL_CUBLAS_CHECK(cublasLtCreate(&h));
  return CublasLtHandle(h);
}

void GraphExec::replay(cudaStream_t stream) const { RILL_CUDA_CHECK(cudaGraphLaunch(get(), stream)); }

void Graph::begin_capture(cudaStream_t stream) {
  RILL_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

Graph Graph::end_capture(cudaStream_t stream) {
  cudaGraph_t g = nullptr;
  RILL_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
  return Graph(g);
}

GraphExec Graph::instantiate() const {
  cudaGraphExec_t e = nullptr;
  RILL_CUDA_CHECK(cudaGraphInstantiate(&e, get(), 0));
  return GraphExec(e);
}

}  // namespace rill::cuda
