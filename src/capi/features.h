// features.h -- what this build and this machine can do (dsrt_has_feature).
#pragma once

#include <string>

namespace dsrt {

bool has_feature(const std::string &name);
bool cpu_has_avx512();  // AVX-512F (and BW/VL for the 16-bit conversions) usable by the OS
bool cpu_has_avx2();    // AVX2 and FMA

// Returns a malloc'ed copy of text for the C API's char ** results (freed by dsrt_free).
char *dup_for_caller(const std::string &text);

}  // namespace dsrt
