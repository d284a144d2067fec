#!/usr/bin/env python3
"""Writes tests/data/python/linetables-<release>.json for the interpreter that runs it: the line
table of every code object of a fixed sample program, and the line CPython itself gives each
instruction offset. python_lines_test.cpp decodes the tables with eacgm's decoder and must agree.

    for py in ~/.pyenv/versions/3.{8..13}*/bin/python3 /usr/bin/python3.11; do
        $py tests/python/dump_linetables.py
    done

The sample is compiled, never run. It has what stresses a line-table decoder: loops, nested
functions, classes, lambdas, comprehensions, line gaps of more than 255 lines, multi-line
expressions whose instructions go back more than 255 lines, single lines with more than 254 bytes
of bytecode, and enough names and constants for EXTENDED_ARG.
"""
import dis
import json
import os
import platform
import sys

GAP = "\n" * 300  # a jump of more than 255 (and 127) lines
BIG_LINE = "        total = [" + ", ".join(f"v{i % 7} + {i}" for i in range(120)) + "]\n"
MANY_NAMES = "".join(f"    n{i} = {i} * 3.5\n" for i in range(300))  # > 256 locals and constants

SAMPLE = f'''\
import os


def loops(n):
    total = 0
    for i in range(n):
        if i % 2:
            total += i
        else:
            total -= 1
    while total > 10:
        total //= 2
    return total


def outer(x):
    def inner(y):
        return lambda z: x + y + z
    return inner(x)(1)


class Shape:
    sides = 0

    def __init__(self, name):
        self.name = name

    @property
    def label(self):
        return (
            self.name
            + ":"
            + str(self.sides)
        )

    class Inner:
        def method(self):
            return [c for c in "abc" if c != "b"]


def comprehensions(items):
    squares = [i * i for i in items]
    evens = {{i for i in items if i % 2 == 0}}
    table = {{k: v for k, v in zip(items, squares)}}
    return sum(x for x in squares), evens, table


def long_function(v0, v1, v2, v3, v4, v5, v6):
    start = v0
{GAP}
    far = start + 1
    for k in range(3):
        far += k
{GAP}
        far -= 1
    if far > 2:
{BIG_LINE}
    else:
        total = []
    try:
        value = total[0]
    except IndexError:
        value = None
    finally:
        far = 0
{MANY_NAMES}
    return value, far, n299


def multiline(x, a, b):
    with x as y:
        a = 1
{GAP}
        b = 2
    c = [
        y
{GAP}
        for y in x]
    d = x(
        1,
{GAP}
        2)
    e = (x if
{GAP}
        a else b)
    return c, d, e


async def coro(session):
    async with session as s:
        async for item in s:
            await item


def generator(n):
    yield from range(n)
    yield n


result = [loops(5), outer(2), Shape("sq").label, comprehensions([1, 2, 3])]
'''


def code_objects(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield from code_objects(const)


def line_ranges(code):
    """[start, end, line] byte ranges covering the bytecode; line 0 where CPython has none."""
    size = len(code.co_code)
    if sys.version_info >= (3, 10):
        ranges = [(start, end, line or 0) for start, end, line in code.co_lines()]
    else:
        # Before 3.10 every instruction has a line: the one of the last line start at or before
        # it (what PyCode_Addr2Line computes from co_lnotab).
        starts = list(dis.findlinestarts(code))
        ranges = [(offset, nxt, line)
                  for (offset, line), (nxt, _) in zip(starts, starts[1:] + [(size, 0)])]
    merged = []
    for start, end, line in ranges:
        if start >= end:
            continue
        if merged and merged[-1][1] == start and merged[-1][2] == line:
            merged[-1][1] = end
        else:
            merged.append([start, end, line])
    assert merged[0][0] == 0 and merged[-1][1] == size, "the ranges cover the bytecode"
    return merged


def main():
    module = compile(SAMPLE, "sample.py", "exec")
    table = "co_linetable" if sys.version_info >= (3, 10) else "co_lnotab"
    codes = [{
        "name": getattr(code, "co_qualname", code.co_name),
        "firstlineno": code.co_firstlineno,
        "code_size": len(code.co_code),
        "linetable": getattr(code, table).hex(),
        "lines": line_ranges(code),
    } for code in code_objects(module)]
    release = platform.python_version()
    if os.path.realpath(sys.executable).startswith("/usr/bin/"):
        release += "-debian"
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "python",
                       f"linetables-{release}.json")
    with open(os.path.normpath(out), "w") as f:
        json.dump({"version": sys.version_info[0] * 100 + sys.version_info[1],
                   "release": release, "codes": codes}, f, indent=1)
        f.write("\n")
    print(f"{os.path.normpath(out)}: {len(codes)} code objects, "
          f"{sum(c['code_size'] for c in codes)} bytes of bytecode")


if __name__ == "__main__":
    main()
