"""make bench-ab BASE=<git rev>: the fabmeter side of `make bench`'s rows, measured with the engine of BASE
and with this tree's engine, alternately (base, new, new, base, ...), medians over rounds.

BASE is built once in a temporary git worktree (kept under build/bench-ab/<commit>/ for the next run).
Rows that measure the same thing (three shm rows are one `lat -t shm --poll busy`) are measured once per
round and engine, each row taking its own figure (p50, mean) from that run. Per row it prints both
medians, new / base with the interval of its median round ratio, and the verdict (fabmeter/stats.py): slower
only when that interval lies wholly beyond --limit (latency: a higher figure; throughput: a lower one), "~"
when the rounds cannot tell. Rows newer than BASE (options its engine lacks) are skipped, saying so.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from fabmeter import analysis, bench, stats  # noqa: E402
from fabmeter.errors import EXIT_INTERRUPTED, FabmeterError  # noqa: E402


def build_base(rev: str) -> Path:
    """The engine of `rev`, built in a temporary worktree; cached per commit."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", rev + "^{commit}"], check=True,
                         capture_output=True, text=True).stdout.strip()
    cached = REPO / "build" / "bench-ab" / sha / "fabmeter-engine"
    if cached.exists():
        return cached
    tmp = Path(tempfile.mkdtemp(prefix="fabmeter-bench-ab-"))
    tree = tmp / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), sha], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        sys.stderr.write(f"bench-ab: building {rev} ({sha[:12]}) in {tree}\n")
        subprocess.run(["cmake", "-S", str(tree / "engine"), "-B", str(tmp / "build"), "-G", "Ninja",
                        "-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DBUILD_TESTING=OFF"], check=True,
                       stdout=subprocess.DEVNULL)
        # A revision whose transports are plugins: those too, kept beside its engine (plugins/).
        targets = ["fabmeter-engine"]
        if "fabmeter-plugins" in (tree / "engine" / "CMakeLists.txt").read_text():
            targets.append("fabmeter-plugins")
        subprocess.run(["cmake", "--build", str(tmp / "build"), "--target", *targets], check=True,
                       stdout=subprocess.DEVNULL)
        cached.parent.mkdir(parents=True, exist_ok=True)
        if (tmp / "build" / "plugins").is_dir():
            shutil.copytree(tmp / "build" / "plugins", cached.parent / "plugins", dirs_exist_ok=True)
        shutil.copy2(tmp / "build" / "fabmeter-engine", cached)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    return cached


class Measure:
    """A row's fabmeter side split in two: `fetch` runs the measurement (keyed by what it measures, so rows that
    measure the same run share it) and `pick` takes the row's own figure from it (p50 for one, mean for another)."""

    def __init__(self, key, fetch, pick):
        self.key, self.fetch, self.pick = key, fetch, pick

    def __call__(self) -> float:
        return self.pick(self.fetch())


class Keyed(bench.Bench):
    """A Bench whose fabmeter-side measurements are Measures."""

    def fabmeter(self, experiment, options, pick):
        key = " ".join([experiment, *(f"{k}={v}" for k, v in sorted(options.items()))])
        return Measure(key, super().fabmeter(experiment, options, lambda point: point), pick)

    def fabmeter_all(self, experiment, options, pick):
        key = " ".join([experiment, *(f"{k}={v}" for k, v in sorted(options.items()))]) + " (all points)"
        return Measure(key, super().fabmeter_all(experiment, options, lambda points: points), pick)

    def session(self, experiment, options, token, pick):
        key = " ".join([experiment, *(f"{k}={v}" for k, v in sorted(options.items()))]) + (" (token)" if token else
                                                                                          " (no token)")
        return Measure(key, super().session(experiment, options, token, lambda points, wall_s: (points, wall_s)),
                       lambda got: pick(*got))

    def one_run(self, experiment, options, ours, theirs):
        # Only the fabmeter side is compared here: a Measure like any other.
        return self.fabmeter(experiment, options, ours), self.fabmeter(experiment, options, theirs)

    def one_limits(self, args, ours, theirs):
        return self.limit(ours, args), self.limit(theirs, args)

    def limit(self, pick, args=()):
        # Keyed after its row below: two limits rows of one run are measured apart, as the bench does.
        return Measure(None, super().limit(lambda lim: lim, args), pick)


def rows_for(engine: str, out: Path, cpus) -> list[bench.Row]:
    """The bench's rows, each fabmeter side a Measure with a key."""
    rows = Keyed(out, cpus, engine).rows()
    for row in rows:
        if row.fabmeter.key is None:
            row.fabmeter.key = "limits: " + row.name
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision of the base engine")
    ap.add_argument("--engine", default=str(REPO / "build" / "engine" / "fabmeter-engine"),
                    help="the new engine (default: this tree's build)")
    ap.add_argument("--base-engine", help="a base engine already built (skips building --base)")
    ap.add_argument("--rounds", type=int, default=5,
                    help=f"rounds (default: %(default)s, at least {stats.MIN_ROUNDS}: the fewest with an interval)")
    ap.add_argument("--cpus", default="0,1", help="client and server CPUs (default: %(default)s)")
    ap.add_argument("--only", help="measure only rows whose name contains this text")
    ap.add_argument("--limit", type=float, default=1.0,
                    help="flag a row whose new/base interval lies wholly beyond this factor, worse side "
                         "(default: %(default)s)")
    ns = ap.parse_args()
    if ns.rounds < stats.MIN_ROUNDS:
        ap.error(f"--rounds must be at least {stats.MIN_ROUNDS}")
    cpus = tuple(int(c) for c in ns.cpus.split(",")) if ns.cpus else None
    engines = {"base": str(ns.base_engine or build_base(ns.base)), "new": ns.engine}
    out = Path(tempfile.mkdtemp(prefix="fabmeter-bench-ab-runs-"))
    try:
        rows = {side: rows_for(path, out / side, cpus) for side, path in engines.items()}
        keep = [i for i, row in enumerate(rows["new"]) if not ns.only or ns.only in row.name]
        # Distinct measurements, in row order: key -> the rows taking a figure from it; per row, samples per side.
        measures: dict[str, dict] = {}
        for i in keep:
            measures.setdefault(rows["new"][i].fabmeter.key, {"rows": [], "skipped": ""})["rows"].append(i)
        samples = {i: {"base": [], "new": []} for i in keep}
        row_skipped: dict[int, str] = {}      # a row whose figure one engine's run lacks (a field newer than BASE)
        print(f"bench-ab: base {ns.base} ({engines['base']}), new {engines['new']}; {ns.rounds} rounds, "
              f"{len(measures)} measurements, CPUs {list(cpus) if cpus else 'unpinned'}")
        for r in range(ns.rounds):
            sys.stderr.write(f"bench-ab: round {r + 1}/{ns.rounds}\n")
            for j, (key, m) in enumerate(measures.items()):
                if m["skipped"]:
                    continue
                order = ["base", "new"] if (r + j) % 2 == 0 else ["new", "base"]
                side = order[0]
                try:
                    for side in order:
                        raw = rows[side][m["rows"][0]].fabmeter.fetch()
                        for i in m["rows"]:
                            if i in row_skipped:
                                continue
                            try:
                                samples[i][side].append(rows[side][i].fabmeter.pick(raw))
                            except KeyError as e:     # this row's figure only: the run's other rows stand
                                row_skipped[i] = f"the {side} engine cannot measure it: {e}"
                except bench.Skip as e:
                    m["skipped"] = str(e)
                except (KeyError, FabmeterError) as e:  # a row newer than the base engine (an option it lacks)
                    if isinstance(e, FabmeterError) and e.exit_code == EXIT_INTERRUPTED:
                        raise
                    m["skipped"] = f"the {side} engine cannot measure it: {e}"
        table, slower = [], 0
        for i in keep:
            row = rows["new"][i]
            m, got = measures[row.fabmeter.key], ({"base": [], "new": []} if i in row_skipped else samples[i])
            limit = 1 / ns.limit if row.higher_is_better else ns.limit
            c = stats.compare_rounds(got["base"], got["new"], row.higher_is_better, reference=limit)
            worse = c.verdict == stats.WORSE
            slower += worse
            verdict = ("skipped: " + (row_skipped.get(i) or m["skipped"])) if c.ratio is None else (
                "SLOWER" if worse else {stats.BETTER: "faster", stats.SAME: "~", stats.UNKNOWN: "cannot tell"}[c.verdict])
            interval = f"{c.interval[0]:.3f}..{c.interval[1]:.3f}" if c.interval else "-"
            table.append([row.name, row.figure, c.base, c.new, None if c.ratio is None else f"{c.ratio:.3f}",
                          interval, verdict])
        print(analysis.format_table(["row", "figure", "base", "new", "new/base", "round ratios' interval",
                                     "result"], table, left=2))
        print(f"{slower} row(s) slower than base beyond {ns.limit}x by their rounds" if slower else
              f"no row slower than base beyond {ns.limit}x by its rounds; ~: the rounds cannot tell")
        return 1 if slower else 0
    except FabmeterError as e:
        sys.stderr.write(f"bench-ab: {e}\n")
        return e.exit_code
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
