#!/usr/bin/env python3
"""The header is its own documentation: every function include/dsrt.h declares has a doc comment,
and that comment lists the status codes the function returns.

A function's doc comment is the comment block right above it, shared by the declarations that
follow it without a blank line (dsrt_config_set_number/_string/_bool), or a comment on the same line.
For a function returning dsrt_status the comment must name at least one DSRT_ERR_* code; for any
other function it must say what it returns for a NULL or unknown argument (it names NULL, -1 or 0,
or says it is always safe). Exits 1 listing each function that breaks the rule.
Usage: check-header-docs.py [include/dsrt.h]"""
import re
import sys
from pathlib import Path

DECL = re.compile(r'^DSRT_API\s+(.+?)\b(dsrt_\w+)\s*\(')


def main() -> int:
    header = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "include/dsrt.h")
    lines = header.read_text().split("\n")
    problems = []
    checked = 0
    comment = ""      # the comment block governing the declarations that follow
    in_comment = False
    block = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if in_comment:
            block.append(line)
            if "*/" in line:
                in_comment = False
                comment = "\n".join(block)
            i += 1
            continue
        if stripped.startswith("/*"):
            block = [line]
            if "*/" in stripped:
                comment = line
            else:
                in_comment = True
            i += 1
            continue
        match = DECL.match(stripped)
        if match:
            # The declaration may span lines; a trailing comment on its last line documents it too.
            decl = [line]
            while ";" not in decl[-1] and i + 1 < len(lines):
                i += 1
                decl.append(lines[i])
            text = comment + "\n" + "\n".join(decl)
            returns, name = match.group(1).strip(), match.group(2)
            checked += 1
            # A section banner ("/* ----") or a struct's comment does not document a function.
            governing = comment and not comment.lstrip().startswith("/* ---")
            if not governing and "/*" not in "\n".join(decl):
                problems.append(f"{name}: no doc comment")
            elif returns == "dsrt_status":
                if not re.search(r"DSRT_ERR_[A-Z_]+", text):
                    problems.append(f"{name}: its doc comment lists no status code (DSRT_ERR_...)")
            elif returns != "void":
                if not re.search(r"NULL|-1|\b0\b|[Aa]lways safe", text):
                    problems.append(f"{name}: its doc comment does not say what it returns for a NULL or bad argument")
            i += 1
            continue
        if stripped == "":
            comment = ""  # a blank line ends the reach of a comment
        elif not stripped.startswith(("DSRT_API", "#")) and not stripped.startswith("**"):
            # Other code (typedefs, structs, macros' bodies) keeps the comment only for a declaration
            # right after it; a struct between comment and function breaks the link.
            if not stripped.startswith(("typedef", "}", "uint", "int", "double", "dsrt_", "#")):
                comment = ""
            elif stripped.startswith("typedef") or stripped.startswith("}"):
                comment = ""
        i += 1
    for problem in problems:
        print(f"check-header-docs: {problem}")
    print(f"check-header-docs: {checked} functions, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
