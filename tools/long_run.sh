#!/usr/bin/env bash
# Runs a long vitlab training in the background from a copy of the binary and of
# torch's libraries outside the checkout, so that rebuilds, a new checkout or the
# end of a session do not disturb it; `resume` continues it with vitlab's own
# --resume (exact: same weights, optimiser, EMA, data order as an uninterrupted run).
#
#   tools/long_run.sh install            copy target/release/vitlab (a `tch` build) and torch's libraries to $HOME_DIR
#   tools/long_run.sh start CONFIG NAME [--set k=v ...]   start runs/NAME under $HOME_DIR
#   tools/long_run.sh resume NAME        continue it (after a kill, a reboot, a new session)
#   tools/long_run.sh status NAME        the last epochs of metrics.csv and the log's last line
#   tools/long_run.sh pause|cont NAME    SIGSTOP / SIGCONT (while benchmarking)
#   tools/long_run.sh save NAME          copy the run (checkpoints, CSVs, config) into
#                                        saved-runs/NAME/ of this checkout, to commit:
#                                        a session's machine does not outlive it. Save and
#                                        commit ONCE per session, at its end: each commit of
#                                        the two checkpoints adds ~196 MiB of diff as
#                                        `git diff --binary` counts it (old and new bytes of both
#                                        43 MB files), and a session whose commits add up past
#                                        256 MiB lands nothing: sessions 10 and 14 lost every
#                                        epoch they ran that way. Keep the session's other
#                                        commits small (no other binaries, no large tables).
#                                        A session that finds an earlier, unlanded session's
#                                        save commit on main (recovered from a refused
#                                        submission) must not add a second one: the limit
#                                        counts every commit not yet landed, so replace that
#                                        commit's checkpoints instead (rebase it out, or drop
#                                        it and save again). The submission that carried
#                                        sessions 19-21 went over the limit and was refused
#                                        whole: epochs 39-65 and all of their code were lost
#   tools/long_run.sh restore NAME       the reverse, on a new machine (also unpacks CIFAR-10 from
#                                        ../shared/data where the run's config expects it), then `resume`
#
# Build the binary first:
#   LIBTORCH_USE_PYTORCH=1 PATH=$PWD/.venv/bin:$PATH cargo build --release -p vitlab-cli --features tch
set -euo pipefail
cd "$(dirname "$0")/.."
HOME_DIR=${VITLAB_LONG_RUNS:-/root/vitlab-runs}
cmd=${1:?usage: tools/long_run.sh install|start|resume|status|pause|cont|save|restore ...}
shift
bin="$HOME_DIR/bin/vitlab"
# torch/lib with the nvidia/ folder beside it: pip's torch links libtorch_cuda, which finds
# the CUDA libraries through an rpath relative to itself.
env_run() { LD_LIBRARY_PATH="$HOME_DIR/site-packages/torch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
pidfile() { echo "$HOME_DIR/runs/$1.pid"; }
running() { [ -f "$(pidfile "$1")" ] && kill -0 "$(cat "$(pidfile "$1")")" 2>/dev/null; }

case $cmd in
install)
    mkdir -p "$HOME_DIR/bin" "$HOME_DIR/runs"
    site=$(.venv/bin/python -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    rm -rf "$HOME_DIR/site-packages.new" && mkdir -p "$HOME_DIR/site-packages.new/torch"
    cp -a "$site/torch/lib" "$HOME_DIR/site-packages.new/torch/"
    if [ -d "$site/nvidia" ]; then cp -a "$site/nvidia" "$HOME_DIR/site-packages.new/"; fi
    rm -rf "$HOME_DIR/site-packages" && mv "$HOME_DIR/site-packages.new" "$HOME_DIR/site-packages"
    cp target/release/vitlab "$bin.new" && mv "$bin.new" "$bin"
    git rev-parse HEAD > "$HOME_DIR/bin/COMMIT"
    env_run "$bin" --version
    echo "installed $(cat "$HOME_DIR/bin/COMMIT") in $HOME_DIR"
    ;;
start|resume)
    if [ "$cmd" = start ]; then
        config=${1:?start CONFIG NAME}; name=${2:?start CONFIG NAME}; shift 2
        args=(train --config "$config" --out "$HOME_DIR/runs/$name" "$@")
    else
        name=${1:?resume NAME}; shift
        args=(train --resume "$HOME_DIR/runs/$name" "$@")
    fi
    if running "$name"; then echo "$name is already running (pid $(cat "$(pidfile "$name")"))"; exit 1; fi
    mkdir -p "$HOME_DIR/runs"
    echo "== $(date -u +%FT%TZ) $cmd with $(cat "$HOME_DIR/bin/COMMIT"): ${args[*]}" >> "$HOME_DIR/runs/$name.log"
    # Started directly (not through a shell function), so that $! is vitlab's own pid.
    LD_LIBRARY_PATH="$HOME_DIR/site-packages/torch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        nohup "$bin" "${args[@]}" >> "$HOME_DIR/runs/$name.log" 2>&1 &
    echo $! > "$(pidfile "$name")"
    echo "$name: pid $!, log $HOME_DIR/runs/$name.log"
    ;;
status)
    name=${1:?status NAME}
    if running "$name"; then echo "running (pid $(cat "$(pidfile "$name")"))"; else echo "not running"; fi
    tail -n 5 "$HOME_DIR/runs/$name/metrics.csv" 2>/dev/null || true
    tail -c 400 "$HOME_DIR/runs/$name.log" | tr '\r' '\n' | tail -n 2
    ;;
save)
    name=${1:?save NAME}
    src="$HOME_DIR/runs/$name"
    [ -d "$src/checkpoints" ] || { echo "$src has no checkpoints" >&2; exit 1; }
    # Paused while copying, so the CSVs and checkpoints are of one moment (checkpoints
    # are renamed into place whole, so a copy never holds half of one either way);
    # a run already paused (`pause`, for a benchmark) stays paused. The pause counts
    # in that epoch's `seconds` in metrics.csv.
    if running "$name"; then
        pid=$(cat "$(pidfile "$name")")
        if [[ $(ps -o stat= -p "$pid") != T* ]]; then kill -STOP "$pid"; trap 'kill -CONT "$pid"' EXIT; fi
    fi
    rm -rf "saved-runs/$name.new" && mkdir -p "saved-runs/$name.new"
    cp -a "$src/." "saved-runs/$name.new/"
    # A checkpoint being written when the run was paused: its temporary file is not the run's.
    find "saved-runs/$name.new" -name '.*.tmp-*' -delete
    rm -rf "saved-runs/$name" && mv "saved-runs/$name.new" "saved-runs/$name"
    echo "saved $src -> saved-runs/$name ($(du -sh "saved-runs/$name" | cut -f1)); commit it"
    tail -n 2 "saved-runs/$name/metrics.csv"
    ;;
restore)
    name=${1:?restore NAME}
    [ -d "saved-runs/$name/checkpoints" ] || { echo "saved-runs/$name has no checkpoints" >&2; exit 1; }
    if running "$name"; then echo "$name is running; stop it first" >&2; exit 1; fi
    data=$(sed -n 's/^path = "\(.*\)"$/\1/p' "saved-runs/$name/config.toml" | head -n 1)
    if [ -n "$data" ] && [ ! -d "$data" ] && [ "$(basename "$data")" = cifar10 ]; then
        mkdir -p "$(dirname "$data")" && tar xzf ../shared/data/cifar10-jpeg.tar.gz -C "$(dirname "$data")"
        echo "unpacked CIFAR-10 into $data"
    fi
    mkdir -p "$HOME_DIR/runs" && rm -rf "$HOME_DIR/runs/$name"
    cp -a "saved-runs/$name" "$HOME_DIR/runs/$name"
    echo "restored saved-runs/$name -> $HOME_DIR/runs/$name; continue it with: tools/long_run.sh resume $name"
    ;;
pause) kill -STOP "$(cat "$(pidfile "${1:?pause NAME}")")" ;;
cont) kill -CONT "$(cat "$(pidfile "${1:?cont NAME}")")" ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac
