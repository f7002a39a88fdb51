// isa_test_util.h -- the CPU kernels' instruction sets in tests: which this machine runs, and a
// guard that puts the process-wide choice back when a test ends.
#pragma once

#include <string>
#include <vector>

#include "optim/cpu_optimizer.h"

namespace dsrt {
namespace isa_test {

// The kernel builds this CPU can run, in the order scalar, avx2, avx512.
inline std::vector<std::string> available_isas() {
  std::vector<std::string> isas;
  for (const char *isa : {"scalar", "avx2", "avx512"})
    if (cpu_optimizer_isa_available(isa)) isas.push_back(isa);
  return isas;
}

// Restores the process-wide ISA when a test ends.
class IsaGuard {
 public:
  IsaGuard() : saved_(cpu_optimizer_isa()) {}
  ~IsaGuard() { (void)cpu_optimizer_set_isa(saved_.c_str()); }
  IsaGuard(const IsaGuard &) = delete;
  IsaGuard &operator=(const IsaGuard &) = delete;

 private:
  std::string saved_;
};

}  // namespace isa_test
}  // namespace dsrt
