"""Mutation score of the domain core (issue 29): mutmut 3 over one module at a time, run against the tests that
cover that module (not the whole suite), plus SQL-text mutants for the SQL guards (bench/sql_mutants.py).

    python -m bench.mutation [--module NAME ...] [--resume] [--sql-only | --no-sql] [--no-write]

Why mutmut 3 (docs/benchmarks.md "Mutation score"): it imports the tests once in a fork server and forks one
child per mutant from it (`process_isolation = "forkserver"`), and it runs only the tests its stats pass saw call
the mutated function; one pytest start here costs ~8 s (the embedded Postgres and Valkey of tests/conftest.py),
so a tool that starts pytest per mutant (cosmic-ray's default runner) would need days for ~1,800 mutants. The
run starts one throw-away Postgres + Valkey itself and hands them to every child through DATABASE_URL/REDIS_URL
(tests/conftest.py then starts none). The fork server never runs a test, so no child inherits an open database
connection.

Each module gets its own work folder `bench/out/mutation/NAME/` (a copy of the tree taken when the module starts,
so other edits in the working tree do not move under a run, with a `[tool.mutmut]` section of its own);
`--resume` keeps it and mutmut skips every mutant that already has a result. Results: `bench/out/mutation/NAME.json`
(status of every mutant, the diff of every survivor), `bench/out/mutation/sql.json`, and the table, printed and
written to docs/benchmarks.md's "Mutation score" section. Equivalent mutants are listed, each with its reason, in
bench/mutation_equivalents.toml. Processes run under `nice -n 10` with one mutant at a time: the machine is shared.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import write_section
from bench.services import throwaway_services
from tests.harness import ROOT

OUT = ROOT / "bench" / "out" / "mutation"
EQUIVALENTS = ROOT / "bench" / "mutation_equivalents.toml"
NICE = ["nice", "-n", "10"]
# the tree a test run needs: the code, the tests, and what the code reads from disk (migrations, templates, static)
TREE = ("app", "bench", "jobs", "tests", "migrations", "templates", "static", "alembic.ini", "pyproject.toml")


@dataclass(frozen=True)
class Module:
    path: str  # the file mutmut mutates
    tests: tuple[str, ...]  # the test files (or node ids) that cover it: fast ones, found by reading
    pure: tuple[str, ...] = ()  # those of them that never touch the database (no TRUNCATE before each test)
    # only these functions are mutated (none: all of them): mutmut's own mutant-name patterns, handed to
    # `mutmut run` (`app.infestations.queries.x_guarded_map__mutmut_*`); its other mutants are generated, never run
    functions: tuple[str, ...] = ()

    def patterns(self) -> list[str]:
        dotted = self.path.removesuffix(".py").replace("/", ".")
        return [f"{dotted}.x_{function}__mutmut_*" for function in self.functions]

    def counts(self, mutant: str) -> bool:
        return not self.functions or any(fnmatch.fnmatchcase(mutant, p) for p in self.patterns())


PAGING, TEXT, REFS = (
    "tests/kernel/test_paging_mutants.py",
    "tests/kernel/test_text_mutants.py",
    "tests/kernel/test_refs.py",
)
ACTORS = ("tests/kernel/test_actors.py", "tests/kernel/test_actors_mutants.py")
INFESTATIONS = "tests/infestations/test_infestations_mutants.py"
SARIF = "tests/reports/test_sarif_mutants.py"
MODULES: dict[str, Module] = {
    "paging": Module("app/kernel/paging.py", (PAGING,), pure=(PAGING,)),  # its DB test reads generate_series only
    "text": Module("app/kernel/text.py", (TEXT,), pure=(TEXT,)),
    "refs": Module("app/kernel/refs.py", (REFS,), pure=(REFS,)),
    "actors": Module("app/kernel/actors.py", ACTORS, pure=ACTORS),
    "visibility": Module("app/record/visibility.py", ACTORS, pure=ACTORS),
    "public": Module("app/record/public.py", ("tests/record/test_public_mutants.py",)),
    "quorum": Module(
        "app/reports/quorum.py",
        ("tests/reports/test_quorum_mutants.py", "tests/reports/test_quorum.py", "tests/reports/test_checks.py"),
    ),
    "secrets_scanner": Module(
        "app/reports/secrets_scanner.py",
        ("tests/reports/test_secrets_mutants.py", "tests/reports/test_report_validation.py"),
        pure=("tests/reports/test_secrets_mutants.py",),
    ),
    # its pure tests only: the API and CLI tests of SARIF start Bandit and the CLI, ~40 s for each mutant that lives
    "sarif": Module("app/reports/sarif.py", (SARIF,), pure=(SARIF,)),
    "sarif_runs": Module("app/reports/sarif_runs.py", (SARIF,), pure=(SARIF,)),
    "validation": Module(
        "app/reports/validation.py",
        ("tests/reports/test_validation_mutants.py", "tests/reports/test_report_validation.py"),
        pure=("tests/reports/test_validation_mutants.py",),
    ),
    "finding_memory": Module(
        "app/reports/finding_memory.py",
        ("tests/reports/test_finding_memory_mutants.py", "tests/reports/test_finding_memory.py"),
        pure=("tests/reports/test_finding_memory_mutants.py", "tests/reports/test_finding_memory.py"),
    ),
    # the SQL-free parts only: the statements are composed at import, where no mutant switched on at test time
    # reaches them (the SQL guards they use have their SQL-text mutants); their functions are mutated by name
    "infestation_queries": Module(
        "app/infestations/queries.py",
        (INFESTATIONS,),
        pure=(INFESTATIONS,),
        functions=("parse_pattern_key", "guarded_map", "_oldest"),
    ),
    "projection": Module(
        "app/infestations/projection.py",
        (INFESTATIONS,),
        pure=(INFESTATIONS,),
        functions=("_bucket", "_lock_key_params", "lock_order", "key_ranges", "_buckets"),
    ),
}

NOTES = """
Command: `python -m bench.mutation [--module NAME ...] [--resume] [--sql-only | --no-sql] [--table-only]` (mutmut
3.8.1: one pytest start, a fork per mutant). Each module runs
against the tests that cover it (`MODULES` in bench/mutation.py); bench/sql_mutants.py swaps each SQL guard for a
broken twin, which the consumers' tests must fail. A timeout counts as killed. `--table-only` rewrites this
section from `bench/out/mutation/`.
"""

KILLED = {"killed", "timeout", "caught by type check"}  # a timeout is a mutant the tests noticed (it hung)
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout"}
STATUS |= {37: "caught by type check", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout"}


def equivalents() -> dict[str, str]:
    """Mutant name -> the one-line reason it is equivalent (bench/mutation_equivalents.toml)."""
    if not EQUIVALENTS.exists():
        return {}
    data = tomllib.loads(EQUIVALENTS.read_text())
    return {name: reason for section in data.values() for name, reason in section.items()}


def _mutmut_section(module: Module) -> str:
    tests = ", ".join(json.dumps(t) for t in module.tests)
    return f"""

[tool.mutmut]
# written by bench/mutation.py for this work folder only (see its docstring)
source_paths = ["app"]
only_mutate = [{json.dumps(module.path)}]
also_copy = ["bench", "jobs", "migrations", "templates", "static", "alembic.ini"]
pytest_add_cli_args_test_selection = [{tests}]
process_isolation = "forkserver"
use_git_change_detection = false
pytest_add_cli_args = ["-p", "bench.mutation_plugin"]
"""


def snapshot(name: str, module: Module) -> Path:
    """A fresh copy of the tree for one module's run, with its own mutmut configuration."""
    work = OUT / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", "out")  # bench/out: the results
    for entry in TREE:
        source = ROOT / entry
        if source.is_dir():
            shutil.copytree(source, work / entry, ignore=ignore)
        else:
            shutil.copy2(source, work / entry)
    pyproject = work / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + _mutmut_section(module))
    return work


def _statuses(work: Path, module: Module) -> dict[str, str]:
    meta = work / "mutants" / (module.path + ".meta")
    if not meta.exists():
        return {}
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    return {
        key: STATUS.get(code, "suspicious") if code is not None else "not checked"
        for key, code in codes.items()
        if module.counts(key)
    }


def _diff(work: Path, mutant: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "mutmut", "show", mutant], cwd=work, capture_output=True, text=True, check=False
    )
    return "\n".join(line for line in shown.stdout.splitlines() if line.startswith(("+", "-", "#", "@@")))


def _mutmut(work: Path, module: Module, env: dict[str, str], *names: str) -> None:
    with (OUT / f"{work.name}.log").open("a") as log:
        subprocess.run(
            [*NICE, sys.executable, "-m", "mutmut", "run", "--max-children", "1", *names],
            cwd=work,
            env={
                **os.environ,
                **env,
                "PYTHONDONTWRITEBYTECODE": "1",
                "TARAKAN_MUTATION_MIGRATED": "1",
                "TARAKAN_MUTATION_PURE": ",".join(module.pure),
            },
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )


def run_module(name: str, env: dict[str, str], *, resume: bool) -> dict[str, Any]:
    """One module's mutmut run. `resume`: keep the work folder (its copy of the module and every result), take
    the tests as they are now, rerun the mutants that lived (against the new tests) and run the unchecked ones."""
    module = MODULES[name]
    work = OUT / name
    started = time.monotonic()
    earlier = 0.0  # seconds of the runs this one resumes
    if resume and (work / "mutants").exists():
        if (OUT / f"{name}.json").exists():
            earlier = float(json.loads((OUT / f"{name}.json").read_text())["seconds"])
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(ROOT / "tests", work / "tests", dirs_exist_ok=True, ignore=ignore)
        (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)  # which test calls what: measured again
        known = equivalents()
        # the ones that lived first (against the new tests); the plain run below then takes the unchecked ones
        live = [m for m, s in _statuses(work, module).items() if s not in KILLED | {"not checked"} and m not in known]
        print(f"== {name}: resumed in {work.relative_to(ROOT)}, {len(live)} mutants to rerun", flush=True)
        if live:
            _mutmut(work, module, env, *live)
        if module.functions:  # named, mutmut reruns a mutant that has a result: name only the unchecked ones
            unchecked = [m for m, s in _statuses(work, module).items() if s == "not checked"]
            if unchecked:
                _mutmut(work, module, env, *unchecked)
        else:
            _mutmut(work, module, env)
    else:
        work = snapshot(name, module)
        print(f"== {name}: mutmut run in {work.relative_to(ROOT)}", flush=True)
        _mutmut(work, module, env, *module.patterns())
    statuses = _statuses(work, module)
    known = equivalents()
    live = [m for m, s in statuses.items() if s not in KILLED and s != "not checked" and m not in known]
    survivors = {m: _diff(work, m) for m in live}
    result = {
        "module": module.path,
        "tests": list(module.tests),
        "seconds": round(earlier + time.monotonic() - started, 1),
        "statuses": statuses,
        "survivors": survivors,
    }
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    return result


def run_sql(env: dict[str, str], *, resume: bool) -> dict[str, Any]:
    """Each SQL-text mutant in its own pytest process over its covering tests; a mutant lives if they pass."""
    from bench.sql_mutants import MUTANTS

    path = OUT / "sql.json"
    done: dict[str, Any] = json.loads(path.read_text()) if resume and path.exists() else {}
    for mutant in [None, *MUTANTS]:
        key = mutant.name if mutant is not None else "(none)"
        tests = list(mutant.tests) if mutant is not None else sorted({t for m in MUTANTS for t in m.tests})
        if key in done and done[key]["status"] in ("killed", "clean") and done[key]["tests"] == tests:
            continue  # resumed: a mutant that lived, or whose tests changed, runs again
        started = time.monotonic()
        proc = subprocess.run(
            [
                *NICE,
                sys.executable,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "bench.sql_mutants",
                *tests,
            ],
            cwd=ROOT,
            env={**os.environ, **env, "TARAKAN_SQL_MUTANT": key if mutant is not None else ""},
            capture_output=True,
            text=True,
            check=False,
        )
        if mutant is None:
            status = "clean" if proc.returncode == 0 else "error"
        else:
            status = {0: "survived", 1: "killed"}.get(proc.returncode, "error")
        tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
        done[key] = {"status": status, "seconds": round(time.monotonic() - started, 1), "tests": tests, "tail": tail}
        print(f"   sql {key}: {status} ({done[key]['seconds']} s)", flush=True)
        path.write_text(json.dumps(done, indent=2, sort_keys=True))
        if mutant is None and status != "clean":
            raise SystemExit(f"the SQL mutants' tests fail without a mutant: {proc.stdout[-2000:]}")
    return done


def _measured() -> set[str]:
    """Every mutant name with a result on disk (module mutants and SQL-text mutants)."""
    names: set[str] = set()
    for name in MODULES:
        path = OUT / f"{name}.json"
        if path.exists():
            names |= set(json.loads(path.read_text())["statuses"])
    if (OUT / "sql.json").exists():
        names |= set(json.loads((OUT / "sql.json").read_text()))
    return names


def table() -> str:
    """The "Mutation score" section from every result on disk (modules not run yet say so)."""
    known = equivalents()
    rows = []
    for name, module in MODULES.items():
        statuses = _statuses(OUT / name, module)  # mutmut's own state: current even for a run stopped midway
        if not statuses:
            rows.append(f"| `{module.path}` | not run yet | | | |")
            continue
        total = len(statuses)
        killed = sum(s in KILLED for s in statuses.values())
        equivalent = sum(1 for m, s in statuses.items() if s not in KILLED and m in known)
        unchecked = sum(s == "not checked" for s in statuses.values())
        live = total - killed - equivalent - unchecked
        scored = total - equivalent - unchecked
        score = f"{100 * killed / scored:.1f} %" if scored else "-"
        note = f" ({unchecked} not checked yet)" if unchecked else ""
        rows.append(f"| `{module.path}` | {killed} / {total}{note} | {equivalent} | {live} | {score} |")
    lines = [
        "| module | killed / total | equivalent | live | score (killed / non-equivalent) |",
        "|---|---|---|---|---|",
        *rows,
    ]
    sql_path = OUT / "sql.json"
    if sql_path.exists():
        sql = {k: v for k, v in json.loads(sql_path.read_text()).items() if k != "(none)"}
        killed_sql = sum(v["status"] == "killed" for v in sql.values())
        equivalent_sql = sum(v["status"] != "killed" and k in known for k, v in sql.items())
        lines += [
            "",
            f"SQL-text mutants (bench/sql_mutants.py): {killed_sql} / {len(sql)} killed, {equivalent_sql} equivalent.",
            "",
        ]
        lines += ["| SQL mutant not killed | status | covering tests | s |", "|---|---|---|---|"]
        lines += [
            f"| {k} | {v['status'] + (' (equivalent)' if k in known else '')} "
            f"| {', '.join(f'`{t}`' for t in v['tests'])} | {v['seconds']:.0f} |"
            for k, v in sorted(sql.items())
            if v["status"] != "killed"
        ]
    shown = [m for m in known if m in _measured()]
    if shown:  # each reason is in the file: the section counts them
        lines += ["", f"Equivalent mutants: {len(shown)}, each with its reason in `bench/mutation_equivalents.toml`."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--module", action="append", choices=sorted(MODULES), help="only this module (repeatable)")
    parser.add_argument("--resume", action="store_true", help="keep earlier results and run only what is missing")
    parser.add_argument("--sql-only", action="store_true", help="only the SQL-text mutants")
    parser.add_argument("--no-sql", action="store_true", help="no SQL-text mutants")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--table-only", action="store_true", help="run nothing: the table from the results on disk")
    args = parser.parse_args(argv)
    # started in the background, a shell leaves SIGINT ignored: restore it, and let SIGTERM stop the services too
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    OUT.mkdir(parents=True, exist_ok=True)
    names = [] if args.sql_only else (args.module or list(MODULES))
    if not args.table_only:
        with throwaway_services("tarakan-mutation-") as services:
            env = services.use()
            for name in names:
                result = run_module(name, env, resume=args.resume)
                statuses = result["statuses"]
                killed = sum(s in KILLED for s in statuses.values())
                print(f"   {name}: {killed} / {len(statuses)} killed, {len(result['survivors'])} to read", flush=True)
            if not args.no_sql:
                run_sql(env, resume=args.resume)
    text = table()
    print(text)
    if not args.no_write:
        write_section(_section(text), "## Mutation score")


def _section(text: str) -> str:
    return "## Mutation score\n\n" + NOTES.strip() + "\n\n" + text + "\n"


if __name__ == "__main__":
    main()
