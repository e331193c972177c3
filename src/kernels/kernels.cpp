// kernels/kernels.cpp — default bodies of the optional Kernels features (step graphs).
#include "kernels/kernels.h"

#include "core/error.h"

namespace rill {

void Kernels::begin_capture() { fail("[begin_capture] step graphs are not supported on this backend"); }

std::unique_ptr<StepGraph> Kernels::end_capture() {
  fail("[end_capture] step graphs are not supported on this backend");
}

}  // namespace rill
