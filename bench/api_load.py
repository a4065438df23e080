#!/usr/bin/env python3
"""The load generator of bench/api.sh: runs of /bin/true over airlock's HTTP API, and the same
through the CLI, timed by one process so that both are measured alike.

  api_load.py api HOST PORT TOKEN CLIENTS REQUESTS
      CLIENTS connections, each a closed loop of keep-alive `POST /v1/runs` {"argv":["/bin/true"]}
      (HTTP/1.1 on a raw socket, asyncio), REQUESTS in all.
  api_load.py health HOST PORT CLIENTS REQUESTS
      the same with `GET /v1/health`: what the HTTP exchange alone costs.
  api_load.py cli PROCESSES RUNS AIRLOCK STATE WORKSPACE
      PROCESSES threads, each starting `AIRLOCK --state-dir STATE run -w WORKSPACE -- /bin/true`
      with posix_spawn and waiting for it, RUNS in all.
  api_load.py pairs HOST PORT TOKEN AIRLOCK STATE WORKSPACE COUNT [PAUSE_MS]
      one API run, then one CLI run, COUNT times, on a plain blocking socket: the latencies of
      each, every pair close in time (this machine's speed drifts by the second); with PAUSE_MS,
      a pause before each run, as an agent's commands come apart (a server's warm sandboxes are
      prepared again meanwhile, and do not compete with the CLI run)
  api_load.py plain PROCESSES RUNS
      the same with /bin/true itself: what starting a process costs this client.
  api_load.py report SCRATCH ROUNDS BINARIES
      the tables bench/api.sh prints, from the JSON lines it left in SCRATCH.

Each prints one JSON line: the wall time, every latency (seconds), the client's own CPU time
(user + system of this process, not its children), and the CPU of what it measures: for `api`
the server's (SERVER_PID in the environment: its own and its reaped workers', from /proc, read
before and after), for `cli` and `plain` that of the processes it started; `pairs` prints the
two lists of latencies and the client's CPU time.
"""
import asyncio
import json
import os
import socket
import sys
import threading
import time

BODY = b'{"argv":["/bin/true"]}'


def request(host, port, token):
    return (
        f"POST /v1/runs HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY


def health_request(host, port):
    return f"GET /v1/health HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


async def read_response(reader):
    """One response: its status and body (Content-Length framed, as axum answers JSON)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    body = await reader.readexactly(length)
    return status, body


async def client(host, port, message, left, latencies, failures):
    reader, writer = await asyncio.open_connection(host, port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while left[0] > 0:
        left[0] -= 1
        start = time.perf_counter()
        writer.write(message)
        status, body = await read_response(reader)
        latencies.append(time.perf_counter() - start)
        if status != 200 or (message.startswith(b"POST") and b'"exit_code":0' not in body):
            failures.append(f"{status} {body[:300].decode('utf-8', 'replace')}")
    writer.close()


def server_cpu(pid):
    """Seconds of CPU: the server's own (user, system) and its reaped children's (the workers)."""
    if not pid:
        return None
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(x) / tick for x in fields[11:15])
    return {"self": utime + stime, "children": cutime + cstime}


def api(host, port, message, clients, requests):
    latencies, failures, left = [], [], [requests]
    pid = int(os.environ.get("SERVER_PID", "0"))

    async def main():
        await asyncio.gather(
            *(client(host, port, message, left, latencies, failures) for _ in range(clients))
        )

    before, cpu0, wall0 = server_cpu(pid), os.times(), time.perf_counter()
    asyncio.run(main())
    wall, cpu1, after = time.perf_counter() - wall0, os.times(), server_cpu(pid)
    out = {"wall": wall, "latencies": latencies, "failures": failures[:5],
           "failed": len(failures), "client_cpu": cpu1.user + cpu1.system - cpu0.user - cpu0.system}
    if before:
        out["server_cpu"] = {k: after[k] - before[k] for k in before}
    return out


def spawn_loop(argv, left, lock, latencies, failures):
    while True:
        with lock:
            if left[0] <= 0:
                return
            left[0] -= 1
        start = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, os.environ)
        _, status = os.waitpid(pid, 0)
        latencies.append(time.perf_counter() - start)
        if status != 0:
            failures.append(f"exit status {status}")


def processes(argv, parallel, runs):
    latencies, failures, left, lock = [], [], [runs], threading.Lock()
    threads = [threading.Thread(target=spawn_loop, args=(argv, left, lock, latencies, failures))
               for _ in range(parallel)]
    cpu0, wall0 = os.times(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu1 = time.perf_counter() - wall0, os.times()
    return {"wall": wall, "latencies": latencies, "failures": failures[:5], "failed": len(failures),
            "client_cpu": cpu1.user + cpu1.system - cpu0.user - cpu0.system,
            "children_cpu": cpu1.children_user + cpu1.children_system
            - cpu0.children_user - cpu0.children_system}


def read_blocking(stream):
    """One response from a blocking socket's file: its status and body."""
    status = int(stream.readline().split(b" ", 2)[1])
    length = 0
    while True:
        line = stream.readline()
        if line == b"\r\n":
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, stream.read(length)


def pairs(host, port, token, argv, count, pause=0.0):
    """One API request, then one CLI run, COUNT times: each pair sees the machine alike. PAUSE
    seconds before each."""
    message = request(host, port, token)
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    stream = sock.makefile("rb")
    api_latencies, cli_latencies, failures = [], [], []
    cpu0 = os.times()
    for _ in range(count):
        time.sleep(pause)
        start = time.perf_counter()
        sock.sendall(message)
        status, body = read_blocking(stream)
        api_latencies.append(time.perf_counter() - start)
        if status != 200 or b'"exit_code":0' not in body:
            failures.append(f"{status} {body[:300].decode('utf-8', 'replace')}")
        time.sleep(pause)
        start = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, os.environ)
        _, status = os.waitpid(pid, 0)
        cli_latencies.append(time.perf_counter() - start)
        if status != 0:
            failures.append(f"exit status {status}")
    cpu1 = os.times()
    sock.close()
    return {"api": api_latencies, "cli": cli_latencies, "failures": failures[:5],
            "failed": len(failures), "client_cpu": cpu1.user + cpu1.system - cpu0.user - cpu0.system}


NAMES = {"api-1": "API, 1 client", "api-8": "API, 8 clients", "api-32": "API, 32 clients",
         "health-1": "GET /v1/health, 1 client", "cli-1": "CLI, sequential",
         "cli-8": "CLI, 8 processes"}


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def rounds_of(scratch, key, rounds):
    """The JSON lines of one configuration, a round each; None if it was not timed."""
    paths = [os.path.join(scratch, f"{key}.{r}.json") for r in range(1, rounds + 1)]
    if not os.path.exists(paths[0]):
        return None
    runs = [json.load(open(path)) for path in paths]
    failed = sum(r["failed"] for r in runs)
    if failed:
        example = next(r["failures"] for r in runs if r["failures"])
        print(f"**{failed} runs of {key} failed**, e.g. {example}")
        print()
    return runs


def summary(runs):
    lat = [l * 1e3 for r in runs for l in r["latencies"]]
    wall = sum(r["wall"] for r in runs)
    row = {"n": len(lat), "rps": len(lat) / wall, "p50": percentile(lat, 0.5),
           "p99": percentile(lat, 0.99), "client": sum(r["client_cpu"] for r in runs) / wall * 100}
    if "server_cpu" in runs[0]:
        row["server"] = sum(r["server_cpu"]["self"] for r in runs) / len(lat) * 1e3
        row["run"] = sum(r["server_cpu"]["children"] for r in runs) / len(lat) * 1e3
    if "children_cpu" in runs[0]:
        row["run"] = sum(r["children_cpu"] for r in runs) / len(lat) * 1e3
    return row


def cell(row, field):
    return f"{row[field]:.2f}" if field in row else "–"


def blocks_table(scratch, rounds, count):
    print("| binary | configuration | runs | runs/s | p50 ms | p99 ms | client CPU % "
          "| server CPU ms/run | run CPU ms/run |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    res = {}
    rows = [(i, key) for i in range(count) for key in NAMES] + [(0, "plain-1")]
    for i, key in rows:
        runs = rounds_of(scratch, f"{i}-{key}", rounds)
        if runs is None:
            continue
        r = res[(i, key)] = summary(runs)
        if key.startswith("health"):
            r.pop("run", None)
        binary, name = (i + 1, NAMES[key]) if key in NAMES else ("–", "plain /bin/true, the client's own spawn")
        print(f"| {binary} | {name} | {r['n']} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} "
              f"| {r['client']:.0f} | {cell(r, 'server')} | {cell(r, 'run')} |")
    print()
    return res


def pairs_table(scratch, rounds, count, kind="pairs"):
    added = {}
    for i in range(count):
        runs = rounds_of(scratch, f"{i}-{kind}-1", rounds)
        if runs is None:
            continue
        if not added and kind == "pairs":
            print("Paired: one API run (1 client), then one CLI run, in turn, so that each pair "
                  "sees the machine alike.")
            print()
        if not added and kind == "paced":
            print(f"Paced: the same, with {os.environ.get('BENCH_PACE_MS', '20')} ms before each "
                  "run, as an agent's commands come apart.")
            print()
        if not added:
            compared = "API p50 / CLI p50" if kind == "paced" else "API p50 − CLI p50 ms"
            print(f"| binary | pairs | API p50 ms | CLI p50 ms | {compared} "
                  "| median of (API − CLI) ms | API p99 ms | CLI p99 ms |")
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        api = [l * 1e3 for r in runs for l in r["api"]]
        cli = [l * 1e3 for r in runs for l in r["cli"]]
        added[i] = percentile(api, 0.5) - percentile(cli, 0.5)
        if kind == "paced":
            added[i] = percentile(api, 0.5) / percentile(cli, 0.5)
        diff = percentile([a - c for a, c in zip(api, cli)], 0.5)
        shown = f"{added[i]:.2f}" if kind == "paced" else f"{added[i]:+.2f}"
        print(f"| {i + 1} | {len(api)} | {percentile(api, 0.5):.2f} | {percentile(cli, 0.5):.2f} "
              f"| {shown} | {diff:+.2f} | {percentile(api, 0.99):.2f} "
              f"| {percentile(cli, 0.99):.2f} |")
    if added:
        print()
    return added


def report(scratch, rounds, count):
    """The tables and the targets, from the JSON lines bench/api.sh left in SCRATCH."""
    res = blocks_table(scratch, rounds, count)
    added = pairs_table(scratch, rounds, count)
    ratio = pairs_table(scratch, rounds, count, "paced")
    for i in range(count):
        label = f"binary {i + 1}: " if count > 1 else ""
        if i in ratio:
            verdict = "met" if ratio[i] <= 0.5 else "NOT met"
            print(f"- {label}API p50 / CLI p50 (paced, 1 client): **{ratio[i]:.2f}** "
                  f"(target with warm sandboxes: at most 0.5 — {verdict})")
        if i in added:
            verdict = "met" if added[i] <= 0.5 else "NOT met"
            print(f"- {label}API p50 − CLI p50 (paired, 1 client): **{added[i]:+.2f} ms** "
                  f"(target: within +0.5 ms — {verdict})")
        if (i, "api-8") in res and (i, "cli-8") in res:
            api8, cli8 = res[(i, "api-8")]["rps"], res[(i, "cli-8")]["rps"]
            verdict = "met" if api8 >= 200 else "NOT met"
            print(f"- {label}API runs/s at 8 clients: **{api8:.1f}** (target: >= 200 on 2 CPUs — "
                  f"{verdict}); CLI with 8 processes: {cli8:.1f}; API/CLI: {api8 / cli8:.2f}")
    print("- client CPU %: the load generator's own CPU time over the wall time (100 = one CPU); "
          "server CPU: the server process's own, all threads, per run; run CPU: the worker (API) "
          "or the CLI process, with the sandbox under it, per run")


def main(args):
    what = args[0]
    if what == "api":
        host, port, token, clients, requests = args[1:6]
        out = api(host, int(port), request(host, port, token), int(clients), int(requests))
    elif what == "health":
        host, port, clients, requests = args[1:5]
        out = api(host, int(port), health_request(host, port), int(clients), int(requests))
    elif what == "cli":
        parallel, runs, airlock, state, workspace = args[1:6]
        argv = [airlock, "--state-dir", state, "run", "-w", workspace, "--", "/bin/true"]
        out = processes(argv, int(parallel), int(runs))
    elif what == "pairs":
        host, port, token, airlock, state, workspace, count = args[1:8]
        pause = float(args[8]) / 1000 if len(args) > 8 else 0.0
        argv = [airlock, "--state-dir", state, "run", "-w", workspace, "--", "/bin/true"]
        out = pairs(host, int(port), token, argv, int(count), pause)
    elif what == "report":
        report(args[1], int(args[2]), int(args[3]))
        return
    elif what == "plain":
        out = processes(["/bin/true"], int(args[1]), int(args[2]))
    else:
        sys.exit(__doc__)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
