import sys, re, collections
# callees.py script.txt PATTERN [depth]: samples whose stack has PATTERN, by the frames it called
path, pat = sys.argv[1], sys.argv[2]; depth = int(sys.argv[3]) if len(sys.argv) > 3 else 1
by = collections.Counter(); tot = 0; n = 0
def flush(fr):
    global tot
    if not fr: return
    idx = [i for i, f in enumerate(fr) if pat in f]
    if not idx: return
    i = idx[0]  # innermost match (frames are leaf first)
    tot += 1
    by[' <- '.join(f[:70] for f in reversed(fr[max(0, i - depth):i])) or '(self)'] += 1
cur = None
for line in open(path, errors='replace'):
    if not line.strip():
        flush(cur); cur = None; continue
    if re.match(r'^\s*\d+/\d+\s', line):
        cur = []
    elif cur is not None:
        parts = line.strip().split(None, 1)
        if len(parts) == 2:
            s = re.sub(r'\+0x[0-9a-f]+$', '', parts[1]); s = re.sub(r'::h[0-9a-f]{16}$', '', s)
            cur.append(s)
flush(cur)
print('samples with', pat, tot)
for k, v in by.most_common(25): print('%5d %5.1f%% %s' % (v, 100.0 * v / max(tot, 1), k))
