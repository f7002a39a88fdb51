#!/usr/bin/env python3
"""Checks the Julia bindings against include/dsrt.h without a Julia runtime:
  1. every DSRT_API function has exactly one ccall in LibDsrt.jl, to the same symbol, with the
     same number of arguments, argument types and return type (C type -> accepted Julia types);
     no ccall names a symbol the header does not declare;
  2. every call of a LibDsrt wrapper from the high-level module and the tests passes as many
     arguments as the header's function takes;
  3. constants, enum values and the public structs' fields (names, types, order) match.
Usage: check_consistency.py REPO_ROOT      Exit 0 if consistent, 1 with a list of problems."""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
HEADER = os.path.join(ROOT, "include", "dsrt.h")
PKG = os.path.join(ROOT, "bindings", "julia", "Dsrt.jl")
LIB = os.path.join(PKG, "src", "LibDsrt.jl")
CALLERS = [os.path.join(PKG, "src", "Dsrt.jl")] + [
    os.path.join(PKG, "test", f) for f in sorted(os.listdir(os.path.join(PKG, "test"))) if f.endswith(".jl")]

problems = []


def strip_c_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def squash(s):
    return " ".join(s.split())


# ---- the header -------------------------------------------------------------------------------
header_raw = open(HEADER).read()
header = strip_c_comments(header_raw)
code = squash("\n".join(l for l in header.splitlines() if not l.lstrip().startswith("#")))
functions = {}  # name -> (return C type, [param C types])
for decl in code.split("DSRT_API ")[1:]:
    decl = decl[:decl.index(";")]
    m = re.match(r"(.*?)\b(dsrt_\w+)\s*\((.*)\)\s*$", decl)
    ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
    types = []
    if params not in ("", "void"):
        for p in params.split(","):
            p = p.strip()
            pm = re.match(r"(.*?)(\w+)$", p)
            types.append(squash(pm.group(1)) if pm and pm.group(1).strip() else p)
    functions[name] = (squash(ret), types)

OPAQUE = {"dsrt_config", "dsrt_comm", "dsrt_engine", "dsrt_tensor", "dsrt_checkpoint"}
STRUCTS = {"dsrt_step_result", "dsrt_memory_stats"}
SCALARS = {
    "int32_t": {"Int32", "Cint"}, "int": {"Cint", "Int32"}, "int64_t": {"Int64"}, "uint64_t": {"UInt64"},
    "double": {"Float64", "Cdouble"}, "float": {"Float32", "Cfloat"}, "dsrt_status": {"dsrt_status", "Int32", "Cint"},
    "dsrt_dtype": {"dsrt_dtype", "UInt32", "Cuint"}, "dsrt_log_fn": {"Ptr{Cvoid}"}, "void": {"Cvoid", "Nothing"},
    "char": {"Cchar", "UInt8", "Int8"}, "size_t": {"Csize_t", "UInt64"},
}


def accepted(ctype, is_return):
    """Julia spellings that pass/return the C type correctly."""
    t = ctype.replace("const ", "").replace("const", "").strip()
    stars = t.count("*")
    base = t.replace("*", "").strip()
    if stars == 0:
        return SCALARS.get(base, {base})
    if stars == 1 and base == "char":
        # in: Cstring (NUL-checked) or a raw pointer (NULL allowed); out: owned or static text
        return {"Cstring", "Ptr{Cchar}", "Ptr{UInt8}", "Ptr{Int8}"}
    if base in OPAQUE or base in STRUCTS:
        inner = {base, "Cvoid"} if base in OPAQUE else {base}
    else:
        inner = SCALARS.get(base, {base}) | ({"Cvoid"} if base == "void" else set())
    for _ in range(stars):
        inner = {f"Ptr{{{i}}}" for i in inner}
    return inner


def split_top(s):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def matching(s, i):
    """Index of the bracket closing the one at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] in "({[":
            depth += 1
        elif s[j] in ")}]":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced brackets")


def strip_julia_comments(text):
    return "\n".join(re.sub(r"#(?![^\"]*\"[^\"]*$).*$", "", line) for line in text.splitlines())


# ---- 1. ccall sites ---------------------------------------------------------------------------------
lib = strip_julia_comments(open(LIB).read())
sites = {}
wrappers = {}  # wrapper name -> arity of its Julia definition
for m in re.finditer(r"^(dsrt_\w+)\(([^)]*)\)\s*=", lib, re.M):
    wrappers[m.group(1)] = len([a for a in m.group(2).split(",") if a.strip()])
for m in re.finditer(r"ccall\(\s*\(\s*:(\w+)\s*,\s*libdsrt\s*\)\s*,", lib):
    name = m.group(1)
    rest = lib[m.end():]
    args = split_top(rest[:matching("(" + rest, 0) - 1])
    ret, argtypes = args[0], args[1]
    if not (argtypes.startswith("(") and argtypes.endswith(")")):
        problems.append(f"{name}: argument types are not a tuple literal: {argtypes}")
        continue
    types = split_top(argtypes[1:-1])
    passed = args[2:]
    sites.setdefault(name, []).append((squash(ret), [squash(t).replace(" ", "") for t in types], len(passed)))

for name, (cret, cparams) in sorted(functions.items()):
    if name not in sites:
        problems.append(f"{name}: declared in dsrt.h, no ccall in LibDsrt.jl")
        continue
    if len(sites[name]) != 1:
        problems.append(f"{name}: {len(sites[name])} ccall sites in LibDsrt.jl (one expected)")
    jret, jtypes, npassed = sites[name][0]
    if len(jtypes) != len(cparams):
        problems.append(f"{name}: {len(cparams)} parameters in dsrt.h, {len(jtypes)} argument types in the ccall")
    else:
        for i, (c, j) in enumerate(zip(cparams, jtypes)):
            if j.replace("L.", "") not in accepted(c, False):
                problems.append(f"{name}: argument {i + 1} is `{c}` in dsrt.h but `{j}` in the ccall "
                                f"(accepted: {sorted(accepted(c, False))})")
    if npassed != len(cparams):
        problems.append(f"{name}: the ccall passes {npassed} values for {len(cparams)} parameters")
    if jret not in accepted(cret, True):
        problems.append(f"{name}: returns `{cret}` in dsrt.h but `{jret}` in the ccall (accepted: {sorted(accepted(cret, True))})")
    if wrappers.get(name) != len(cparams):
        problems.append(f"{name}: the Julia wrapper takes {wrappers.get(name)} arguments, dsrt.h {len(cparams)}")
for name in sorted(set(sites) - set(functions)):
    problems.append(f"{name}: LibDsrt.jl calls a symbol dsrt.h does not declare")

# ---- 2. calls of the wrappers -----------------------------------------------------------------------
calls_checked = 0
for path in CALLERS:
    text = strip_julia_comments(open(path).read())
    for m in re.finditer(r"\b(?:Dsrt\.)?L\.(dsrt_\w+)\(", text):
        name = m.group(1)
        if re.search(rf"^(?:const|struct|mutable struct) {name}\b", lib, re.M):
            continue  # a type or alias (constructor call), not a C function
        if name not in functions:
            problems.append(f"{os.path.basename(path)}: calls L.{name}, which dsrt.h does not declare")
            continue
        close = matching(text, m.end() - 1)
        nargs = len(split_top(text[m.end():close]))
        calls_checked += 1
        if nargs != len(functions[name][1]):
            line = text[:m.start()].count("\n") + 1
            problems.append(f"{os.path.basename(path)}:{line}: L.{name} called with {nargs} arguments, "
                            f"dsrt.h takes {len(functions[name][1])}")

# ---- 3. constants and structs ---------------------------------------------------------------------
expected = {}
for m in re.finditer(r"^#define (DSRT_\w+) \(?(-?\d+)\)?", header, re.M):
    expected[m.group(1)] = int(m.group(2))
for body in re.findall(r"typedef enum \{(.*?)\}", header, re.S):
    for item in body.split(","):
        k, v = item.split("=")
        expected[k.strip()] = int(v)
for name, value in expected.items():
    m = re.search(rf"^const {name} = (.+)$", lib, re.M)
    if not m:
        problems.append(f"{name} = {value} is in dsrt.h but not in LibDsrt.jl")
    elif m.group(1).strip().isdigit() and int(m.group(1)) != value:
        problems.append(f"{name}: dsrt.h says {value}, LibDsrt.jl says {m.group(1).strip()}")

JULIA_FIELD = {"uint64_t": "UInt64", "int64_t": "Int64", "int32_t": "Int32", "double": "Float64"}
structs = re.findall(r"typedef struct \{(.*?)\}\s*(\w+);", header, re.S)
for body, sname in structs:
    cfields = []
    for f in body.split(";"):
        f = squash(f)
        if not f:
            continue
        fm = re.match(r"(\w+) (\w+)(?:\[(\w+)\])?$", f)
        jt = JULIA_FIELD[fm.group(1)]
        if fm.group(3):
            n = fm.group(3)
            jt = f"NTuple{{{expected.get(n, n)},{jt}}}"
        cfields.append((fm.group(2), jt))
    sm = re.search(rf"struct {sname}\n(.*?)\nend", lib, re.S)
    if not sm:
        problems.append(f"struct {sname} missing in LibDsrt.jl")
        continue
    jfields = [tuple(x.strip() for x in line.split("::")) for line in sm.group(1).strip().splitlines()]
    if cfields != jfields:
        problems.append(f"struct {sname}: dsrt.h {cfields} vs LibDsrt.jl {jfields}")

if problems:
    print("Julia bindings drifted from include/dsrt.h:")
    for p in problems:
        print("  -", p)
    sys.exit(1)
print(f"Julia bindings consistent with dsrt.h: {len(functions)} functions, {calls_checked} wrapper calls, "
      f"{len(expected)} constants, {len(structs)} structs")
