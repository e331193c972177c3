// kernels/kernels.cpp — default bodies of the optional Kernels features (step graphs, fused
// matmul outputs, readbacks).
#include "kernels/kernels.h"

#include <vector>

#include "core/error.h"

namespace rill {

void Kernels::matmul_outputs(const Tensor& x, const Tensor& w, const Tensor* bias, std::span<Tensor* const> ys) {
  RILL_ENSURE(w.ndim() == 2, "[matmul_outputs] w {} must be [N, K]", w.describe());
  int64_t total = 0;
  for (const Tensor* y : ys) {
    RILL_ENSURE(y && y->ndim() >= 1, "[matmul_outputs] every output must be a tensor");
    total += y->size(-1);
  }
  RILL_ENSURE(total == w.size(0), "[matmul_outputs] the outputs' widths ({}) must add up to w {}'s rows", total,
              w.describe());
  int64_t begin = 0;
  for (Tensor* y : ys) {
    const int64_t end = begin + y->size(-1);
    const Tensor w_range = w.slice(begin, end);
    Tensor b_range;
    if (bias) b_range = bias->slice(begin, end);
    matmul(x, w_range, bias ? &b_range : nullptr, *y);
    begin = end;
  }
}

namespace {
// The synchronous default: the copy is made in start() (download waits for the queued work).
class SyncReadback final : public Readback {
 public:
  SyncReadback(Kernels& kernels, size_t bytes) : kernels_(kernels), host_(bytes) {}
  void start(const Tensor& src) override {
    RILL_ENSURE(src.nbytes() <= host_.size(), "[readback] {} is {} bytes, more than the {} it was made for",
                src.describe(), src.nbytes(), host_.size());
    kernels_.download(src, host_.data());
    started_ = true;
  }
  const void* wait() override {
    RILL_ENSURE(started_, "[readback] wait() without start()");
    return host_.data();
  }
  size_t capacity() const override { return host_.size(); }

 private:
  Kernels& kernels_;
  std::vector<unsigned char> host_;
  bool started_ = false;
};
}  // namespace

std::unique_ptr<Readback> Kernels::make_readback(size_t bytes) { return std::make_unique<SyncReadback>(*this, bytes); }

void Kernels::begin_capture() { fail("[begin_capture] step graphs are not supported on this backend"); }

std::unique_ptr<StepGraph> Kernels::end_capture() {
  fail("[end_capture] step graphs are not supported on this backend");
}

}  // namespace rill
