/* Calls the C API with an enum argument outside its values, as a C caller can: in C an enum
** parameter is an integer, while C++ code that merely loads such a value has undefined behaviour
** (UBSan reports it in the test itself, not in the library). */
#include <dsrt.h>

dsrt_status export_safetensors_with_raw_dtype(dsrt_checkpoint *ckpt, const char *path, int raw_dtype) {
    return dsrt_checkpoint_export_safetensors(ckpt, path, (dsrt_dtype)raw_dtype);
}
