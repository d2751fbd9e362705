"""A profile's stack GEMM table (`stack.gemm` in a hardware profile YAML) as the Python tools
read and edit it: rows `- [dtype, m, n, k, FLOP/s, layout]` with an optional batch count.
profile_gemm_rows.py, tools/dev/derive_gemm_rows.py and tools/dev/gemm_tokens_check.py share it.
"""
import re

ROW = re.compile(r"^(\s*)- \[(bf16|fp16|fp32), (\d+), (\d+), (\d+), ([0-9.eE+-]+), (nt|nn|tn)(?:, (\d+))?\]\s*$")


def key_of(dtype, m, n, k, layout, batch=1):
    """A row's key: (dtype, m, n, k, layout, batch)."""
    return (dtype, int(m), int(n), int(k), layout, int(batch or 1))


def fmt(indent, key, rate):
    """The YAML line of a row."""
    dtype, m, n, k, layout, batch = key
    tail = f", {batch}" if batch > 1 else ""
    return f"{indent}- [{dtype}, {m}, {n}, {k}, {rate!r}, {layout}{tail}]\n"


class Table:
    """The rows of |path|'s stack.gemm: |rows| maps key -> FLOP/s, |index| key -> line number in
    |lines| (the whole file); |last| is the last row's line (None: no table), |indent| its
    indent."""

    def __init__(self, path):
        self.path = path
        self.lines = open(path).readlines()
        self.rows, self.index, self.last, self.indent = {}, {}, None, "    "
        top, in_gemm = None, False
        for i, line in enumerate(self.lines):
            t = re.match(r"^([A-Za-z_][A-Za-z0-9_]*):", line)
            if t:
                top, in_gemm = t.group(1), False
            if top == "stack" and re.match(r"^  gemm:\s*$", line):
                in_gemm = True
                continue
            if not in_gemm:
                continue
            m = ROW.match(line)
            if not m:
                if line.strip():
                    in_gemm = False
                continue
            key = key_of(m.group(2), m.group(3), m.group(4), m.group(5), m.group(7), m.group(8))
            self.rows[key] = float(m.group(6))
            self.index[key] = i
            self.indent, self.last = m.group(1), i
