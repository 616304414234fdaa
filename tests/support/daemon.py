"""Agent code that leaves a daemon behind (no tests here): the source of ``daemon(pidfile)``,
which forks, calls ``setsid()``, forks again and writes the daemon's pid, so no process
group, session or parent-death signal reaches it; put in front of an agent's or an
upstream's own source."""

DAEMON_SOURCE = r'''
import os, time


def daemon(pidfile):
    """Fork, setsid, fork again; the daemon's pid once it wrote it."""
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            with open(pidfile + ".part", "w") as handle:
                handle.write(str(os.getpid()))
            os.rename(pidfile + ".part", pidfile)
            while True:
                time.sleep(1)
        os._exit(0)
    os.waitpid(first, 0)
    for _ in range(1000):
        if os.path.exists(pidfile):
            return int(open(pidfile).read())
        time.sleep(0.01)
    raise TimeoutError("the daemon wrote no pid")
'''
