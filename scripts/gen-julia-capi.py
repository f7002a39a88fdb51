#!/usr/bin/env python3
"""Writes the Julia ccall layer (constants, types, struct layouts, one wrapper per C function) from
include/dsrt.h, read through libclang's Python bindings (Debian: python3-clang), so the C compiler's
own parser, not a hand-written one, decides what the header declares.

    gen-julia-capi.py HEADER OUT.jl

Called by scripts/gen-bindings.sh, next to bindgen for Rust. Exit 77 when the clang module or
libclang is missing (the check then skips), 1 when the header holds something the generator does
not know how to map (extend TYPE_MAP / the handlers below rather than writing it by hand).

Mapping rules (C -> Julia):
  - object-like DSRT_* macros: integer constant expressions are evaluated by clang (a probe
    enum) and written as plain integers; string literals as strings; brace initializers (the
    *_INIT macros) are C-only and listed as comments;
  - typedef'd anonymous enums: `const name = <underlying integer type>` and typed constants;
  - opaque handles (`typedef struct x x;` without a definition): `mutable struct x end`;
  - structs: an immutable Julia struct with the same fields in order (arrays as NTuple), followed
    by an assertion of the C size and field offsets that clang computed;
  - functions: `name(args...) = ccall((:name, libdsrt), R, (T...,), args...)`. A `const char *`
    argument is a Cstring (NUL-checked; C_NULL passes as NULL); every other pointer is Ptr{T}, a
    returned `const char *` is Ptr{Cchar} (it may be NULL), function pointers are Ptr{Cvoid}.
"""
import ctypes
import os
import sys

try:
    import clang.cindex as ci
except ImportError:
    print("gen-julia-capi: the libclang Python module is missing (Debian: python3-clang)", file=sys.stderr)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))

BUILTIN = {
    ci.TypeKind.VOID: "Cvoid", ci.TypeKind.BOOL: "Bool",
    ci.TypeKind.CHAR_S: "Cchar", ci.TypeKind.CHAR_U: "Cchar", ci.TypeKind.SCHAR: "Int8", ci.TypeKind.UCHAR: "UInt8",
    ci.TypeKind.SHORT: "Cshort", ci.TypeKind.USHORT: "Cushort", ci.TypeKind.INT: "Cint", ci.TypeKind.UINT: "Cuint",
    ci.TypeKind.LONG: "Clong", ci.TypeKind.ULONG: "Culong", ci.TypeKind.LONGLONG: "Clonglong",
    ci.TypeKind.ULONGLONG: "Culonglong", ci.TypeKind.FLOAT: "Float32", ci.TypeKind.DOUBLE: "Float64",
}
STDINT = {
    "int8_t": "Int8", "uint8_t": "UInt8", "int16_t": "Int16", "uint16_t": "UInt16", "int32_t": "Int32",
    "uint32_t": "UInt32", "int64_t": "Int64", "uint64_t": "UInt64", "size_t": "Csize_t", "ptrdiff_t": "Cptrdiff_t",
}
JULIA_KEYWORDS = {
    "baremodule", "begin", "break", "catch", "const", "continue", "do", "else", "elseif", "end", "export",
    "false", "finally", "for", "function", "global", "if", "import", "let", "local", "macro", "module", "quote",
    "return", "struct", "true", "try", "using", "while", "abstract", "mutable", "primitive", "type", "where",
}
SKIPPED_MACROS = {"DSRT_H", "DSRT_API"}  # include guard and export attribute: header machinery


class Unmapped(Exception):
    pass


def julia_name(name):
    return name + "_" if name in JULIA_KEYWORDS else name


def jl_type(t, role):
    """The Julia spelling of C type `t` as a function `param`, `return` value or struct `field`."""
    if t.kind == ci.TypeKind.ELABORATED:
        t = t.get_named_type()
    if t.kind == ci.TypeKind.TYPEDEF:
        name = t.get_declaration().spelling
        if name in STDINT:
            return STDINT[name]
        if name.startswith("dsrt_"):
            return name
        raise Unmapped(f"typedef {name} (not a dsrt_ type nor a fixed-width integer)")
    if t.kind in BUILTIN:
        return BUILTIN[t.kind]
    if t.kind == ci.TypeKind.POINTER:
        pointee = t.get_pointee()
        canonical = pointee.get_canonical()
        if canonical.kind in (ci.TypeKind.FUNCTIONPROTO, ci.TypeKind.FUNCTIONNOPROTO):
            return "Ptr{Cvoid}"
        if (role == "param" and canonical.kind in (ci.TypeKind.CHAR_S, ci.TypeKind.CHAR_U)
                and pointee.is_const_qualified()):
            return "Cstring"
        return "Ptr{" + jl_type(pointee, "pointee") + "}"
    if t.kind == ci.TypeKind.CONSTANTARRAY and role == "field":
        return "NTuple{%d,%s}" % (t.element_count, jl_type(t.element_type, "field"))
    raise Unmapped(f"C type `{t.spelling}` ({t.kind}) as a {role}")


def in_header(cursor, header):
    return cursor.location.file is not None and os.path.samefile(cursor.location.file.name, header)


def macro_values(header, names):
    """Evaluates integer macros with clang: each becomes an enumerator of a probe enum."""
    if not names:
        return {}
    probe = "#include \"%s\"\nenum dsrt_gen_probe {\n%s\n};\n" % (
        os.path.basename(header), ",\n".join(f"dsrt_gen_probe_{n} = ({n})" for n in names))
    path = os.path.join(os.path.dirname(header), "dsrt_gen_probe.c")
    tu = ci.Index.create().parse(path, args=["-x", "c", "-std=c11", "-I", os.path.dirname(header)],
                                 unsaved_files=[(path, probe)])
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        raise Unmapped("macros that are not integer constants: " + "; ".join(str(d) for d in errors))
    values = {}
    for c in tu.cursor.walk_preorder():
        if c.kind == ci.CursorKind.ENUM_CONSTANT_DECL and c.spelling.startswith("dsrt_gen_probe_"):
            values[c.spelling[len("dsrt_gen_probe_"):]] = c.enum_value
    return values


def is_function_like(macro):
    """clang_Cursor_isMacroFunctionLike (older Python bindings do not wrap it)."""
    fn = ci.conf.lib.clang_Cursor_isMacroFunctionLike
    fn.argtypes, fn.restype = [ci.Cursor], ctypes.c_uint
    return bool(fn(macro))


def julia_string(c_literal):
    body = c_literal[1:-1]
    return '"' + body.replace("$", "\\$") + '"'


def generate(header):
    header = os.path.abspath(header)
    tu = ci.Index.create().parse(header, args=["-x", "c", "-std=c11"],
                                 options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    errors = [str(d) for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        raise Unmapped("the header does not parse: " + "; ".join(errors))
    cursors = [c for c in tu.cursor.get_children() if in_header(c, header)]

    # Macros: classify by their tokens; integers are evaluated by clang in one probe.
    macros = {}
    for c in cursors:
        if c.kind != ci.CursorKind.MACRO_DEFINITION or c.spelling in SKIPPED_MACROS:
            continue
        if is_function_like(c):
            raise Unmapped(f"function-like macro {c.spelling}")
        tokens = [t.spelling for t in c.get_tokens()][1:]
        if not tokens:
            raise Unmapped(f"macro {c.spelling} has no value")
        if tokens[0] == "{":
            macros[c.spelling] = ("init", None)
        elif len(tokens) == 1 and tokens[0].startswith('"'):
            macros[c.spelling] = ("string", tokens[0])
        else:
            macros[c.spelling] = ("int", None)
    ints = macro_values(header, [n for n, (kind, _) in macros.items() if kind == "int"])

    typedefed = set()
    for c in cursors:
        if c.kind == ci.CursorKind.TYPEDEF_DECL:
            under = c.underlying_typedef_type
            if under.kind == ci.TypeKind.ELABORATED:
                under = under.get_named_type()
            typedefed.add(under.get_declaration().canonical.hash)

    out = []
    emit = out.append
    functions = 0
    for c in cursors:
        k = c.kind
        if k == ci.CursorKind.MACRO_DEFINITION and c.spelling in macros:
            kind, value = macros[c.spelling]  # value: the literal of a string macro
            if kind == "int":
                emit(f"const {c.spelling} = {ints[c.spelling]}")
            elif kind == "string":
                emit(f"const {c.spelling} = {julia_string(value)}")
            else:
                emit(f"# {c.spelling}: a C initializer, not generated (construct the struct in Julia)")
        elif k == ci.CursorKind.TYPEDEF_DECL:
            emit_typedef(c, emit)
        elif k in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.ENUM_DECL):
            # Written where its typedef is; a struct/enum nobody typedefs is not part of the ABI style.
            if c.canonical.hash not in typedefed:
                raise Unmapped(f"{k} {c.spelling or '(anonymous)'} at line {c.location.line} without a typedef")
        elif k == ci.CursorKind.FUNCTION_DECL:
            emit_function(c, emit)
            functions += 1
        elif k in (ci.CursorKind.MACRO_INSTANTIATION, ci.CursorKind.INCLUSION_DIRECTIVE,
                   ci.CursorKind.MACRO_DEFINITION):
            continue
        else:
            raise Unmapped(f"{k} {c.spelling} at line {c.location.line}")
    if functions == 0:
        raise Unmapped("no functions found in the header")
    return out


def emit_typedef(c, emit):
    name = c.spelling
    under = c.underlying_typedef_type
    if under.kind == ci.TypeKind.ELABORATED:
        under = under.get_named_type()
    decl = under.get_declaration()
    if decl.kind == ci.CursorKind.ENUM_DECL:
        base = jl_type(decl.enum_type, "field")
        emit(f"const {name} = {base}")
        for e in decl.get_children():
            emit(f"const {e.spelling} = {name}({e.enum_value})")
    elif decl.kind == ci.CursorKind.STRUCT_DECL:
        definition = decl.get_definition()
        if definition is None:
            emit(f"mutable struct {name} end  # opaque handle")
            return
        fields = list(definition.get_children())
        emit("")
        emit(f"struct {name}")
        for f in fields:
            if f.kind != ci.CursorKind.FIELD_DECL:
                raise Unmapped(f"struct {name}: {f.kind} {f.spelling}")
            emit(f"    {julia_name(f.spelling)}::{jl_type(f.type, 'field')}")
        emit("end")
        size = definition.type.get_size()
        offsets = [definition.type.get_offset(f.spelling) // 8 for f in fields]
        listed = ", ".join(str(o) for o in offsets)
        emit(f"@assert(sizeof({name}) == {size} && [fieldoffset({name}, i) for i in 1:fieldcount({name})] == [{listed}],")
        emit(f"        \"{name}: the C layout (size {size}, offsets {listed}) differs on this platform\")")
        emit("")
    else:
        emit(f"const {name} = {jl_type(under, 'param' if under.kind == ci.TypeKind.POINTER else 'field')}")


def emit_function(c, emit):
    if c.type.kind == ci.TypeKind.FUNCTIONPROTO and c.type.is_function_variadic():
        raise Unmapped(f"{c.spelling}: variadic")
    args = list(c.get_arguments())
    names = [julia_name(a.spelling or f"arg{i + 1}") for i, a in enumerate(args)]
    types = [jl_type(a.type, "param") for a in args]
    ret = jl_type(c.result_type, "return")
    tuple_ = "()" if not types else "(" + ", ".join(types) + ("," if len(types) == 1 else "") + ")"
    passed = "".join(", " + n for n in names)
    emit(f"{c.spelling}({', '.join(names)}) = ccall((:{c.spelling}, libdsrt), {ret}, {tuple_}{passed})")


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    header, out_path = sys.argv[1], sys.argv[2]
    try:
        body = generate(header)
    except ci.LibclangError as e:
        print(f"gen-julia-capi: libclang could not be loaded ({e}); Debian: python3-clang", file=sys.stderr)
        return 77
    except Unmapped as e:
        print(f"gen-julia-capi: {header}: cannot map {e}; extend scripts/gen-julia-capi.py", file=sys.stderr)
        return 1
    text = ("# Generated from include/dsrt.h by scripts/gen-bindings.sh (scripts/gen-julia-capi.py).\n"
            "# Do not edit: change the header and regenerate. `make test` fails when this file differs\n"
            "# from what the header generates. Included by LibDsrt.jl, which defines `libdsrt`.\n\n")
    text += "\n".join(body) + "\n"
    with open(out_path, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
