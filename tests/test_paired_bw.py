"""rdma/paired_bw.py: two tools measured at once on two rxe pairs, each
entry run twice with the tools swapped between the pairs; the ratio of the
tools must come out with the pairs' own difference cancelled."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, script_module


def paired_module():
    return script_module("paired_bw_mod", "rdma/paired_bw.py")


def lines_for(rnd, op, a, b, a_over_b, p0_over_p1, base_rates):
    """The two placements' lines for tools whose true speed ratio is a_over_b,
    pair 0 running p0_over_p1 times as fast as pair 1."""
    out = []
    for t0, t1, s0, s1 in ((a, b, a_over_b, 1.0), (b, a, 1.0, a_over_b)):
        windows = " ".join(f"{round(r * s0 * p0_over_p1)}/{round(r * s1)}" for r in base_rates)
        out.append(f"{rnd}-{op}-{t0}-{t1} {op} p0={t0} p1={t1} {windows}")
    return out


def test_pair_difference_cancels():
    mod = paired_module()
    lines = lines_for("r1", "read", "fm", "pt", 0.93, 1.05, [4000, 2500, 6100])
    lines += lines_for("r2", "read", "fm", "pt", 0.95, 0.97, [3000, 9000, 1300])
    lines += lines_for("r1", "write+bidir", "fm", "fvB", 1.01, 1.0, [4000, 4100])  # an op with paired-bw.sh's +mods
    got = mod.paired_ratios(lines)
    assert got[("write+bidir", "fm", "fvB")][0][1] == pytest.approx(1.01, abs=0.002)
    rows = got[("read", "fm", "pt")]
    assert [r for r, _, _ in rows] == ["r1", "r2"]
    assert rows[0][1] == pytest.approx(0.93, abs=0.002) and rows[0][2] == pytest.approx(1.05, abs=0.002)
    assert rows[1][1] == pytest.approx(0.95, abs=0.002) and rows[1][2] == pytest.approx(0.97, abs=0.002)


def test_incomplete_or_stalled_pairs_are_left_out():
    mod = paired_module()
    lines = lines_for("r1", "send", "fm", "pt", 0.9, 1.0, [4000, 4000])[:1]  # partner missing
    lines += [l.replace("4000/", "0/", 1) for l in lines_for("r2", "send", "fm", "pt", 0.9, 1.0, [4000, 4000])]
    lines += ["garbage", "r3-send-fm-pt send p0=fm p1=pt"]
    # A client that ended before the windows closed: paired-bw.sh marks the line.
    lines += [l + " ended-early" if i == 0 else l
              for i, l in enumerate(lines_for("r4", "send", "fm", "pt", 0.9, 1.0, [4000, 4000]))]
    skipped = []
    assert mod.paired_ratios(lines, skipped) == {}
    assert len(skipped) == 3 and skipped[-1].endswith("ended-early")


def test_cli_prints_median(tmp_path):
    lines = lines_for("r1", "write", "fm", "pt", 0.96, 1.02, [4400, 4300])
    lines += lines_for("r2", "write", "fm", "pt", 0.98, 1.02, [4400, 4300])
    lines += lines_for("r3", "write", "fm", "pt", 0.90, 1.02, [4400, 4300])
    f = tmp_path / "pairs.txt"
    f.write_text("\n".join(lines) + "\n")
    res = subprocess.run([sys.executable, str(REPO / "rdma" / "paired_bw.py"), str(f)],
                         capture_output=True, text=True, check=True)
    row = [l for l in res.stdout.splitlines() if l.startswith("write")]
    assert len(row) == 1 and row[0].split()[1:3] == ["fm/pt", "0.960"]
    f.write_text("\n".join(lines + ["r4-write-fm-pt write p0=fm p1=pt 4400/4300 ended-early"]) + "\n")
    res = subprocess.run([sys.executable, str(REPO / "rdma" / "paired_bw.py"), str(f)],
                         capture_output=True, text=True, check=True)
    assert "skipped: r4-write-fm-pt" in res.stderr and "0.960" in res.stdout
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    res = subprocess.run([sys.executable, str(REPO / "rdma" / "paired_bw.py"), str(empty)],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "no complete pair" in res.stderr
