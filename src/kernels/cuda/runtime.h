// kernels/cuda/runtime.h — move-only RAII owners of CUDA resources: stream, event, cuBLAS and
// cuBLASLt handles, captured graphs and their executables, and the device query that refuses
// GPUs below sm_80. Destruction never throws (errors while releasing are ignored: the process
// may already be tearing the context down). Device memory is owned by CachingAllocator.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>
#include <utility>

namespace rill::cuda {

/// What the backend needs to know about its GPU.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int num_sms = 0;
  size_t total_memory = 0;
  size_t max_smem_per_block = 0;  ///< opt-in limit for dynamic shared memory
  size_t l2_bytes = 0;
};

/// Selects the device and reads its properties; throws rill::Error when the ordinal does not
/// exist or the GPU is older than sm_80 (the bf16 tensor-core kernels need Ampere or newer).
DeviceInfo open_device(int ordinal);

/// Generic owner: T is a handle type, Destroy a functor releasing it.
template <typename T, typename Destroy>
class Owned {
 public:
  Owned() = default;
  explicit Owned(T handle) : handle_(handle) {}
  ~Owned() { reset(); }
  Owned(Owned&& other) noexcept : handle_(std::exchange(other.handle_, T{})) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, T{});
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != T{}; }
  void reset() {
    if (handle_ != T{}) Destroy{}(handle_);
    handle_ = T{};
  }

 private:
  T handle_{};
};

struct StreamDestroy { void operator()(cudaStream_t s) const { cudaStreamDestroy(s); } };
struct EventDestroy { void operator()(cudaEvent_t e) const { cudaEventDestroy(e); } };
struct CublasDestroy { void operator()(cublasHandle_t h) const { cublasDestroy(h); } };
struct CublasLtDestroy { void operator()(cublasLtHandle_t h) const { cublasLtDestroy(h); } };
struct GraphDestroy { void operator()(cudaGraph_t g) const { cudaGraphDestroy(g); } };
struct GraphExecDestroy { void operator()(cudaGraphExec_t g) const { cudaGraphExecDestroy(g); } };

/// A non-blocking stream (does not synchronise with the legacy default stream).
class Stream : public Owned<cudaStream_t, StreamDestroy> {
 public:
  static Stream create();
  void synchronize() const;
  /// True while this stream is capturing a graph (no host synchronisation allowed then).
  bool capturing() const;
  using Owned::Owned;
};

class Event : public Owned<cudaEvent_t, EventDestroy> {
 public:
  /// timing=false creates a cheap synchronisation-only event.
  static Event create(bool timing = true);
  void record(cudaStream_t stream) const;
  void synchronize() const;
  /// Milliseconds between two recorded, completed events.
  static float elapsed_ms(const Event& start, const Event& stop);
  using Owned::Owned;
};

class CublasHandle : public Owned<cublasHandle_t, CublasDestroy> {
 public:
  static CublasHandle create(cudaStream_t stream);
  using Owned::Owned;
};

class CublasLtHandle : public Owned<cublasLtHandle_t, CublasLtDestroy> {
 public:
  static CublasLtHandle create();
  using Owned::Owned;
};

/// An instantiated graph; replay() launches it on a stream.
class GraphExec : public Owned<cudaGraphExec_t, GraphExecDestroy> {
 public:
  void replay(cudaStream_t stream) const;
  using Owned::Owned;
};

/// A captured graph. Capture: begin_capture(stream); enqueue work; Graph g = end_capture(stream).
class Graph : public Owned<cudaGraph_t, GraphDestroy> {
 public:
  static void begin_capture(cudaStream_t stream);
  static Graph end_capture(cudaStream_t stream);
  GraphExec instantiate() const;
  using Owned::Owned;
};

}  // namespace rill::cuda
