#!/usr/bin/env bash
# The README's "simulated against measured" figure and validate sample, remade on this box:
# stages 0-3 of the tiny GPT on 2 gloo processes at micro-batch 3 (held out from the fit of
# profiles/cpu_gloo_tiny.json), three runs of 30 timed steps each, validated together against
# the committed profile. Writes docs/figures/validate_stage{0..3}.json and calibration.png, and
# prints stage 3's report (the README's sample). About 3 minutes on 2 cores; run it on a quiet
# box, since every other process on it is noise in the timings. The measurements are written in
# the repository's root under relative names (the reports record the paths as given) and removed.
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=scenarios/tiny_gpt_4rank_cpu.toml
profile=profiles/cpu_gloo_tiny.json
trap 'rm -f s[0-3]_m[1-3].json m[1-3].json' EXIT
for stage in 0 1 2 3; do
    for run in 1 2 3; do
        zero-real run "$scenario" --stage "$stage" --nproc 2 --set training.micro_batch=3 \
            --steps 2 --timed-steps 30 --out "s${stage}_m$run.json" >/dev/null 2>&1
    done
    zerosim validate "s${stage}_m1.json" "s${stage}_m2.json" "s${stage}_m3.json" \
        --profile "$profile" --json > "docs/figures/validate_stage$stage.json" \
        || [ $? -eq 1 ]  # 1: outside the tolerance, still a report
done
zerosim plot docs/figures/validate_stage*.json --kind calibration -o docs/figures/calibration.png
for run in 1 2 3; do mv "s3_m$run.json" "m$run.json"; done
zerosim validate m1.json m2.json m3.json --profile "$profile" || true
