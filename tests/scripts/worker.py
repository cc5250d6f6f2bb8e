"""A training process stand-in for the supervisor's tests: plain Python, no framework.

Usage: worker.py LABEL=ACTION[:ARG] ... [*=ACTION[:ARG]]
The process finds its label (RANK; else MS_NODE_ID for a MindSpore worker, `sched` for its
scheduler; else W_LABEL) and runs the matching action (`*` matches any). Everything it observes
goes to files in $W_DIR, named after its label, so that the test can check it from outside:
  ready.<label>    written once its signal handlers are installed
  signals.<label>  one line per signal received (`TERM`, `USR1`, ...)
  env.<label>.<n>  on start n of the `flaky` action: pid and MS_NODE_ID, as JSON
When $W_PEERS is set, failing actions first wait for that many ready files, so no peer can miss
the SIGTERM that follows.
"""

import json
import os
import signal
import sys
import time

W_DIR = os.environ.get("W_DIR", ".")


def label():
    if os.environ.get("RANK"):
        return os.environ["RANK"]
    if os.environ.get("MS_ROLE") == "MS_WORKER":
        return os.environ["MS_NODE_ID"]
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return "sched"
    return os.environ.get("W_LABEL", "x")


ME = label()


def path(name):
    return os.path.join(W_DIR, name)


def write(name, text, mode="w"):
    if mode != "w":
        with open(path(name), mode) as fh:
            fh.write(text)
        return
    # whole or not there: a test that sees the file reads all of it
    part = path("." + name + ".part")  # (a dot: no test's glob of NAME.* sees it)
    with open(part, "w") as fh:
        fh.write(text)
    os.replace(part, path(name))


def record(signum, _frame):
    write("signals." + ME, signal.Signals(signum).name[3:] + "\n", "a")


def die_by(signum, frame):
    record(signum, frame)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def ready():
    write("ready." + ME, str(os.getpid()))


def wait_for(predicate, limit=60.0):
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"worker {ME}: gave up waiting")
        time.sleep(0.02)


def wait_peers():
    peers = int(os.environ.get("W_PEERS", "0"))
    wait_for(lambda: sum(n.startswith("ready.") for n in os.listdir(W_DIR)) >= peers)


def sleep_forever():
    while True:
        time.sleep(1)


def act(action, arg):
    if action == "sleep":  # until a signal: SIGTERM recorded, then dies by it
        signal.signal(signal.SIGTERM, die_by)
        signal.signal(signal.SIGUSR1, record)
        ready()
        sleep_forever()
    elif action == "stubborn":  # records SIGTERM and ignores it
        signal.signal(signal.SIGTERM, record)
        ready()
        sleep_forever()
    elif action == "exit":  # prints a few lines, then exits with code ARG
        ready()
        wait_peers()
        for i in range(30):
            print(f"rank {ME} line {i}")
        print(f"last words of {ME}")
        sys.exit(int(arg))
    elif action == "sigkill":
        ready()
        wait_peers()
        print("about to be killed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "usr1":  # records SIGUSR1, then exits 0
        signal.signal(signal.SIGUSR1, lambda s, f: (record(s, f), sys.exit(0)))
        signal.signal(signal.SIGTERM, die_by)
        ready()
        sleep_forever()
    elif action == "orphan":  # forks a grandchild and exits at once
        parent = os.getpid()  # (read in the child, it may already be the adopter's)
        pid = os.fork()
        if pid == 0:
            wait_for(lambda: os.getppid() != parent)
            write("orphan." + ME, json.dumps({"pid": os.getpid(), "ppid": os.getppid()}))
            wait_for(lambda: os.path.exists(path("orphan-go")))
            os._exit(0)
        write("grandchild." + ME, str(pid))
        sys.exit(0)
    elif action == "until":  # prints ARG (if any), then waits for the file `stop`
        signal.signal(signal.SIGTERM, die_by)
        ready()
        if arg:
            print(arg, flush=True)
        wait_for(lambda: os.path.exists(path("stop")), limit=120)
    elif action == "spam":  # ARG=count,width: long distinctive lines, fast
        count, width = (int(v) for v in arg.split(","))
        ready()
        wait_peers()
        out = sys.stdout
        for i in range(count):
            head = f"{ME}:{i}:"
            out.write(head + ME[0] * (width - len(head)) + "\n")
        out.flush()
    elif action == "lend":  # hands its stdout to whoever listens on lend.sock, writes ARG lines
        import socket

        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(path("lend.sock"))
            socket.send_fds(sock, [b"1"], [1])
        out = sys.stdout
        for i in range(int(arg)):
            out.write(f"{ME}:{i}:" + "y" * 90 + "\n")
        out.write(f"{ME} done")  # and exits at once, what it wrote still in the pipe
        out.flush()
    elif action == "partial":  # a last line without its newline
        sys.stdout.write("first line\nno newline at the end")
        sys.stdout.flush()
    elif action == "flaky":  # fails on its first ARG starts, then succeeds
        starts = len([n for n in os.listdir(W_DIR) if n.startswith(f"env.{ME}.")]) + 1
        write(
            f"env.{ME}.{starts}",
            json.dumps({"pid": os.getpid(), "MS_NODE_ID": os.environ.get("MS_NODE_ID")}),
        )
        print(f"start {starts} of {ME}", flush=True)
        sys.exit(3 if starts <= int(arg) else 0)
    elif action == "pid":
        print(f"pid {os.getpid()}", flush=True)
    elif action == "ok":  # with W_PEERS, waits until every peer is ready first
        ready()
        wait_peers()
        print(f"ok from {ME}")
    else:
        sys.exit(f"worker: unknown action {action!r}")


def main():
    table = {}
    for word in sys.argv[1:]:
        key, _, spec = word.partition("=")
        action, _, arg = spec.partition(":")
        table[key] = (action, arg)
    action, arg = table.get(ME) or table.get("*") or ("ok", "")
    act(action, arg)


if __name__ == "__main__":
    main()
