import os, subprocess, time, signal, re, sys
K = "/tmp/kvs/kvtop2"; D = "/tmp/kvs/tmux1000"; os.makedirs(D, exist_ok=True)
MIX = sys.argv[1] if len(sys.argv) > 1 else "direct"
procs = []
try:
    if MIX == "promnats":
        subprocess.run(["rm", "-rf", f"{D}/js"])
        procs.append(subprocess.Popen(["/tmp/kvs/natsd", "-port", "4222", "-dir", f"{D}/js"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(1)
    cfgs = []
    for i in range(20):
        cfg = f"{D}/sim{i}.yaml"
        if os.path.exists(cfg): os.remove(cfg)
        a = [K, "sim", "--workers", "50", "--rate", "15", "--write-config", cfg, "--force", "--seed", str(i+1)]
        if MIX == "promnats": a += ["--event-plane", "nats", "--nats", "nats://127.0.0.1:4222"]
        procs.append(subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)); cfgs.append(cfg)
    for cfg in cfgs:
        while not (os.path.exists(cfg) and "theme:" in open(cfg).read()): time.sleep(0.5)
    # reuse measure.py's merge
    first = open(cfgs[0]).read(); head = first[:first.index("workers:\n")]; ws = ""
    for i, cfg in enumerate(cfgs):
        t = open(cfg).read(); w = t[t.index("workers:\n")+9:t.index("events_bind:")]
        ws += re.sub(r"- name: w(\d+)", lambda m: f"- name: s{i}-w{m.group(1)}", w)
    text = head + "workers:\n" + ws + first[first.index("events_bind:"):]
    kcfg = f"{D}/kvtop.yaml"; open(kcfg, "w").write(text)
    sock = f"{D}/sock"
    subprocess.run(["tmux", "-S", sock, "new", "-d", "-x", "160", "-y", "48", f"exec {K} -c {kcfg} --pprof 127.0.0.1:6063"], check=True)
    def cap(name):
        open(f"{D}/{name}.txt", "w").write(subprocess.run(["tmux", "-S", sock, "capture-pane", "-p"], capture_output=True, text=True).stdout)
    def keys(*k):
        subprocess.run(["tmux", "-S", sock, "send-keys", *k]); time.sleep(1.5)
    time.sleep(30)
    subprocess.run(["curl", "-s", "-o", f"{D}/gr30.txt", "http://127.0.0.1:6063/debug/pprof/goroutine?debug=1"])
    cap("t30")
    time.sleep(30)
    subprocess.run(["curl", "-s", "-o", f"{D}/gr60.txt", "http://127.0.0.1:6063/debug/pprof/goroutine?debug=1"])
    cap("t60")
    keys("G"); cap("end")
    t0 = time.time(); keys("s"); cap("sort1")
    keys("s"); cap("sort2")
    keys("g"); keys("/"); keys("s", "1", "3", "-", "w", "4", "2"); keys("Enter"); cap("filter")
    keys("Escape"); cap("unfiltered")
finally:
    subprocess.run(["tmux", "-S", f"{D}/sock", "kill-server"])
    for p in procs: p.send_signal(signal.SIGINT)
    for p in procs:
        try: p.wait(timeout=20)
        except Exception: p.kill()
