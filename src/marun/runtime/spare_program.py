"""The program of a spare interpreter (marun.runtime.warm_spare, docs/warm-restarts.md), as the
text `python -c` runs: import the modules with the script's argv and sys.path[0] in place, say
`R` (or `F<why>`) on the control socket, wait for the start (the rank's stdout/stderr descriptor,
then its argv, environment and working directory), put them in place and run the script as
`python SCRIPT` runs it (or `-m MODULE`, as runpy's `_run_module_as_main`). It imports nothing a
cold start would not have but `socket` (and `marshal`, which every interpreter has loaded)."""

from __future__ import annotations

# The spare's program, run as `python -c SPARE_CODE FD MODULES ARGV...` (ARGV: the process's
# argv after the interpreter). No name of it is left in `__main__` once the script runs.
SPARE_CODE = r"""
def _marun_spare():
    import os, sys
    fd, modules = int(sys.argv[1]), [m for m in sys.argv[2].split(",") if m]
    sys.argv[:] = sys.argv[3:]
    kind = "module" if sys.argv[0] == "-m" else "path"
    if kind == "module":
        module = sys.argv.pop(1)
    if sys.path and sys.path[0] == "":
        # -c put "" first; a cold start puts the script's directory (-m: the working directory)
        here = os.path.realpath(sys.argv[0]) if kind == "path" else os.path.join(os.getcwd(), "x")
        sys.path[0] = os.path.dirname(here)
    import socket
    ctl = socket.socket(fileno=fd)
    try:
        for name in modules:
            __import__(name)
    except BaseException as exc:
        why = (type(exc).__name__ + ": " + str(exc)).replace("\n", " ")[:300]
        ctl.sendall(b"F" + why.encode("utf-8", "replace") + b"\n")
        os._exit(3)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    ctl.sendall(b"R\n")

    def exact(n):
        data = b""
        while len(data) < n:
            more = ctl.recv(n - len(data))
            if not more:
                os._exit(0)
            data += more
        return data

    try:
        first, fds, _, _ = socket.recv_fds(ctl, 1, 1)
        if first != b"P" or not fds:
            os._exit(0)
        import marshal
        start = marshal.loads(exact(int.from_bytes(exact(8), "big")))
    except OSError:
        os._exit(0)
    ctl.close()
    env = start["env"]
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
    os.chdir(start["cwd"])
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    out = fds[0]
    os.dup2(out, 1)
    os.dup2(out, 2)
    if out > 2:
        os.close(out)
    argv = start["argv"]
    del start, env, first, fds
    g = sys.modules["__main__"].__dict__
    del g["_marun_spare"]
    try:
        if kind == "module":
            import runpy
            sys.argv[:] = ["-m", *argv[3:]]
            runpy._run_module_as_main(module, True)
        else:
            sys.argv[:] = argv[1:]
            path = os.path.abspath(argv[1])
            from _frozen_importlib_external import SourceFileLoader
            g["__loader__"] = SourceFileLoader("__main__", path)
            g["__file__"] = path
            g["__cached__"] = None
            with open(path, "rb") as f:
                code = compile(f.read(), path, "exec", dont_inherit=True)
            exec(code, g)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:
        etype, value, tb = sys.exc_info()
        tb = tb.tb_next if tb is not None else tb  # the script's frames, as a cold start's
        value.__traceback__ = tb
        sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
        sys.excepthook(etype, value, tb)
        raise SystemExit(1) from None


_marun_spare()
"""


def spare_argv(argv: tuple[str, ...], fd: int, modules: tuple[str, ...]) -> list[str]:
    """The spare's command line for a process started as `argv` (a warm_entry shape)."""
    return [argv[0], "-c", SPARE_CODE, str(fd), ",".join(modules), *argv[1:]]
