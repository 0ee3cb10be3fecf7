#!/usr/bin/env python3
"""Console CPU in tmux against one kvtop sim. usage: console.py NAME WORKERS RATE [secs]"""
import os, subprocess, sys, time, signal, json
NAME, N, RATE = sys.argv[1], int(sys.argv[2]), sys.argv[3]
SECS = int(sys.argv[4]) if len(sys.argv) > 4 else 60
D = f"/tmp/kvs/con-{NAME}"; os.makedirs(D, exist_ok=True)
K = os.environ.get("KVTOP", "/tmp/kvs/kvtop"); cfg = f"{D}/sim.yaml"
if os.path.exists(cfg): os.remove(cfg)
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1]) / 1024
a = [K, "sim", "--workers", str(N), "--write-config", cfg, "--force"]
if RATE != "default": a += ["--rate", RATE]
sim = subprocess.Popen(a, stdout=open(f"{D}/sim.log", "w"), stderr=subprocess.STDOUT)
sock = f"{D}/tmux.sock"
try:
    for _ in range(120):
        if os.path.exists(cfg) and "theme:" in open(cfg).read(): break
        time.sleep(0.5)
    subprocess.run(["tmux", "-S", sock, "new", "-d", "-x", "120", "-y", "34", f"echo $$ > {D}/pid; exec {K} -c {cfg}"], check=True)
    time.sleep(15)
    pid = int(open(f"{D}/pid").read())
    c0 = cpu(pid); time.sleep(SECS); c1 = cpu(pid)
    screen = subprocess.run(["tmux", "-S", sock, "capture-pane", "-p"], capture_output=True, text=True).stdout
    open(f"{D}/screen.txt", "w").write(screen)
    out = {"case": NAME, "workers": N, "rate": RATE, "secs": SECS, "console_cpu": round((c1 - c0) / SECS * 100, 2),
           "rss_mb": round(rss(pid)), "load": open("/proc/loadavg").read().split()[:3]}
    print(json.dumps(out)); open("/tmp/kvs/console.jsonl", "a").write(json.dumps(out) + "\n")
finally:
    subprocess.run(["tmux", "-S", sock, "kill-server"])
    sim.send_signal(signal.SIGINT); sim.wait(timeout=20)
