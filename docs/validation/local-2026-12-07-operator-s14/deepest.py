import sys, collections, re
tot=0; by=collections.Counter(); by2=collections.Counter()
for line in open(sys.argv[1]):
    line=line.rstrip('\n')
    if not line: continue
    stack, _, cost = line.rpartition(' ')
    try: c=int(cost)
    except: continue
    tot+=c
    frames=stack.split(';')
    g=[f for f in frames if 'gantry_' in f]
    key=g[-1] if g else '(no gantry frame)'
    by[key[:150]]+=c
    key2=' <- '.join(x[:70] for x in g[-2:][::-1]) if g else '(no gantry frame)'
    by2[key2[:200]]+=c
print('total %.1f MB'%(tot/1e6))
for k,v in by.most_common(int(sys.argv[2]) if len(sys.argv)>2 else 40): print('%8.1f MB %s'%(v/1e6,k))
