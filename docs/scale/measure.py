#!/usr/bin/env python3
"""Measure kvtop snapshot (headless) CPU and RSS against several kvtop sim processes.
usage: measure.py MIX N [warm] [secs]   MIX = direct | promnats"""
import os, re, subprocess, sys, time, signal, json
MIX, N = sys.argv[1], int(sys.argv[2])
WARM = int(sys.argv[3]) if len(sys.argv) > 3 else 20
SECS = int(sys.argv[4]) if len(sys.argv) > 4 else 60
EXTRA = sys.argv[5:]
D = f"/tmp/kvs/run-{MIX}-{N}" + (f"-r{os.environ['RATE']}" if os.environ.get("RATE") else "")
os.makedirs(D, exist_ok=True)
K = os.environ.get("KVTOP", "/tmp/kvs/kvtop")
PER = 50
procs = []
def start(args, log):
    p = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    procs.append(p); return p
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) / 1024
try:
    if MIX == "promnats":
        subprocess.run(["rm", "-rf", f"{D}/js"])
        start(["/tmp/kvs/natsd", "-port", "4222", "-dir", f"{D}/js"], f"{D}/natsd.log")
        time.sleep(1)
    sims, cfgs = [], []
    for i in range((N + PER - 1) // PER):
        n = min(PER, N - i * PER)
        cfg = f"{D}/sim{i}.yaml"
        if os.path.exists(cfg): os.remove(cfg)
        a = [K, "sim", "--workers", str(n), "--write-config", cfg, "--force", "--seed", str(i + 1)]
        if os.environ.get("RATE"):
            a += ["--rate", str(float(os.environ["RATE"]) * n)]
        if MIX == "promnats":
            a += ["--event-plane", "nats", "--nats", "nats://127.0.0.1:4222"]
        sims.append(start(a, f"{D}/sim{i}.log")); cfgs.append(cfg)
    for cfg in cfgs:
        for _ in range(600):
            if os.path.exists(cfg) and "theme:" in open(cfg).read(): break
            time.sleep(0.5)
    # One config: every sim's workers (renamed s<i>-w<j>), the first sim's router and decisions.
    first = open(cfgs[0]).read()
    head = first[:first.index("workers:\n")]
    workers = ""
    for i, cfg in enumerate(cfgs):
        t = open(cfg).read()
        w = t[t.index("workers:\n") + len("workers:\n"):t.index("events_bind:")]
        workers += re.sub(r"- name: w(\d+)", lambda m: f"- name: s{i}-w{m.group(1)}", w)
    tail = first[first.index("events_bind:"):]
    text = head + "workers:\n" + workers + tail
    if MIX == "promnats":
        targets = re.findall(r"- name: (s\d+-w\d+)\n    metrics: http://([^/]+)/metrics", text)
        pc = f"{D}/prom.yml"
        with open(pc, "w") as f:
            f.write("global:\n  scrape_interval: 15s\n  scrape_timeout: 10s\nscrape_configs:\n  - job_name: kvtopsim\n    static_configs:\n")
            for name, hp in targets:
                f.write(f"      - targets: ['{hp}']\n        labels: {{pod: {name}}}\n")
        subprocess.run(["rm", "-rf", f"{D}/tsdb"])
        prom = start(["prometheus", f"--config.file={pc}", f"--storage.tsdb.path={D}/tsdb",
                      "--web.listen-address=127.0.0.1:19390"], f"{D}/prom.log")
        text = re.sub(r"\n    metrics: http://[^\n]+", "", text, count=len(targets))
        text = text.replace("events_bind: \"\"\n", "events_bind: \"\"\nmetrics_source:\n  prometheus: http://127.0.0.1:19390\n  selector: '{job=\"kvtopsim\"}'\n  worker_label: pod\n")
        time.sleep(35)  # two scrapes
    kcfg = f"{D}/kvtop.yaml"
    open(kcfg, "w").write(text)
    kv = subprocess.Popen([K, "snapshot", "-c", kcfg, "--for", f"{WARM+SECS+5}s", "--format", "json", *EXTRA],
                          stdout=open(f"{D}/snapshot.json", "w"), stderr=open(f"{D}/kvtop.err", "w"))
    procs.append(kv)
    time.sleep(WARM)
    def others():
        t = sum(cpu(s.pid) for s in sims)
        return t, (cpu(prom.pid) if MIX == "promnats" else 0)
    c0 = cpu(kv.pid); s0, p0 = others()
    r = []
    for i in range(SECS // 10):
        time.sleep(10); r.append(rss(kv.pid) or 0)
    c1 = cpu(kv.pid); s1, p1 = others()
    kv.wait(timeout=180)
    out = {"mix": MIX, "workers": N, "sims": len(sims), "secs": SECS, "kvtop_cpu": round((c1 - c0) / SECS * 100, 1),
           "kvtop_rss_mb_max": round(max(r)), "sims_cpu": round((s1 - s0) / SECS * 100, 1),
           "prom_cpu": round((p1 - p0) / SECS * 100, 1), "load": open("/proc/loadavg").read().split()[:3], "extra": EXTRA, "rate_per_worker": os.environ.get("RATE", "3")}
    try:
        snap = json.load(open(f"{D}/snapshot.json"))
        st = {}
        for w in snap.get("workers", []): st[w.get("state")] = st.get(w.get("state"), 0) + 1
        out["states"] = st
        tb = sum(x.get("batches", 0) for w in snap["workers"] for x in w["streams"])
        dr = sum(x.get("dropped", 0) for w in snap["workers"] for x in w["streams"])
        out["batches"], out["dropped"] = tb, dr
        out["pool"] = {k: snap["pool"][k] for k in ("requests_per_s", "blocks", "up") if k in snap.get("pool", {})}
    except Exception as e:
        out["snap_err"] = str(e)
    print(json.dumps(out)); sys.stdout.flush()
    open("/tmp/kvs/results.jsonl", "a").write(json.dumps(out) + "\n")
finally:
    for p in procs:
        if p.poll() is None: p.send_signal(signal.SIGINT)
    for p in procs:
        try: p.wait(timeout=20)
        except Exception: p.kill()
