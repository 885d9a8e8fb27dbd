"""Layering checks `make lint` runs over every crate's sources (tests aside):
- no two sibling modules import each other (a shared piece belongs below both);
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
        for m in re.finditer(r"\buse\s+(crate|super|self)((?:::\w+)+)", text.split("#[cfg(test)]")[0]):
            rest = m.group(2).strip(":").split("::")
            path = {"crate": [], "super": list(me[:-1]), "self": list(me)}[m.group(1)] + rest
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
