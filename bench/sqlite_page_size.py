#!/usr/bin/env python3
"""What the page size of events.sqlite costs its readers.

The writer's end of run (indexes, checkpoint) is cheaper with larger pages (bench/sink_cost); this
times what readers do on the same rows at two page sizes, so the choice is made on both sides:

- a scan of every call grouped by API (analyze, compare, merge's per-API figures, report);
- every call of one API through the calls_by_name index (an ad-hoc query);
- random calls by id (a join from collectives, or a user looking one call up);
- short time windows of one process through calls_by_pid_start (a timeline zoom).

    bench/sqlite_page_size.py SESSION_DB [RUNS=5] [PAGE_SIZES=4096,65536]

SESSION_DB is a finished events.sqlite, e.g. one that `build/bench/sink_cost 200000 1 /tmp/s` kept
(/tmp/s/events.sqlite). It is copied and rebuilt (VACUUM) at each page size; the runs of the sizes
alternate so that the machine's noise falls on both alike. Prints the median of each reader's time
per size and its ratio to the first size.
"""
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

LOOKUPS = 100_000
WINDOWS = 10_000


def readers(db):
    (calls, lo, hi) = db.execute("SELECT COUNT(*), MIN(start_ns), MAX(start_ns) FROM calls").fetchone()
    (name,) = db.execute("SELECT name FROM calls GROUP BY name ORDER BY COUNT(*) LIMIT 1").fetchone()
    (pid,) = db.execute("SELECT pid FROM calls LIMIT 1").fetchone()
    span = max(hi - lo, 1)
    return {
        "scan by API": ("SELECT layer, name, COUNT(*), SUM(duration_ns), MAX(duration_ns) "
                        "FROM calls WHERE inner_call = 0 GROUP BY layer, name", ()),
        "one API by index": ("SELECT COUNT(*), SUM(duration_ns), SUM(bytes) FROM calls "
                             "WHERE name = ?", (name,)),
        f"{LOOKUPS} calls by id": (
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            "SELECT SUM(c.duration_ns) FROM n JOIN calls c ON c.id = 1 + abs(random()) % ?",
            (LOOKUPS, calls)),
        f"{WINDOWS} 1 ms windows": (
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?), "
            "w(t) AS MATERIALIZED (SELECT ? + abs(random()) % ? FROM n) "
            "SELECT COUNT(*) FROM w JOIN calls c ON c.pid = ? AND c.start_ns BETWEEN w.t AND "
            "w.t + 1000000",
            (WINDOWS, lo, span, pid)),
    }


def rebuilt(source, page_size, directory):
    path = os.path.join(directory, f"events-{page_size}.sqlite")
    shutil.copyfile(source, path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = DELETE")
    db.execute(f"PRAGMA page_size = {page_size}")
    db.execute("VACUUM")
    got = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    if got != page_size:
        sys.exit(f"sqlite_page_size: {path} kept page size {got}, not {page_size}")
    return path


def time_reader(path, sql, params):
    # A fresh connection per run: readers are separate commands, each with a cold SQLite cache
    # (the files stay in the kernel's page cache, as they do for a user's next command).
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    start = time.perf_counter()
    db.execute(sql, params).fetchall()
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


def main():
    if len(sys.argv) < 2 or not os.path.isfile(sys.argv[1]):
        sys.exit(__doc__)
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    sizes = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "4096,65536").split(",")]
    with tempfile.TemporaryDirectory() as directory:
        paths = {size: rebuilt(sys.argv[1], size, directory) for size in sizes}
        db = sqlite3.connect(paths[sizes[0]])
        queries = readers(db)
        db.close()
        times = {(size, q): [] for size in sizes for q in queries}
        for _ in range(runs):
            for q, (sql, params) in queries.items():
                for size in sizes:
                    times[(size, q)].append(time_reader(paths[size], sql, params))
        print(f"runs={runs}; median ms per reader; ratio to {sizes[0]}-byte pages")
        print("reader".ljust(24) + "".join(f"{s:>14}" for s in sizes))
        for q in queries:
            base = statistics.median(times[(sizes[0], q)])
            row = q.ljust(24)
            for size in sizes:
                m = statistics.median(times[(size, q)])
                row += f"{m * 1e3:9.1f} {m / base:4.2f}"
            print(row)
        print("file size, MiB".ljust(24) +
              "".join(f"{os.path.getsize(paths[s]) / 2**20:14.1f}" for s in sizes))


if __name__ == "__main__":
    main()
