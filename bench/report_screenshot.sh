#!/usr/bin/env bash
# The docs' screenshot of `zerosim report` (docs/report.md): the Llama-2-7B scenario on 64
# A100s with a 2T-token budget at 2.5 a GPU-hour, rendered by a headless Chromium at 1280 px
# wide. SOURCE_DATE_EPOCH fixes the page's date, so the page is the same on every run (the PNG
# may differ by the fonts a machine has). Needs chromium on PATH (Debian: apt-get install
# chromium). About 10 s.
set -euo pipefail
cd "$(dirname "$0")/.."
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
    echo "report_screenshot.sh: no chromium or chrome on PATH" >&2
    exit 1
fi
if [ -e report.html ]; then
    echo "report_screenshot.sh: ./report.html exists; it would be overwritten: move it first" >&2
    exit 1
fi
out=$(mktemp -d)
trap 'rm -rf "$out" report.html' EXIT
# written here as report.html (ignored by git), so the page shows the command as a reader types it
SOURCE_DATE_EPOCH=1764288000 zerosim report scenarios/llama2_7b_64gpu.toml --tokens 2T \
    --price-per-gpu-hour 2.5 -o report.html
mv report.html "$out/report.html"
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --user-data-dir="$out/profile" --window-size=1280,4000 --virtual-time-budget=10000 \
    --screenshot="$out/report.png" "file://$out/report.html" >/dev/null 2>&1
cp "$out/report.png" docs/figures/report.png
echo "wrote docs/figures/report.png ($(wc -c < docs/figures/report.png) bytes)"
