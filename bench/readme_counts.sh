#!/usr/bin/env bash
# The README's test count, remade as a newcomer would see it: a clean clone of one commit (so no
# untracked file of this checkout leaks in), a fresh virtual environment in a temporary folder,
# then the README's second command, verbatim. Prints the commit, what was installed, every skip
# with its reason (pytest's -ra summary, on by pyproject.toml's addopts) and pytest's last line.
#
#     bench/readme_counts.sh [--torch] [--no-browser] [--log FILE] [COMMIT]
#
# COMMIT defaults to HEAD. Without --torch the environment has only what `.[test]` pulls (numpy,
# simpy, plotly, pytest, hypothesis): the zero_real tests skip, as on a machine without torch.
# --torch installs torch==2.13.0 first, as .ci/run does (the CPU build these machines carry; a
# looser pin would pull CUDA wheels). Ray is never installed (the extra [ray] is not asked for).
# Chromium is whatever this machine has, unless --no-browser puts a failing `chromium` (and
# each other name tests/zerosim/test_plots_browser.py tries) first on PATH, as on a machine with
# none. --log FILE keeps the whole output. Several minutes; run it under `nice` on a shared box.
# Exits with pytest's status.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
torch=no browser=yes log="" commit=HEAD
while [ $# -gt 0 ]; do
    case "$1" in
        --torch) torch=yes ;;
        --no-browser) browser=no ;;
        --log) log="$2"; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        -*) echo "readme_counts.sh: unknown option $1" >&2; exit 2 ;;
        *) commit="$1" ;;
    esac
    shift
done
sha="$(git -C "$repo" rev-parse --verify --quiet "$commit^{commit}")" || {
    echo "readme_counts.sh: $commit is not a commit of $repo" >&2; exit 2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone --quiet --no-checkout "$repo" "$work/clone"
git -C "$work/clone" checkout --quiet "$sha"
python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
if [ "$browser" = no ]; then
    mkdir "$work/no-browser"
    for name in chromium chromium-browser google-chrome google-chrome-stable chrome; do
        printf '#!/bin/sh\nexit 1\n' >"$work/no-browser/$name"
        chmod +x "$work/no-browser/$name"
    done
    PATH="$work/no-browser:$PATH"
fi
if [ "$torch" = yes ]; then
    pip install --quiet torch==2.13.0
fi

readme_test_command() {
    # The README's second command, verbatim (tests/test_readme.py checks it).
    pip install -e ".[test]" && python -m pytest -q
}
cd "$work/clone"
set +e
readme_test_command >"$work/out" 2>&1
status=$?
set -e
[ -n "$log" ] && cp "$work/out" "$log"

echo "commit $sha; Python $(python -c 'import platform; print(platform.python_version())')"
echo "torch: $(python -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)" \
     "| kaleido: $(python -c 'import kaleido; print(kaleido.__version__)' 2>/dev/null || echo none)" \
     "| ray: $(python -c 'import ray; print(ray.__version__)' 2>/dev/null || echo none)" \
     "| chromium: $( (chromium --version || chromium-browser --version) 2>/dev/null || echo none)"
grep '^SKIPPED' "$work/out" || true
tail -n 1 "$work/out"
exit "$status"
