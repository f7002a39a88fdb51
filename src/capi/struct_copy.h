// struct_copy.h -- the struct_size rule of dsrt.h for the public structs that cross the ABI, in
// one place: the library reads and writes no more than the caller's struct_size bytes. The engine
// fills (or reads) a whole struct of this build's size; capi copies between it and the caller's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "util/status.h"

namespace dsrt {

// DSRT_ERR_INVALID_ARGUMENT unless the caller's struct holds at least its struct_size field;
// what names the argument in the message ("step: out", "options").
template <typename Public>
Status check_struct_size(const Public &caller, const char *what, const char *type) {
  if (caller.struct_size < sizeof(uint64_t))
    return Error(DSRT_ERR_INVALID_ARGUMENT, "%s->struct_size is %llu; set it to sizeof(%s)", what,
                 static_cast<unsigned long long>(caller.struct_size), type);
  return Status::Ok();
}

// Copies the fields after struct_size from the library's whole struct into the caller's, no more
// than the caller's struct_size bytes; the caller's struct_size is left as the caller set it.
template <typename Public>
void copy_out(const Public &full, Public *caller) {
  const uint64_t size = std::min<uint64_t>(caller->struct_size, sizeof full);
  std::memcpy(reinterpret_cast<char *>(caller) + sizeof(uint64_t), reinterpret_cast<const char *>(&full) + sizeof(uint64_t),
              size - sizeof(uint64_t));
}

// Copies the caller's fields after struct_size into *full (which holds this build's defaults for
// the fields the caller's older struct does not have).
template <typename Public>
void copy_in(const Public &caller, Public *full) {
  const uint64_t size = std::min<uint64_t>(caller.struct_size, sizeof *full);
  std::memcpy(reinterpret_cast<char *>(full) + sizeof(uint64_t), reinterpret_cast<const char *>(&caller) + sizeof(uint64_t),
              size - sizeof(uint64_t));
}

}  // namespace dsrt
