"""The workloads' one line for a scorer (bench/detect_eval.py): when and where an injected fault
begins, on the clock eacgm's events carry (CLOCK_MONOTONIC)."""
import os
import time


def mark_fault():
    print(f"fault_start_ns={time.monotonic_ns()} pid={os.getpid()}", flush=True)
