#!/usr/bin/env python3
"""Checks the hand-written Julia code against the generated C layer, without a Julia runtime.

The C layer (bindings/julia/Dsrt.jl/src/capi_gen.jl) is generated from include/dsrt.h and
compared with it by scripts/gen-bindings.sh --check. What generation cannot keep in step is the
idiomatic module and the tests that call it; no Julia runs on this project's build machines, so
this script reads them instead: every `L.name` / `LibDsrt.name` they use must be defined by the
generated file (or LibDsrt.jl), every call of a generated C wrapper must pass as many arguments
as the C function takes, and every construction of a generated struct as many as it has fields.

    check-julia-calls.py REPO_ROOT       exit 0 if consistent, 1 with the list of problems
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
PKG = os.path.join(ROOT, "bindings", "julia", "Dsrt.jl")
GENERATED = os.path.join(PKG, "src", "capi_gen.jl")
LIBDSRT = os.path.join(PKG, "src", "LibDsrt.jl")
CALLERS = [os.path.join(PKG, "src", "Dsrt.jl")] + sorted(
    os.path.join(PKG, "test", f) for f in os.listdir(os.path.join(PKG, "test")) if f.endswith(".jl"))


def strip_comments(text):
    """Drops `# ...` to the end of a line unless the # sits inside a string literal."""
    out = []
    for line in text.splitlines():
        in_string = False
        for i, ch in enumerate(line):
            if ch == '"' and (i == 0 or line[i - 1] != "\\"):
                in_string = not in_string
            elif ch == "#" and not in_string:
                line = line[:i]
                break
        out.append(line)
    return "\n".join(out)


def closing(text, i):
    """Index of the bracket closing the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] in "([{":
            depth += 1
        elif text[j] in ")]}":
            depth -= 1
            if depth == 0:
                return j
    raise ValueError("unbalanced brackets")


def count_args(inner):
    inner = inner.strip()
    if not inner:
        return 0
    depth, n = 0, 1
    for ch in inner:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            n += 1
    return n


generated = open(GENERATED).read()
functions = {m.group(1): count_args(m.group(2))
             for m in re.finditer(r"^(dsrt_\w+)\(([^)]*)\) = ccall\(", generated, re.M)}
structs = {m.group(1): len([l for l in m.group(2).splitlines() if "::" in l])
           for m in re.finditer(r"^struct (\w+)\n(.*?)^end$", generated, re.M | re.S)}
defined = set(functions) | set(structs)
defined |= set(re.findall(r"^const (\w+) =", generated, re.M))
defined |= set(re.findall(r"^mutable struct (\w+) end", generated, re.M))
libdsrt = open(LIBDSRT).read()
defined |= set(re.findall(r"^const (\w+) =", libdsrt, re.M)) | set(re.findall(r"^function (\w+)\(", libdsrt, re.M))
if len(functions) < 10 or not structs:
    sys.exit(f"check-julia-calls: {GENERATED} holds {len(functions)} wrappers and {len(structs)} structs; "
             "regenerate it with scripts/gen-bindings.sh")

problems = []
references = calls = 0
for path in CALLERS:
    text = strip_comments(open(path).read())
    where = os.path.relpath(path, PKG)
    for m in re.finditer(r"(?<![\w.\"])(?:(?:Dsrt\.)?L|LibDsrt)\.(\w+)", text):
        name = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        references += 1
        if name not in defined:
            problems.append(f"{where}:{line}: {name} is not defined by the generated C layer (capi_gen.jl)")
            continue
        if m.end() >= len(text) or text[m.end()] != "(" or name not in functions and name not in structs:
            continue
        n = count_args(text[m.end() + 1:closing(text, m.end())])
        want = functions.get(name, structs.get(name))
        calls += 1
        if n != want:
            what = "the C function takes" if name in functions else "the struct has fields:"
            problems.append(f"{where}:{line}: {name} called with {n} arguments; {what} {want}")

if problems:
    print("The Julia package does not match its generated C layer (bindings/julia/Dsrt.jl/src/capi_gen.jl):")
    for p in problems:
        print("  -", p)
    sys.exit(1)
print(f"check-julia-calls: {references} references to the generated C layer, {calls} calls with the right "
      f"argument count ({len(functions)} C functions, {len(structs)} structs)")
