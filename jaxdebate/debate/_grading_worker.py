"""Equivalence worker: runs math-verify on untrusted answers in its own process.

Started by :class:`jaxdebate.debate.grading.Grader` as ``python -P this_file MEMORY_MB SOFT_S
[PARENT_PID]``; it imports nothing from jaxdebate. Protocol (JSON lines): it prints
``{"ready": true}`` once, then for every request line ``{"checks": [[gold, answer], ...]}`` prints
one line per check, in order: ``{"i": k, "r": true | false | "timeout" | "error"}``. A check that
outlives SOFT_S is interrupted with a timer signal; work the signal cannot reach (long C-level integer
arithmetic) is the parent's to stop, by killing this process.
"""

import functools
import json
import logging
import os
import resource
import signal
import sys


_WARM_UP = (("\\frac{1}{2}", "0.5"), ("[1,3)", "\\{1,2\\}"), ("x=3", "\\sqrt{9}"), ("\\text{(C)}", "50\\%"))


class SoftTimeout(BaseException):
    """Raised by the timer; a BaseException so that library ``except Exception`` blocks let it through."""


def _on_alarm(signum, frame):
    raise SoftTimeout()


def _send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _die_with_parent(parent_pid):
    """Linux: have the kernel kill this process when the parent goes, even mid C-level arithmetic.

    The signal fires when the parent *thread* that forked us exits, so the parent forks workers from
    a thread that lives as long as it does. A parent gone before the prctl call is caught by pid.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent_pid is not None and os.getppid() != parent_pid:
        sys.exit(0)  # the parent died before the prctl call took effect


def main():
    memory_mb, soft_s = int(sys.argv[1]), float(sys.argv[2])
    _die_with_parent(int(sys.argv[3]) if len(sys.argv) > 3 else None)
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass
    try:
        import math_verify
        from math_verify import parse, verify
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises a clear error
        _send({"fatal": f"cannot import math_verify: {type(e).__name__}: {e}"})
        return
    logging.disable(logging.WARNING)
    del math_verify

    @functools.lru_cache(maxsize=8192)
    def parsed(answer):
        return parse("\\boxed{" + answer + "}", parsing_timeout=None)

    def check(gold, answer):
        g, a = parsed(gold), parsed(answer)
        if not g or not a:
            return False
        return bool(verify(g, a, timeout_seconds=None))

    for gold, answer in _WARM_UP:  # first use compiles parsers lazily: pay for it before any deadline
        check(gold, answer)
    parsed.cache_clear()
    signal.signal(signal.SIGALRM, _on_alarm)
    _send({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        for k, (gold, answer) in enumerate(request["checks"]):
            try:
                signal.setitimer(signal.ITIMER_REAL, soft_s)
                try:
                    result = check(gold, answer)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except SoftTimeout:
                result = "timeout"
            except (Exception, RecursionError, MemoryError):  # noqa: BLE001 - untrusted input
                result = "error"
            _send({"i": k, "r": result})


if __name__ == "__main__":
    main()
