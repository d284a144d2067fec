#!/usr/bin/env python3
"""Writes tests/data/python/layouts.json: the struct eacgm_py_layout fields of every CPython whose
libpython with DWARF is installed under ~/.pyenv/versions, as gdb computes them.

The C++ table (src/layers/python/python_layouts.cpp) is typed in by hand; this file is the independent
measurement python_layouts_test.cpp compares it with. Fields a version lacks are null (the table
says EACGM_PY_NONE). Besides the contract's fields it records the bit numbers of the `compact`
and `ascii` flags of PyASCIIObject.state, which the BPF side hard-codes as 5 and 6.

Run with any Python 3: tests/python/dump_layouts.py [--pyenv DIR] [--out FILE]
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys


def offset(type_, field):
    return f"(long)&(({type_}*)0)->{field}"


def expressions(minor):
    """gdb expressions for each layout field of CPython 3.<minor>; None: the version lacks it."""
    new_frames = minor >= 11  # _PyInterpreterFrame replaced PyFrameObject on the stack
    frame = "struct _PyInterpreterFrame" if new_frames else "PyFrameObject"
    tstate = "PyThreadState"
    code = "PyCodeObject"
    if minor >= 13:
        tstate_frame, cframe = offset(tstate, "current_frame"), None
    elif minor >= 11:
        tstate_frame, cframe = offset(tstate, "cframe"), offset("_PyCFrame", "current_frame")
    else:
        tstate_frame, cframe = offset(tstate, "frame"), None
    return {
        "runtime_interpreters_head": offset("_PyRuntimeState", "interpreters.head"),
        "interp_threads_head": offset("PyInterpreterState",
                                      "threads.head" if minor >= 11 else "tstate_head"),
        "tstate_next": offset(tstate, "next"),
        "tstate_thread_id": offset(tstate, "thread_id"),
        "tstate_native_thread_id": offset(tstate, "native_thread_id") if minor >= 11 else None,
        "tstate_frame": tstate_frame,
        "cframe_current_frame": cframe,
        "frame_back": offset(frame, "previous" if new_frames else "f_back"),
        "frame_code": offset(frame, "f_executable" if minor >= 13 else "f_code"),
        "frame_instr": offset(frame, {11: "prev_instr", 12: "prev_instr"}.get(
            minor, "instr_ptr" if minor >= 13 else "f_lasti")),
        # 3.11 frames have an owner too, but no C-stack frames to skip: the contract leaves it out.
        "frame_owner": offset(frame, "owner") if minor >= 12 else None,
        "frame_owner_cstack": "(long)FRAME_OWNED_BY_CSTACK" if minor >= 12 else None,
        "code_filename": offset(code, "co_filename"),
        "code_name": offset(code, "co_name"),
        "code_qualname": offset(code, "co_qualname") if minor >= 11 else None,
        "code_firstlineno": offset(code, "co_firstlineno"),
        "code_linetable": offset(code, "co_linetable" if minor >= 10 else "co_lnotab"),
        "code_code": offset(code, "co_code_adaptive") if minor >= 11 else None,
        "unicode_state": offset("PyASCIIObject", "state"),
        "unicode_ascii_data": "(long)sizeof(PyASCIIObject)",
        "bytes_size": offset("PyVarObject", "ob_size"),
        "bytes_data": offset("PyBytesObject", "ob_sval"),
    }


def gdb_values(library, exprs):
    """Evaluates `exprs` in gdb on `library`; returns their integer values in order."""
    args = ["gdb", "-nx", "-batch"]
    for expr in exprs:
        args += ["-ex", f"print {expr}"]
    out = subprocess.run(args + [library], check=True, capture_output=True, text=True).stdout
    values = [int(v) for v in re.findall(r"^\$\d+ = (-?\d+)$", out, re.M)]
    if len(values) != len(exprs):
        sys.exit(f"gdb answered {len(values)} of {len(exprs)} expressions on {library}:\n{out}")
    return values


def state_bits(library):
    """Bit numbers of the state flags of PyASCIIObject, from gdb's `ptype/o` ("32: 5 ...")."""
    args = ["gdb", "-nx", "-batch", "-ex", "ptype/o PyASCIIObject", library]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    bits = {m[1]: int(m[0]) for m in re.findall(r"\d+:\s*(\d+)\s*\|.*unsigned int (\w+) : 1;", out)}
    return {"unicode_compact_bit": bits["compact"], "unicode_ascii_bit": bits["ascii"]}


# From 3.13 the runtime carries its own table of these offsets for debuggers (_Py_DebugOffsets,
# cookie "xdebugpy", initialised in the file): a second opinion on what gdb computed.
DEBUG_OFFSETS = {
    "runtime_interpreters_head": "runtime_state.interpreters_head",
    "interp_threads_head": "interpreter_state.threads_head",
    "tstate_next": "thread_state.next",
    "tstate_thread_id": "thread_state.thread_id",
    "tstate_native_thread_id": "thread_state.native_thread_id",
    "tstate_frame": "thread_state.current_frame",
    "frame_back": "interpreter_frame.previous",
    "frame_code": "interpreter_frame.executable",
    "frame_instr": "interpreter_frame.instr_ptr",
    "frame_owner": "interpreter_frame.owner",
    "code_filename": "code_object.filename",
    "code_name": "code_object.name",
    "code_qualname": "code_object.qualname",
    "code_firstlineno": "code_object.firstlineno",
    "code_linetable": "code_object.linetable",
    "code_code": "code_object.co_code_adaptive",
    "unicode_state": "unicode_object.state",
    "unicode_ascii_data": "unicode_object.asciiobject_size",
    "bytes_size": "bytes_object.ob_size",
    "bytes_data": "bytes_object.ob_sval",
}


def check_debug_offsets(library, layout):
    names = list(DEBUG_OFFSETS)
    exprs = [f"(long)_PyRuntime.debug_offsets.{DEBUG_OFFSETS[n]}" for n in names]
    for name, value in zip(names, gdb_values(library, exprs)):
        if value != layout[name]:
            sys.exit(f"{library}: {name} is {layout[name]} but _Py_DebugOffsets says {value}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pyenv", default=os.path.expanduser("~/.pyenv/versions"))
    parser.add_argument("--out", default=os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "python", "layouts.json")))
    opts = parser.parse_args()

    layouts = []
    for library in glob.glob(os.path.join(opts.pyenv, "3.*", "lib", "libpython3.*.so.1.0")):
        release = os.path.basename(os.path.dirname(os.path.dirname(library)))
        minor = int(release.split(".")[1])
        if minor < 8:  # before the versions eacgm supports (and named libpython3.Xm)
            continue
        exprs = expressions(minor)
        wanted = [name for name, expr in exprs.items() if expr is not None]
        values = dict(zip(wanted, gdb_values(library, [exprs[n] for n in wanted])))
        layout = {"version": 300 + minor, "release": release}
        layout.update({name: values.get(name) for name in exprs})
        layout.update(state_bits(library))
        if minor >= 13:
            check_debug_offsets(library, layout)
        layouts.append(layout)
    layouts.sort(key=lambda layout: layout["version"])
    with open(opts.out, "w") as f:
        json.dump(layouts, f, indent=1)
        f.write("\n")
    print(f"{opts.out}: {', '.join(layout['release'] for layout in layouts)}")


if __name__ == "__main__":
    main()
