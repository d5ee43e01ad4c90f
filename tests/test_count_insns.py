"""rdma/count_insns.py: instructions per round trip from rdma/tbcount.c's
block counts, start-up cancelled by the difference of two run lengths, split
into user space and kernel symbols; and the plugin itself compiles."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import REPO, script_module

KALLSYMS = """0000000000000000 t hidden_before_kptr
ffffffff81000000 T entry_SYSCALL_64
ffffffff81001000 t rxe_requester
ffffffff81002000 T memcpy
"""
USER, ENTRY, RXE = (0x401000, 5), (0xFFFFFFFF81000010, 3), (0xFFFFFFFF81001020, 7)


def count_module():
    return script_module("count_insns_mod", "rdma/count_insns.py")


def write_run(d, tag, execs_per_rt, n, startup=40):
    """Snapshots a and b around a run of n round trips: every block ran
    earlier (counts are cumulative over the boot, more so for later runs),
    then execs_per_rt[block] * n + startup times."""
    before = 77 * n
    a = {b: before for b in execs_per_rt}
    b = {blk: before + per * n + startup for blk, per in execs_per_rt.items()}
    for suffix, snap in (("a", a), ("b", b)):
        (d / f"snap-{tag}-{suffix}").write_text("".join(f"{va:x} {ni} {e}\n" for (va, ni), e in snap.items()))


@pytest.fixture
def outdir(tmp_path):
    (tmp_path / "kallsyms").write_text(KALLSYMS)
    fm = {USER: 2, ENTRY: 4, RXE: 10}
    pt = {USER: 3, ENTRY: 4, RXE: 11}
    for n in (10, 30):
        write_run(tmp_path, f"fm-fadd-{n}", fm, n)
        write_run(tmp_path, f"pt-fadd-{n}", pt, n, startup=900)
    write_run(tmp_path, "fm-read-10", fm, 10)  # one length only: no figure
    return tmp_path


def test_per_round_trip_cancels_startup(outdir):
    mod = count_module()
    per = mod.per_round_trip(str(outdir), mod.load_symbols(str(outdir / "kallsyms")))
    assert set(per) == {("fadd", "fm"), ("fadd", "pt")}
    fm, pt = per[("fadd", "fm")], per[("fadd", "pt")]
    assert fm["[user]"] == pytest.approx(2 * 5) and pt["[user]"] == pytest.approx(3 * 5)
    assert fm["entry_SYSCALL_64"] == pytest.approx(4 * 3) and fm["rxe_requester"] == pytest.approx(10 * 7)
    assert pt["rxe_requester"] == pytest.approx(11 * 7)
    assert fm["#blocks user"] == pytest.approx(2) and fm["#blocks kernel"] == pytest.approx(14)
    assert mod.totals(fm) == pytest.approx((10, 82))


def test_cli_prints_rows_and_differences(outdir):
    res = subprocess.run([sys.executable, str(REPO / "rdma" / "count_insns.py"), str(outdir)],
                         capture_output=True, text=True, check=True)
    rows = {tuple(l.split()[:2]): l.split()[2:5] for l in res.stdout.splitlines() if l.startswith("fadd ")}
    assert rows[("fadd", "fm")] == ["92", "10", "82"] and rows[("fadd", "pt")] == ["104", "15", "89"]
    diffs = res.stdout.split("largest differences")[1].splitlines()[1:3]
    assert diffs[0].split()[0] == "rxe_requester" and diffs[0].split()[-1] == "-7"
    assert diffs[1].split()[0] == "[user]" and diffs[1].split()[-1] == "-5"


def test_cli_without_two_lengths_fails(tmp_path):
    (tmp_path / "kallsyms").write_text(KALLSYMS)
    write_run(tmp_path, "fm-fadd-10", {USER: 1}, 10)
    res = subprocess.run([sys.executable, str(REPO / "rdma" / "count_insns.py"), str(tmp_path)],
                         capture_output=True, text=True)
    assert res.returncode != 0 and "no tool ran at two lengths" in res.stderr


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler")
def test_plugin_compiles_cleanly(tmp_path):
    so = tmp_path / "tbcount.so"
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o", str(so),
                    str(REPO / "rdma" / "tbcount.c"), "-lpthread"], check=True)
    assert so.stat().st_size > 0
