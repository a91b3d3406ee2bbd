#!/usr/bin/env python3
# Synthetic spot data in the provider-neutral format (docs/simulator.md), for
# judging the spot policies on data they were not tuned on:
#   python3 scripts/spot_synthetic.py a|b|c [OUT_BASE]  -> OUT_BASE/synA|synB|synC
#   python3 scripts/spot_synthetic.py rSEED [OUT_BASE]  -> OUT_BASE/synrSEED
# a: 10-min ticks, 6 zones, a cheap zone with long outages, an always-up pricey one;
# b: 1-hour ticks, 4 zones; c: the cheapest zone down for long stretches beside
# a flapping cheap zone and an always-up zone at 3x the price.
# rSEED: a random provider drawn from SEED (2-8 zones, a tick of 1 min to
# 1 h, per-zone spot and on-demand prices, Markov up/down runs of 20 min to
# 100 h, and long outages in some zones): held-out data for policies.
import random, sys, os
# synthetic provider: zones with Markov up/down, per-zone on-demand
def gen(out, seed, tick, hours, zones):
    random.seed(seed)
    os.makedirs(out, exist_ok=True)
    n = int(hours*3600/tick)
    with open(f"{out}/zones.csv","w") as f:
        f.write("zone,on_demand_per_hour\n")
        for z in zones: f.write(f"{z['name']},{z['od']}\n")
    for z in zones:
        up = True; rows=[]
        for i in range(n):
            # mean up-run and down-run in hours
            if up and random.random() < tick/3600/z['up_h']: up=False
            elif not up and random.random() < tick/3600/z['down_h']: up=True
            a = up
            if 'outage' in z:
                for (s,e) in z['outage']:
                    if s*3600 <= i*tick < e*3600: a=False
            p = z['price']*(1+0.05*random.uniform(-1,1))
            rows.append(f"{1700000000+i*tick},{int(a)},{p:.4f}\n")
        with open(f"{out}/{z['name']}.csv","w") as f:
            f.write("time,available,spot_per_hour\n"); f.writelines(rows)
USAGE = "usage: spot_synthetic.py a|b|c|rSEED [OUT_BASE]  (SEED: a whole number, e.g. r11)"
if len(sys.argv) < 2 or not (sys.argv[1] in ("a", "b", "c")
                             or (sys.argv[1][:1] == "r" and sys.argv[1][1:].isdigit())):
    print(f"{USAGE}; got: {' '.join(sys.argv[1:]) or 'nothing'}", file=sys.stderr)
    sys.exit(2)
which = sys.argv[1]
base = sys.argv[2] if len(sys.argv) > 2 else "/tmp/spot20"
if which == "a":   # 10-min ticks, 6 zones, cheap zone with long outages, pricey always-up
    gen(base + "/synA", 1, 600, 2000, [
        dict(name="c1", od=4.0, price=1.0, up_h=30, down_h=2, outage=[(100,160),(500,580),(900,1000),(1400,1470)]),
        dict(name="c2", od=4.2, price=1.2, up_h=10, down_h=3),
        dict(name="c3", od=3.8, price=1.1, up_h=5, down_h=5),
        dict(name="p1", od=4.0, price=3.0, up_h=1e9, down_h=1),
        dict(name="c4", od=4.5, price=1.05, up_h=20, down_h=10),
        dict(name="c5", od=3.9, price=1.5, up_h=50, down_h=1),
    ])
elif which == "b": # 1-hour ticks, 4 zones
    gen(base + "/synB", 2, 3600, 4000, [
        dict(name="x", od=2.0, price=0.6, up_h=40, down_h=8),
        dict(name="y", od=2.2, price=0.7, up_h=15, down_h=15),
        dict(name="z", od=1.9, price=0.9, up_h=100, down_h=3),
        dict(name="w", od=2.1, price=1.6, up_h=1e9, down_h=1),
    ])
elif which == "c": # the exact failure: cheapest zone down for long stretches, pricey always-up, another cheap up
    gen(base + "/synC", 3, 300, 1500, [
        dict(name="cheap", od=3.0, price=0.8, up_h=1e9, down_h=1, outage=[(50,90),(200,260),(400,430),(600,700),(900,935),(1100,1180)]),
        dict(name="mid", od=3.0, price=1.0, up_h=12, down_h=1.5),
        dict(name="pricey", od=3.0, price=2.5, up_h=1e9, down_h=1),
    ])
elif which.startswith("r"):
    seed = int(which[1:])
    rnd = random.Random(seed)
    tick = rnd.choice([60, 195, 300, 600, 1800, 3600])
    od_base = rnd.uniform(1.5, 6.0)
    zones = []
    for k in range(rnd.randint(2, 8)):
        z = dict(name=f"z{k}", od=round(od_base * rnd.uniform(0.9, 1.2), 3),
                 price=round(od_base * rnd.uniform(0.2, 0.8), 3),
                 up_h=rnd.choice([1e9, 10 ** rnd.uniform(-0.5, 2)]),
                 down_h=10 ** rnd.uniform(-0.7, 1.3))
        if rnd.random() < 0.4:
            out, t = [], rnd.uniform(0, 200)
            while t < 2000:
                d = rnd.uniform(10, 100)
                out.append((t, t + d))
                t += d + rnd.uniform(50, 400)
            z['outage'] = out
        zones.append(z)
    gen(base + f"/syn{which}", seed, tick, 2000, zones)
