#!/usr/bin/env python3
"""Count import loops per folder of src/ (sibling modules that reach each other through
`use crate::`/`use super::`/inline paths), resolving `pub use` re-exports of mod.rs files.

A folder's own code (its mod.rs, or lib.rs for src/) is a node among its children, named
`(mod)`: a child that uses an item defined in mod.rs while mod.rs's code uses the child is a
loop. A mod.rs's `pub use` lines are the folder's interface, not its code's imports: they are
followed (an import of a re-exported name counts against the module that defines it) but give
`(mod)` no edge.
Two checks besides the loops per folder:
- commands: no module of src/commands/ imports another (mod.rs may import them all);
- back up: no cycle among the top-level modules of src/ (an import from inside a folder up
  to a sibling of its parent that imports back down); these are the loops of "(src root)".
Exits 1 when it finds a loop, a mutual pair or a command importing another (scripts/test.sh
runs it; docs/layout.md, "House rules")."""
import os, re, sys
root = sys.argv[1] if len(sys.argv) > 1 else 'src'

def modpath(f):
    rel = os.path.relpath(f, root)[:-3].split(os.sep)
    if rel[-1] in ('mod', 'lib', 'main'):
        rel = rel[:-1]
    return tuple(rel)

files = {}
for d, _, fs in os.walk(root):
    for n in fs:
        if n.endswith('.rs'):
            p = os.path.join(d, n)
            if n == 'main.rs' and d == root: continue
            files[modpath(p)] = p
modules = set(files)

def strip(src):
    src = re.sub(r'//[^\n]*', '', src)
    src = re.sub(r'/\*.*?\*/', '', src, flags=re.S)
    src = re.sub(r'"(?:\\.|[^"\\])*"', '""', src)
    # drop #[cfg(test)] mod tests { ... } at end
    m = re.search(r'#\[cfg\(test\)\]\s*mod\s+\w+\s*\{', src)
    if m: src = src[:m.start()]
    return src

def expand(tree):
    # tree text like a::b::{c, d::{e,f}} -> list of paths
    out = []
    def rec(prefix, t):
        t = t.strip()
        if not t: return
        if t.endswith('}') and '{' in t:
            i = t.index('{')
            head = t[:i].rstrip(':').strip()
            pre = prefix + ([x for x in head.split('::') if x] if head else [])
            body = t[i+1:-1]
            depth = 0; cur = ''
            for ch in body:
                if ch == '{': depth += 1
                if ch == '}': depth -= 1
                if ch == ',' and depth == 0:
                    rec(pre, cur); cur = ''
                else: cur += ch
            rec(pre, cur)
        else:
            t = re.sub(r'\s+as\s+\w+$', '', t)
            out.append(prefix + [x.strip() for x in t.split('::') if x.strip()])
    rec([], tree)
    return out

def resolve(mp, path, is_mod_file):
    # mp: module path of the file; returns absolute path list
    if not path: return None
    if path[0] == 'crate': return list(path[1:])
    base = list(mp)
    if path[0] in ('super', 'self'):
        i = 0
        while i < len(path) and path[i] in ('super', 'self'):
            if path[i] == 'super': base = base[:-1]
            i += 1
        return base + list(path[i:])
    # relative to self (e.g. `use batch::X` in mod.rs)
    if is_mod_file and tuple(base + [path[0]]) in modules:
        return base + list(path)
    return None

imports = {}  # mp -> list of absolute paths
reexports = {}  # (modpath, name) -> absolute path
for mp, f in files.items():
    src = strip(open(f).read())
    is_mod = f.endswith('mod.rs') or f.endswith('lib.rs')
    paths = []
    for m in re.finditer(r'\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);', src):
        for p in expand(m.group(2)):
            a = resolve(mp, p, is_mod)
            if a is None: continue
            if m.group(1) and p[-1] != '*':
                reexports[(mp, p[-1])] = a
            if not (is_mod and m.group(1)):
                paths.append(a)
    uses = re.sub(r'\bpub(?:\([^)]*\))?\s+use\s+[^;]+;', '', src) if is_mod else src
    for m in re.finditer(r'\b((?:crate|super|self)(?:::\w+)+)', uses):
        a = resolve(mp, m.group(1).split('::'), is_mod)
        if a: paths.append(a)
    imports[mp] = paths

def canon(a, depth=0):
    # follow re-exports: find longest module prefix, then if next is a re-export, follow
    a = list(a)
    for _ in range(10):
        i = len(a)
        while i > 0 and tuple(a[:i]) not in modules: i -= 1
        if i < len(a) and (tuple(a[:i]), a[i]) in reexports:
            tgt = reexports[(tuple(a[:i]), a[i])]
            a = list(tgt) + a[i+1:]
            continue
        return tuple(a[:i]), a
    return tuple(a), a

MOD = '(mod)'
folders = sorted({mp[:-1] for mp in modules if mp} | {()})
def sccs(nodes, edges):
    idx = {}; low = {}; st = []; on = set(); res = []; c = [0]
    sys.setrecursionlimit(10000)
    def sc(v):
        idx[v] = low[v] = c[0]; c[0] += 1; st.append(v); on.add(v)
        for w in edges.get(v, ()):
            if w not in idx: sc(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], idx[w])
        if low[v] == idx[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            res.append(comp)
    for v in nodes:
        if v not in idx: sc(v)
    return [sorted(x) for x in res if len(x) > 1]

total_loops = 0; total_pairs = 0; command_imports = 0
lines = []
for P in folders:
    children = sorted({mp[len(P)] for mp in modules if len(mp) > len(P) and mp[:len(P)] == P})
    if P in modules: children.append(MOD)
    if len(children) < 2: continue
    edges = {}; why = {}
    for mp, paths in imports.items():
        if len(mp) < len(P) or mp[:len(P)] != P: continue
        src_child = mp[len(P)] if len(mp) > len(P) else MOD
        for a in paths:
            m, full = canon(a)
            if len(m) < len(P) or m[:len(P)] != P: continue
            dst = m[len(P)] if len(m) > len(P) else MOD
            if dst == src_child: continue
            edges.setdefault(src_child, set()).add(dst)
            why.setdefault((src_child, dst), set()).add(files[mp].replace(root + '/', '') + ' -> ' + '::'.join(m))
    comps = sccs(children, edges)
    name = '/'.join(P) or '(src root)'
    pairs = sorted({(a, b) for a in edges for b in edges[a] if a in edges.get(b, ()) and a < b})
    for comp in comps:
        total_loops += 1
        lines.append(('BACK UP (src root)' if not P else f'LOOP {name}') + ': ' + ' , '.join(comp))
        for a in comp:
            for b in sorted(edges.get(a, ())):
                if b in comp:
                    for w in sorted(why[(a, b)]): lines.append(f'    {a} -> {b}   [{w}]')
    total_pairs += len(pairs)
    for a, b in pairs:
        lines.append(f'  mutual pair {name}: {a} <-> {b}')
    if P == ('commands',):
        for a in sorted(edges):
            for b in sorted(edges[a]):
                if MOD not in (a, b):
                    command_imports += 1
                    lines.append(f'COMMAND IMPORTS COMMAND: {a} -> {b}   [' + '; '.join(sorted(why[(a, b)])) + ']')
print('\n'.join(lines))
print(f'TOTAL: {total_loops + command_imports} loops ({total_loops} strongly connected groups of >1 sibling '
      f'module, mod.rs counted as a sibling, back-up cycles among top-level modules included; '
      f'{command_imports} command imports of another command), {total_pairs} mutual pairs')
# A finding fails the caller (scripts/test.sh runs this script).
sys.exit(1 if total_loops + command_imports + total_pairs else 0)
