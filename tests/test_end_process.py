"""The `dam` script ends its process without the interpreter's teardown (expert.commands._end_process), but only
after what an exit must do: the atexit handlers, the standard streams flushed, and never while another thread runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

ROOT = __file__.rsplit("/tests/", 1)[0]


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = "import atexit, sys, threading, time\nfrom expert.commands import _end_process\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_atexit_handlers_run_and_buffered_output_is_written_before_the_exit_code() -> None:
    done = _run("""
        atexit.register(lambda: print("handler ran"))
        sys.stdout.write("partial line, not flushed")
        sys.stderr.write("to stderr")
        _end_process(3)
        print("never reached")
    """)
    assert done.returncode == 3
    assert done.stdout == "partial line, not flushedhandler ran\n"
    assert done.stderr == "to stderr"


def test_with_another_thread_running_it_returns_for_the_interpreter_to_join_it() -> None:
    done = _run("""
        worker = threading.Thread(target=lambda: (time.sleep(0.3), print("worker finished")))
        worker.start()
        code = _end_process(4)
        print("returned", code)
        sys.exit(code)
    """)
    assert done.returncode == 4
    assert done.stdout.splitlines() == ["returned 4", "worker finished"]
