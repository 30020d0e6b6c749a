#!/usr/bin/env python3
"""The length rules of docs/layout.md ("House rules"), over the non-test code
of src/ (test modules cut, inline or in their own tests.rs / tests/ files):
`python3 scripts/long-functions.py src [LIMIT [FILE_LIMIT]]` lists the
functions longer than LIMIT lines (default 60), longest first, then the files
whose non-test part is longer than FILE_LIMIT lines (default 500), each line
`FILE <lines> <path>`. A heuristic over the text (a `fn` line to its closing
brace at the same indent). It prints nothing and exits 0 when nothing is
over; otherwise it exits 1 (scripts/test.sh runs it)."""
import os,re,sys
root=sys.argv[1] if len(sys.argv)>1 else 'src'
limit=int(sys.argv[2]) if len(sys.argv)>2 else 60
file_limit=int(sys.argv[3]) if len(sys.argv)>3 else 500
out=[]; files=[]
for d,_,fs in os.walk(root):
    for n in fs:
        if not n.endswith('.rs'): continue
        p=os.path.join(d,n)
        # a test module in its own file (`#[cfg(test)] mod tests;`): tests.rs, tests/*.rs
        if n=='tests.rs' or 'tests' in os.path.relpath(d,root).split(os.sep): continue
        lines=open(p).read().split('\n')
        # cut test module
        end=len(lines)
        for i,l in enumerate(lines):
            if l.strip()=='#[cfg(test)]' and i+1<len(lines) and re.match(r'\s*mod \w+',lines[i+1]): end=i;break
        code=lines[:end]
        while code and not code[-1].strip(): code.pop()
        if len(code)>file_limit: files.append((len(code),p))
        i=0
        while i<end:
            m=re.match(r'^(\s*)(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?fn\s+(\w+)',lines[i])
            if m:
                ind=len(m.group(1)); name=m.group(6)
                # find line with opening brace at end of signature, then closing brace at same indent
                j=i
                while j<end and not lines[j].rstrip().endswith('{') and not lines[j].rstrip().endswith(';'): j+=1
                if j<end and lines[j].rstrip().endswith(';'): i=j+1; continue
                k=j+1
                while k<end and not (lines[k].startswith(' '*ind+'}') and len(lines[k])-len(lines[k].lstrip())==ind): k+=1
                length=k-i+1
                if length>limit: out.append((length,f'{p}:{i+1} {name}'))
                i=j+1; continue
            i+=1
for l,w in sorted(out,reverse=True): print(l,w)
for l,p in sorted(files,reverse=True): print('FILE',l,p)
sys.exit(1 if out or files else 0)
