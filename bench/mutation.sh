#!/usr/bin/env bash
# Mutation testing of the governance core against its unit tests.
#
#   bench/mutation.sh                      # every module [tool.mutmut] only_mutate matches
#   bench/mutation.sh outcomes gates       # only these modules (by name, or a path under
#                                          # algenta_graph/ such as governance/gates)
#   MUTATION_JOBS=2 bench/mutation.sh      # parallel workers (default 1: the machine is shared)
#
# The configuration is `[tool.mutmut]` in pyproject.toml, both sides as directories (no list of
# files to keep up to date): the modules of the governance core's directories (only_mutate:
# algenta_graph/governance/*, algenta_graph/nodes/*, state.py, records.py, operator_records.py,
# connection/outcomes.py) against
# the tests of tests/unit/governance. mutmut copies the sources into `mutants/`, so the run
# happens in a scratch copy of this tree (MUTATION_DIR, default a new temporary directory) and
# never touches the working tree. It prints mutmut's results (every mutant that was not killed)
# and the score, and leaves the scratch copy for `cd $MUTATION_DIR && mutmut show <mutant>`.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${MUTATION_DIR:-$(mktemp -d /tmp/algenta-mutation.XXXXXX)}"
jobs="${MUTATION_JOBS:-1}"

mkdir -p "$work"
rm -rf "$work/mutants"
tar -C "$here" -cf - \
    --exclude=./.git --exclude=./mutants --exclude='.*_cache' --exclude=.hypothesis \
    --exclude=__pycache__ --exclude=./native/target --exclude=.langgraph_api \
    --exclude='*.sqlite' --exclude=./notebooks . | tar -C "$work" -xf -
cd "$work"

if [ "$#" -gt 0 ]; then
    # narrow only_mutate to the modules named on the command line
    python - "$@" <<'PY'
import fnmatch
import re
import sys
from pathlib import Path

path = Path("pyproject.toml")
text = path.read_text()
block = re.search(r"only_mutate = \[([^\]]*)\]", text)
assert block, "no only_mutate in [tool.mutmut]"
patterns = re.findall(r'"([^"]+)"', block.group(1))
core = sorted(
    str(p)
    for p in Path("algenta_graph").rglob("*.py")
    if any(fnmatch.fnmatch(str(p), pattern) for pattern in patterns)
)
wanted = []
for name in sys.argv[1:]:
    stem = name.removeprefix("algenta_graph/").removesuffix(".py")
    found = [p for p in core if p == f"algenta_graph/{stem}.py" or p.endswith(f"/{stem}.py")]
    if len(found) != 1:
        what = "several modules" if found else "no module"
        sys.exit(f"{name}: {what} of the governance core ({', '.join(found or core)})")
    wanted += found
listed = ", ".join(f'"{p}"' for p in wanted)
text = text[: block.start()] + f"only_mutate = [{listed}]" + text[block.end() :]
path.write_text(text)
print("only_mutate:", listed)
PY
fi

# the scratch copy's own sources must win over any installed algenta_graph
export PYTHONPATH="$work"
export PYTHONDONTWRITEBYTECODE=1
echo "mutation run in $work ($(date -u +%FT%TZ)), jobs=$jobs"
# mutmut redraws a progress line with carriage returns: keep its log, show its last state
mutmut run --max-children "$jobs" > mutants-run.log 2>&1 || true
tr '\r' '\n' < mutants-run.log | grep -v '^\s*$' | grep -Ev '^.(Generating|Running|[ ]+[0-9]+/)' || true
tr '\r' '\n' < mutants-run.log | grep -E '[0-9]+/[0-9]+ ' | tail -1 || true
echo
echo "== not killed (mutmut results) =="
mutmut results || true
mutmut export-cicd-stats >/dev/null 2>&1 || true
if [ -f mutants/mutmut-cicd-stats.json ]; then
    python - <<'PY'
import json

stats = json.load(open("mutants/mutmut-cicd-stats.json"))
killed = stats.get("killed", 0) + stats.get("timeout", 0)
tested = killed + stats.get("survived", 0) + stats.get("suspicious", 0)
print("== score ==")
print(json.dumps(stats, sort_keys=True))
if tested:
    print(f"killed {killed} of {tested} tested mutants: {100 * killed / tested:.1f}%")
PY
fi
echo "scratch copy: $work"
