"""The launcher's glibc tunables: added once, never twice, kept beside the user's own, switchable off;
a re-executed process keeps its pid, arguments and the tunable in its environment."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from jaxdebate import host_memory

pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
                                reason="glibc's malloc tunables exist only on glibc Linux")


def test_tuned_environ_adds_the_tunable_once_and_keeps_the_users():
    env = host_memory.tuned_environ({"PATH": "/bin"})
    assert env == {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    assert host_memory.tuned_environ(env) is None  # already set: no second re-exec
    mine = host_memory.tuned_environ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert mine["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert host_memory.tuned_environ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) is None  # the user's choice
    assert host_memory.tuned_environ({"JAXDEBATE_HUGEPAGES": "0"}) is None


def test_reexec_keeps_pid_and_arguments(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        from jaxdebate import host_memory
        print("start", os.getpid(), os.environ.get("GLIBC_TUNABLES"), sys.argv[1:], flush=True)
        host_memory.reexec_with_tuned_malloc()
        print("after", os.getpid(), os.environ.get("GLIBC_TUNABLES"), sys.argv[1:], flush=True)
        print(host_memory.describe())
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "JAXDEBATE_HUGEPAGES")}
    out = subprocess.run([sys.executable, str(script), "a b", "--x"], capture_output=True, text=True, env=env,
                         timeout=60, check=True).stdout.splitlines()
    # the first start re-executes; the second finds the tunable and goes on, same pid and arguments
    start1, start2, after, described = out
    assert start1.split()[2] == "None" and start2.split()[2] == "glibc.malloc.hugetlb=1"
    assert start1.split()[1] == start2.split()[1] == after.split()[1]
    assert after.endswith("['a b', '--x']") and start1.endswith("['a b', '--x']")
    assert described.startswith("GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (transparent huge pages: ")
