import sys, re, collections
# usage: incl.py script.txt bench_pid kubelet_pids(comma) operator_pid [filter-substring]
path, bench, kub, op = sys.argv[1], sys.argv[2], sys.argv[3].split(','), sys.argv[4]
flt = sys.argv[5] if len(sys.argv) > 5 else None
role = {bench: 'bench', op: 'operator'}
for k in kub: role[k] = 'kubelet'
tot = collections.Counter(); incl = collections.defaultdict(collections.Counter); self_ = collections.defaultdict(collections.Counter)
samples = []
cur = None
def flush(s):
    if not s: return
    r, frames = s
    if flt and not any(flt in f for f in frames): return
    tot[r] += 1
    seen = set()
    for f in frames:
        if f not in seen:
            incl[r][f] += 1; seen.add(f)
    if frames: self_[r][frames[0]] += 1
for line in open(path, errors='replace'):
    if not line.strip():
        flush(cur); cur = None; continue
    if re.match(r'^\s*\d+/\d+\s', line):
        pid = line.split()[0].split('/')[0]
        cur = (role.get(pid, 'other'), [])
    else:
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and cur is not None:
            sym = re.sub(r'\+0x[0-9a-f]+$', '', parts[1])
            sym = re.sub(r'::h[0-9a-f]{16}$', '', sym)
            cur[1].append(sym[:150])
flush(cur)
all_ = sum(tot.values())
for r in tot:
    print(f"== {r}: {tot[r]} samples, {100*tot[r]/all_:.1f}% of all")
    n = int(sys.argv[6]) if len(sys.argv) > 6 else 40
    for f, c in incl[r].most_common(n):
        print(f"  {100*c/tot[r]:5.1f}% incl {100*self_[r][f]/tot[r]:5.1f}% self  {f}")
