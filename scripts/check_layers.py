"""Layering checks `make lint` runs over every crate's sources (tests aside):
- no two sibling modules import each other, by `use` or by a path written out (a shared piece
  belongs below both);
- no source file over 600 lines before its tests unless its first line says it does one job
  ("One job:").
Prints each offence and exits 1 if there is any."""
import glob
import os
import re
import sys

MAX_LINES = 600
bad = []
for crate in sorted(glob.glob("crates/*/src") + ["python/src"]):
    files = glob.glob(crate + "/**/*.rs", recursive=True)

    def module(f):
        parts = os.path.relpath(f, crate)[:-3].split("/")
        return tuple(parts[:-1] if parts[-1] in ("mod", "lib", "main") else parts)

    known = {module(f) for f in files}
    imports = {}
    for f in files:
        text = open(f).read()
        lines = text.split("#[cfg(test)]")[0].count("\n")
        if lines > MAX_LINES and "One job:" not in text.split("\n", 1)[0]:
            bad.append(f"{f}: {lines} lines (over {MAX_LINES})")
        me = module(f)
        found = set()
        code = re.sub(r"//.*", "", text.split("#[cfg(test)]")[0])  # doc links are not imports
        # Every path from crate, super or self: in `use` lines, in `use` groups ({a, b::c}),
        # and written out in code (`super::frames::compute(...)`).
        paths = [(m.group(1), m.group(2)) for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", code)]
        for m in re.finditer(r"\b(crate|super|self)((?:::\w+)*)::\{([^{}]*)\}", code):
            for item in m.group(3).split(","):
                head = re.match(r"\s*(\w+(?:::\w+)*)", item)
                if head and head.group(1) != "self":
                    paths.append((m.group(1), m.group(2) + "::" + head.group(1)))
        for root, rest in paths:
            path = {"crate": [], "super": list(me[:-1]), "self": list(me)}[root]
            for seg in rest.strip(":").split("::"):
                if seg == "super":
                    path = path[:-1]
                elif seg != "self":
                    path = path + [seg]
            for k in range(len(path), -1, -1):
                if tuple(path[:k]) in known:
                    if tuple(path[:k]) != me:
                        found.add(tuple(path[:k]))
                    break
        imports[me] = found
    for a, deps in imports.items():
        for b in deps:
            nested = a == b[: len(a)] or b == a[: len(b)]
            if a < b and a in imports.get(b, ()) and not nested:
                bad.append(f"{crate}: {'/'.join(a)} and {'/'.join(b)} import each other")
for line in bad:
    print(line)
sys.exit(1 if bad else 0)
