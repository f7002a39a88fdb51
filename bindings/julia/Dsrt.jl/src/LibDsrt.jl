# LibDsrt -- the raw C interface of libdsrt (include/dsrt.h): this file finds the library, the
# generated capi_gen.jl declares everything in the header, one ccall wrapper per function, in
# header order. Arguments and return values are passed through unchanged; status checking is done
# in one place, `check` in the high-level module (Dsrt.jl).
module LibDsrt

using Libdl

# ---- finding the library --------------------------------------------------------------------
# DSRT_LIB (a file), then DSRT_DIR (an install prefix or build folder), then the system search path.
function _find_libdsrt()
    lib = get(ENV, "DSRT_LIB", "")
    isempty(lib) || return lib
    dir = get(ENV, "DSRT_DIR", "")
    if !isempty(dir)
        for sub in ("lib", "lib64", joinpath("lib", "x86_64-linux-gnu"), "")
            candidate = joinpath(dir, sub, "libdsrt.so.0")
            isfile(candidate) && return candidate
        end
        error("DSRT_DIR=$dir holds no lib/libdsrt.so.0; point it at an install prefix or build folder")
    end
    found = Libdl.find_library(["libdsrt.so.0", "libdsrt"])
    isempty(found) && error("libdsrt not found: set DSRT_LIB to the library file or DSRT_DIR to its prefix")
    return found
end

const libdsrt = _find_libdsrt()

# ---- the C interface ------------------------------------------------------------------------------
# Constants, types, struct layouts and one ccall wrapper per C function, generated from
# include/dsrt.h by scripts/gen-bindings.sh (never edited by hand; `make test` fails when it differs
# from what the header generates).
include("capi_gen.jl")

end # module LibDsrt
