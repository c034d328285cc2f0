#!/usr/bin/env bash
# The two studies of issue 5 (docs/SWEEPS.md) on the CIFAR-10 copy, ViT-Tiny, 32 px, patch 4,
# on the LibTorch backend. Restartable: run the same command again to continue after a kill;
# finished runs are skipped, checkpointed ones resume.
#
#   tools/studies.sh stability   # 5 block variants, no stabiliser, seed 0, then seeds 1-2 of
#                                # vit22b-nonorm, the stabilisers (clip, z-loss) on it (seed 0) and
#                                # seeds 1-2 of vit22b; 1,600 steps each (paper recipe: AdamW 1e-3,
#                                # wd 1e-4, batch 32, constant LR)
#   tools/studies.sh stabilizers # the same, then the stabilisers on seeds 1-2 as well
#   tools/studies.sh ablation    # vit, vit22b, vit22b-ln, vit22b-code x 3 seeds, modern recipe,
#                                # budget: 3 epochs over a 10,000-image class-stratified subset
#   tools/studies.sh generators  # issue 13: vitunet vs vit22bunet generators (CycleGAN) x 3 seeds on
#                                # automobile <-> truck from the CIFAR-10 copy (configs/cyclegan-cifar10.toml),
#                                # budget: 600 training images per domain, 4 epochs (2 constant, 2 decaying), batch 8,
#                                # FID_A / FID_B (torchmetrics, 64 features) on all 1,000 test images per domain
#   tools/studies.sh reports     # both reports into docs/results/
#
# Budgets are what this 2-core machine affords (~69 img/s for ViT-Tiny/4 on tch): a stability run
# is ~13 min, an ablation run ~8 min. VITLAB: the binary (default: a copy of
# target-tch/debug/vitlab in runs/bin, so rebuilding does not change a running study).
# Needs the tch build and torch's lib folder (README, "LibTorch backend").
set -euo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-$PWD/.venv/lib/python3.11/site-packages/torch/lib}"
if [ -z "${VITLAB:-}" ] && [ "${1:-}" = reports ]; then
    # reports need no backend: any build will do, and the study's copy stays as it is
    VITLAB=$(ls -t target/debug/vitlab target-tch/debug/vitlab 2>/dev/null | head -1)
fi
if [ -z "${VITLAB:-}" ]; then
    mkdir -p runs/bin
    if [ target-tch/debug/vitlab -nt runs/bin/vitlab-tch ]; then
        # copy + rename: a study still running keeps its own (unlinked) binary
        cp target-tch/debug/vitlab runs/bin/.vitlab-tch.tmp && mv -f runs/bin/.vitlab-tch.tmp runs/bin/vitlab-tch
    fi
    VITLAB=runs/bin/vitlab-tch
fi

case "${1:-}" in
stability|stabilizers)
    phase=$1
    shift
    # In order of what each answers; all write into runs/stability (one sweep, merged plans).
    stab() {
        nice -n 10 "$VITLAB" stability --config configs/paper-cifar10.toml \
            --set model.image_size=32 --set model.patch_size=4 --set backend=tch --set data.val_size=1000 \
            --steps 1600 --lr 1e-3 --out runs/stability --quiet "$@"
    }
    # 1. every block variant, no stabiliser, seed 0
    stab --blocks vit22b-nonorm,vit22b,vit,vit22b-ln,vit22b-code --stabilizers none --seeds 1 "$@" || echo "studies.sh: a stability step failed; continuing" >&2
    # 2. does the first released block explode on every seed?
    stab --blocks vit22b-nonorm --stabilizers none --seeds 3 "$@" || echo "studies.sh: a stability step failed; continuing" >&2
    # 3. which stabiliser prevents it (seed 0), 4. is the published block stable on every seed
    stab --blocks vit22b-nonorm --stabilizers none,clip,z-loss --seeds 1 "$@" || echo "studies.sh: a stability step failed; continuing" >&2
    stab --blocks vit22b --stabilizers none --seeds 3 "$@" || echo "studies.sh: a stability step failed; continuing" >&2
    if [ "$phase" = stabilizers ]; then
        # 5. the stabilisers on every seed
        stab --blocks vit22b-nonorm --stabilizers none,clip,z-loss --seeds 3 "$@" || echo "studies.sh: a stability step failed; continuing" >&2
    fi
    ;;
ablation)
    shift
    exec nice -n 10 "$VITLAB" sweep --config configs/modern-cifar10.toml \
        --grid 'model.block=vit,vit22b,vit22b-ln,vit22b-code' --seeds 3 \
        --set backend=tch --set epochs=3 --set data.limit=10000 --set data.val_size=2000 \
        --set schedule.warmup_epochs=0.3 --set checkpoint.every_steps=100 \
        --out runs/ablation --report --quiet "$@"
    ;;
generators)
    shift
    [ -d data/auto2truck ] || "$VITLAB" data unpaired data/cifar10 --a automobile --b truck --out data/auto2truck
    # Seeds first, so that an interrupted study has both variants at the same seeds.
    for seed in 0 1 2; do
        for block in vit vit22b; do
            run=runs/generators/model.block=$block,seed=$seed
            if [ -f "$run/results.json" ]; then
                continue
            elif [ -f "$run/checkpoints/latest.safetensors" ]; then
                nice -n 10 "$VITLAB" train --resume "$run" --quiet "$@" || echo "studies.sh: $run failed; continuing" >&2
            else
                nice -n 10 "$VITLAB" train --config configs/cyclegan-cifar10.toml --out "$run" \
                    --set model.block=$block --set seed=$seed --set backend=tch --set data.limit=600 \
                    --set epochs=4 --set schedule.decay_epochs=2 --set checkpoint.every_steps=25 --quiet "$@" \
                    || echo "studies.sh: $run failed; continuing" >&2
            fi
        done
    done
    ;;
reports)
    if [ -d runs/ablation ]; then
        "$VITLAB" report runs/ablation --out docs/results/ablation-tiny4-cifar10 --baseline 'model.block=vit' \
            --title 'ViT-Tiny/4 on CIFAR-10: vit vs vit22b vs vit22b-ln vs vit22b-code, 3 seeds'
    else
        echo "runs/ablation: not run yet (tools/studies.sh ablation)" >&2
    fi
    "$VITLAB" report runs/stability --out docs/results/stability-tiny4-cifar10 --baseline 'model.block=vit' \
        --title 'Training stability, ViT-Tiny/4 on CIFAR-10, paper recipe (AdamW 1e-3, batch 32)'
    ;;
*)
    sed -n 2,21p "$0"
    exit 2
    ;;
esac
