#!/usr/bin/env bash
# The GPU proof of the pascal launcher: run on a machine with an NVIDIA GPU,
# Python 3.12 and torch (the device machine; README.md beside this file).
#
#   tests/gpu/run_ppo.sh smoke    # original recipe through --cfg job, then 12 PPO steps
#                                 # (validation and checkpoint at step 10) on a tiny model
#   tests/gpu/run_ppo.sh memory   # Qwen2.5-0.5B-Instruct's architecture, pascal batch and
#                                 # offload settings, every process capped at 24 GiB
#   tests/gpu/run_ppo.sh all      # both
#   tests/gpu/run_ppo.sh recipe   # only the original recipe's check (--cfg job)
#   MEMORY_ARCH=Qwen2.5-1.5B-Instruct MEMORY_VARS="train_preset=qwen15b-grpo-lora" tests/gpu/run_ppo.sh memory
#                                 # another architecture (model_architectures.yml), rendered with a preset
#   tests/gpu/run_ppo.sh two-gpu  # two GPUs: smoke and memory with the launcher rendered for two
#                                 # P40s (n_gpus_per_node=2 from a recorded nvidia-smi), NCCL_DEBUG=INFO,
#                                 # then 3 steps with NCCL_P2P_DISABLE=1 as on a board without P2P
#   tests/gpu/run_ppo.sh two-gpu-dry  # one GPU: that launcher's overrides and composed config only
#
# Everything comes from the project: the wheelhouse (tests/gpu/wheelhouse.py,
# carried as .whl/) is installed into $P40_WORK/site; the verl 0.4.1 sdist is
# unpacked, patched by library/verl_patch.py with the pascal profile's
# patch_fixes (tests/gpu/patch_verl.py) and pip-installed --no-deps -e, as the
# verl role does; the data is tests/fixtures/gsm8k_fixture.py converted by
# roles/data/files/gsm8k_to_verl.py; the launcher is the train role's
# templates/train.sh.j2 and train.env.j2 rendered by tools/render.py for the
# pascal profile, with only paths, the memory hook's variables and the
# stand-ins below changed.
#
# Stand-ins (the host layers that this machine does not have): train.env
# sources the cuda layer's script and activates a conda env. Here the CUDA
# script is an empty file (torch brings its own CUDA runtime) and conda.sh
# defines a `conda` whose `activate` puts the wheelhouse on PYTHONPATH, the
# way activating the real env puts its site-packages on sys.path. train.sh
# runs with PYTHONPATH unset, so the environment it trains in comes from
# train.env alone.
#
# Results go to $OUT (the device tool's folder; else $P40_WORK/out).
set -euo pipefail

mode=${1:-smoke}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WHL=${P40_WHEELHOUSE:-$REPO/.whl}
WORK=${P40_WORK:-/tmp/p40-proof}
OUT=${OUT:-$WORK/out}
SITE=$WORK/site
VERL=$WORK/verl-0.4.1
HOOKS=$REPO/tests/gpu/hooks
# Rows of the fixture's test split, the validation set (fewer make a long model's validation fit a call).
TEST_ROWS=${TEST_ROWS:-32}
DATA=$WORK/data/gsm8k-test$TEST_ROWS
SMOKE_STEPS=${SMOKE_STEPS:-12}
MEMORY_STEPS=${MEMORY_STEPS:-3}
MEMORY_EXTRA=${MEMORY_EXTRA:-}
# The memory run's architecture (an entry of roles/stack/defaults/main/model_architectures.yml;
# the model directory is named after it, as a preset's model check wants) and more
# tools/render.py --var arguments (space-separated k=v, e.g. train_preset=qwen15b-grpo-lora).
MEMORY_ARCH=${MEMORY_ARCH:-Qwen2.5-0.5B-Instruct}
MEMORY_VARS=${MEMORY_VARS:-}
# Prefix of the memory run's result files in $OUT (memory-kl for a second run with a KL term).
MEMORY_NAME=${MEMORY_NAME:-memory}
# 1: the run report also draws its PNG ($OUT/<name>-report.png); $OUT brings back 8 files at most.
MEMORY_PLOT=${MEMORY_PLOT:-1}
# Wall-clock limits of the two training runs (the device runs a command for 10 minutes at most).
SMOKE_TIMEOUT=${SMOKE_TIMEOUT:-420}
MEMORY_TIMEOUT=${MEMORY_TIMEOUT:-480}
CAP_GIB=${P40_GPU_MEM_GB:-24}
# The card the memory run's launcher is sized for, GiB (default: the cap). A cap above it measures
# what a phase the memory model does not size would take uncapped (the checkpoint's save).
MEMORY_CARD_GIB=${MEMORY_CARD_GIB:-$CAP_GIB}
# Validation every this many steps in the memory run (default: at its last step; -1: none).
MEMORY_TEST_FREQ=${MEMORY_TEST_FREQ:-$MEMORY_STEPS}
# A checkpoint every MEMORY_SAVE_FREQ steps (the last step's by default), each save allowed the next of
# MEMORY_SAVE_HEADROOM's GiB above what it starts with (tests/gpu/hooks: P40_SAVE_HEADROOM_GIB), e.g. 3,1.
MEMORY_SAVE_FREQ=${MEMORY_SAVE_FREQ:-$MEMORY_STEPS}
MEMORY_SAVE_HEADROOM=${MEMORY_SAVE_HEADROOM:-}
# Prefix of the smoke run's result files in $OUT.
SMOKE_NAME=${SMOKE_NAME:-smoke}
# A host's recorded nvidia-smi output (and its topo -p2p r) for the launcher's render
# (tools/render.py --nvidia-smi): the GPU count then comes from the product, as on a host.
GPU_SAMPLE=${GPU_SAMPLE:-}
GPU_TOPO=${GPU_TOPO:-}
# Two P40s with ECC on (tests/unit/samples): the two-GPU modes render for this host.
TWO_P40=$REPO/tests/unit/samples/nvidia-smi/p40-x2-ecc.txt
TWO_P40_NO_P2P=$REPO/tests/unit/samples/nvidia-smi-topo/p40-x2-acs.txt

cd "$REPO"
mkdir -p "$WORK" "$OUT"
say() { echo "[run_ppo $(date +%H:%M:%S)] $*" >&2; }

setup() {
  if [ ! -f "$SITE/.installed" ]; then
    say "installing the wheelhouse into $SITE"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHL"/*.whl
    touch "$SITE/.installed"
  fi
  export PYTHONPATH=$SITE
  say "unpacking verl 0.4.1, patching it with the pascal profile's fixes, installing it (--no-deps -e)"
  rm -rf "$VERL"
  tar xzf "$WHL/verl-0.4.1.tar.gz" -C "$WORK"
  python3 tests/gpu/patch_verl.py --verl "$VERL" --profile pascal >"$WORK/patch.json"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e "$VERL"
  {
    echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv
    python3 - <<'EOF'
import importlib.metadata as md, platform, sys, torch, verl
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda)
for name in ("verl", "transformers", "tokenizers", "huggingface_hub", "ray", "tensordict", "torchdata", "peft",
             "hydra-core", "omegaconf", "datasets", "accelerate", "numpy", "pyarrow", "setuptools", "ansible-core"):
    print(f"{name} {md.version(name)}")
print("verl imported from", verl.__file__)
EOF
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("verl_patch fixes:", ", ".join(r["fixes"])); [print("  %s %s:%s" % (a["fix"], a["file"], a["line"])) for a in r["applied"]]' "$WORK/patch.json"
    grep -rn "verl_p40_patch:" "$VERL/verl" | sed "s|$VERL/||"
  } >"$OUT/versions.txt" 2>&1
  cat "$OUT/versions.txt" >&2
}

stand_ins() {
  mkdir -p "$WORK/env" "$WORK/conda/etc/profile.d"
  echo "# Stand-in for the cuda layer's profile script: torch brings its own CUDA runtime here." >"$WORK/env/cuda.sh"
  cat >"$WORK/conda/etc/profile.d/conda.sh" <<EOF
# Stand-in for Miniforge's conda.sh (tests/gpu/run_ppo.sh): 'conda activate ENV'
# puts the wheelhouse, which holds the env's pinned packages, on PYTHONPATH.
conda() {
  if [ "\$1" = activate ]; then
    export PYTHONPATH="$SITE\${PYTHONPATH:+:\$PYTHONPATH}" CONDA_DEFAULT_ENV="\$2"
    return 0
  fi
  echo "conda stand-in: only 'conda activate' is provided" >&2
  return 1
}
EOF
}

make_data() {  # tokenizer model dir
  if [ ! -f "$DATA/train.parquet" ]; then
    python3 tests/fixtures/gsm8k_fixture.py --out "$WORK/gsm8k-src" --train-rows 768 --test-rows "$TEST_ROWS"
    python3 roles/data/files/gsm8k_to_verl.py --source "$WORK/gsm8k-src" --out "$DATA" --tokenizer "$1" \
      --expect-train-rows 768 --expect-test-rows "$TEST_ROWS" --fail-on-overlong
  fi
}

# Ray's head processes can outlive a killed run; end them before the next one.
stop_ray() { python3 -m ray.scripts.scripts stop --force >/dev/null 2>&1 || true; }

# Read by the hub clients (no network here) and by Ray's raylet: its memory
# monitor sizes itself from MemTotal, which on this machine starts low and
# grows as memory is used, so it would kill workers that the machine can hold.
# verl's workers log at VERL_LOGGING_LEVEL (verl's default WARN; INFO shows the LoRA adapter's save).
QUIET_ENV="HF_HUB_OFFLINE: '1', HF_DATASETS_OFFLINE: '1', RAY_memory_monitor_refresh_ms: '0', VERL_LOGGING_LEVEL: '${VERL_LOGGING_LEVEL:-WARN}'"

render_launcher() {  # dir model [--var k=v ...]
  local dir=$1 model=$2
  shift 2
  python3 tools/render.py --profile pascal --out "$dir" \
    --var "train_work_dir=$dir" \
    --var "train_model_path=$model" \
    --var "train_data_dir=$DATA" \
    --var "train_conda_prefix=$WORK/conda" \
    --var "train_conda_env=verl" \
    --var "train_cuda_env_script=$WORK/env/cuda.sh" \
    ${GPU_SAMPLE:+--nvidia-smi "$GPU_SAMPLE"} ${GPU_TOPO:+--nvidia-smi-topo "$GPU_TOPO"} "$@"
}

# The two-GPU proof's launcher on a one-GPU machine: rendered for two P40s, its override
# list and verl's composed config (trainer.n_gpus_per_node=2), no training.
two_gpu_dry() {
  python3 tests/gpu/make_tiny_model.py --out "$WORK/models/tiny"
  make_data "$WORK/models/tiny"
  local dir=$WORK/two-gpu-dry
  rm -rf "$dir"
  GPU_SAMPLE=$TWO_P40 GPU_TOPO=$TWO_P40_NO_P2P render_launcher "$dir" "$WORK/models/tiny" \
    --model-config "$WORK/models/tiny/config.json" --var "train_extra_env={$QUIET_ENV}"
  {
    echo "== tools/render.py --nvidia-smi tests/unit/samples/nvidia-smi/p40-x2-ecc.txt --nvidia-smi-topo .../p40-x2-acs.txt"
    echo "== train.env"
    cat "$dir/train.env"
    echo "== train.sh --print-overrides"
    env -u PYTHONPATH "$dir/train.sh" --print-overrides
    echo "== train.sh --dry-run (verl's composed config), trainer section"
    env -u PYTHONPATH "$dir/train.sh" --dry-run | sed -n '/^trainer:/,/^[a-z_]*:$/p'
  } >"$OUT/two-gpu-dry.txt" 2>&1
  cat "$OUT/two-gpu-dry.txt"
  grep -q "n_gpus_per_node: 2" "$OUT/two-gpu-dry.txt" && grep -q "NCCL_P2P_DISABLE=1" "$OUT/two-gpu-dry.txt"
}

# The seed's environment, its 5 variables in its order (tests/unit/test_compose.py's ORIGINAL_ENV).
SEED_ENV="HYDRA_FULL_ERROR=1 VLLM_DTYPE=float32 PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128 PYTHONUNBUFFERED=1 TRITON_MAX_SHARED_MEMORY=49152"

recipe() {
  say "the original recipe's overrides (30, tests/gpu/original_recipe.txt) through verl's --cfg job"
  mapfile -t recipe_overrides < <(grep -v '^#' tests/gpu/original_recipe.txt | grep .)
  {
    echo "== $SEED_ENV python3 -m verl.trainer.main_ppo --cfg job <tests/gpu/original_recipe.txt: ${#recipe_overrides[@]} overrides>"
    status=0
    (cd "$WORK" && env $SEED_ENV python3 -m verl.trainer.main_ppo --cfg job "${recipe_overrides[@]}") || status=$?
    echo "== exit status $status"
    echo
    echo "== roles/train/files/validate_overrides.py --overrides-file tests/gpu/original_recipe.txt (every refusal at once)"
    status=0
    python3 roles/train/files/validate_overrides.py --verl "$VERL" --overrides-file tests/gpu/original_recipe.txt || status=$?
    echo "== exit status $status"
    echo
    echo "== actor_rollout_ref.rollout.max_num_seqs alone: accepted (it is in verl's YAML) ..."
    status=0
    (cd "$WORK" && python3 -m verl.trainer.main_ppo --cfg job actor_rollout_ref.rollout.max_num_seqs=1 | grep -n "max_num_seqs") || status=$?
    echo "== exit status $status"
    echo "== ... and read by no code on verl 0.4.1's FSDP path (Python files naming it, outside verl's config and its vendored vLLM 0.5.4):"
    grep -rl --include='*.py' max_num_seqs "$VERL/verl" | grep -v third_party/vllm || echo "   none"
    echo "== Python files that read VLLM_DTYPE or TRITON_MAX_SHARED_MEMORY in verl, the wheelhouse, torch and triton here:"
    grep -rlE --include='*.py' 'VLLM_DTYPE|TRITON_MAX_SHARED_MEMORY' "$VERL/verl" "$SITE" \
      "$(python3 -c 'import torch,os; print(os.path.dirname(torch.__file__))')" \
      "$(python3 -c 'import triton,os; print(os.path.dirname(triton.__file__))')" || echo "   none"
  } >"$OUT/original-recipe.log" 2>&1
  tail -n 40 "$OUT/original-recipe.log" >&2
}

smoke() {
  say "tiny Qwen2 model, data, pascal launcher"
  python3 tests/gpu/make_tiny_model.py --out "$WORK/models/tiny"
  make_data "$WORK/models/tiny"
  local dir=$WORK/$SMOKE_NAME
  rm -rf "$dir"
  render_launcher "$dir" "$WORK/models/tiny" --model-config "$WORK/models/tiny/config.json" --var "train_extra_env={$QUIET_ENV}"
  local args=("trainer.total_training_steps=$SMOKE_STEPS" trainer.test_freq=10 trainer.save_freq=10)
  python3 roles/train/files/validate_overrides.py --verl "$VERL" --script "$dir/train.sh" "${args[@]}" >"$WORK/$SMOKE_NAME-validate.json" || true
  {
    echo "== roles/train/files/validate_overrides.py --script train.sh ${args[*]}"
    cat "$WORK/$SMOKE_NAME-validate.json"
    echo "== train.env"
    cat "$dir/train.env"
    echo "== train.sh --print-overrides ${args[*]}"
    env -u PYTHONPATH "$dir/train.sh" --print-overrides "${args[@]}"
    echo "== train.sh --dry-run ${args[*]} (verl's composed config)"
    env -u PYTHONPATH "$dir/train.sh" --dry-run "${args[@]}"
  } >"$OUT/$SMOKE_NAME-launcher.txt" 2>&1
  say "train.sh ${args[*]}"
  local status=0
  env -u PYTHONPATH timeout "$SMOKE_TIMEOUT" "$dir/train.sh" "${args[@]}" >"$WORK/$SMOKE_NAME-console.log" 2>&1 || status=$?
  stop_ray
  say "train.sh exit status $status"
  cp "$dir"/logs/train-*.log "$OUT/$SMOKE_NAME-train.log" 2>/dev/null || cp "$WORK/$SMOKE_NAME-console.log" "$OUT/$SMOKE_NAME-train.log"
  echo "train.sh exit status $status" >>"$OUT/$SMOKE_NAME-train.log"
  python3 tests/gpu/summarize.py smoke --log "$OUT/$SMOKE_NAME-train.log" --checkpoints "$dir/checkpoints/gsm8k-gae-pascal" \
    --steps "$SMOKE_STEPS" | tee "$OUT/$SMOKE_NAME-summary.txt" || true
  echo "train.sh exit status $status" >>"$OUT/$SMOKE_NAME-summary.txt"
}

memory() {
  local name=$MEMORY_NAME model=$WORK/models/$MEMORY_ARCH
  say "$MEMORY_ARCH architecture, random fp32 weights"
  [ -f "$model/config.json" ] || python3 tests/gpu/make_tiny_model.py --out "$model" --arch "$MEMORY_ARCH"
  make_data "$model"
  local dir=$WORK/$name mem_log=$OUT/$name-calls.jsonl summary=$OUT/$name-summary.txt
  rm -rf "$dir" "$mem_log"
  local vars=()
  for kv in $MEMORY_VARS; do vars+=(--var "$kv"); done
  # The launcher sizes every memory knob itself (filter_plugins/memory.py), for this
  # model's config.json and a card of the cap's size, as the train role does for a host's GPU.
  render_launcher "$dir" "$model" --model-config "$model/config.json" \
    --gpu-memory-mib "$(python3 -c "import sys; print(int(float(sys.argv[1]) * 1024))" "$MEMORY_CARD_GIB")" \
    --var "train_extra_env={$QUIET_ENV, PYTHONPATH: '$HOOKS:$SITE', P40_GPU_MEM_GB: '$CAP_GIB', P40_MEM_LOG: '$mem_log', P40_SAVE_HEADROOM_GIB: '$MEMORY_SAVE_HEADROOM'}" \
    ${vars[@]+"${vars[@]}"}
  {
    echo "== the launcher's memory plan (train.sh, rendered by tools/render.py; predictions)"
    grep -A2 "Sized by filter_plugins/memory.py" "$dir/train.sh"
    grep -A4 "Prompts per generate() call" "$dir/train.sh"
    env -u PYTHONPATH "$dir/train.sh" --print-overrides | grep -E "micro_batch_size|val_batch_size|gradient_checkpointing|offload|lora|target_modules|use_kl_loss|adv_estimator|rollout.n=|batch_size="
    echo "== the cap bites: a process with the hook allocates (cap - 1) GiB, then fails at (cap + 1) GiB"
    PYTHONPATH="$HOOKS:$SITE" P40_GPU_MEM_GB=$CAP_GIB python3 -c '
import os, torch
cap = float(os.environ["P40_GPU_MEM_GB"])
a = torch.empty(int((cap - 1) * 2**30), dtype=torch.uint8, device="cuda"); print(f"{cap - 1:g} GiB: allocated"); del a
try:
    torch.empty(int((cap + 1) * 2**30), dtype=torch.uint8, device="cuda"); print(f"{cap + 1:g} GiB: allocated (CAP NOT APPLIED)")
except torch.OutOfMemoryError as error:
    print(f"{cap + 1:g} GiB: out of memory, as on a card of {cap:g} GiB:", str(error).splitlines()[0][:160])'
  } >"$summary" 2>&1 || true
  local args=("trainer.total_training_steps=$MEMORY_STEPS" "trainer.test_freq=$MEMORY_TEST_FREQ" "trainer.save_freq=$MEMORY_SAVE_FREQ")
  # More train.sh arguments, e.g. MEMORY_EXTRA=actor_rollout_ref.actor.use_kl_loss=True (adds verl's ref model).
  read -r -a extra <<<"${MEMORY_EXTRA:-}"
  args+=("${extra[@]}")
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader,nounits -lms 500 >"$WORK/$name-smi.csv" 2>/dev/null &
  local smi=$!
  say "train.sh ${args[*]} (capped at $CAP_GIB GiB per process)"
  local status=0
  env -u PYTHONPATH timeout "$MEMORY_TIMEOUT" "$dir/train.sh" "${args[@]}" >"$WORK/$name-console.log" 2>&1 || status=$?
  kill "$smi" 2>/dev/null || true
  stop_ray
  say "train.sh exit status $status"
  cp "$dir"/logs/train-*.log "$OUT/$name-train.log" 2>/dev/null || cp "$WORK/$name-console.log" "$OUT/$name-train.log"
  echo "train.sh exit status $status" >>"$OUT/$name-train.log"
  python3 tests/gpu/summarize.py memory --log "$OUT/$name-train.log" --mem-log "$mem_log" --smi "$WORK/$name-smi.csv" \
    --cap-gib "$CAP_GIB" --steps "$MEMORY_STEPS" >>"$summary" 2>&1 || true
  echo "train.sh exit status $status" >>"$summary"
  {
    echo "== checkpoints written (find -maxdepth 5: path, bytes)"
    find "$dir/checkpoints" -maxdepth 5 -printf '%P %s\n' 2>/dev/null | sort | head -n 60
    # verl 0.4.1 saves the LoRA adapter inside a try/except that only logs (at INFO, shown with
    # VERL_LOGGING_LEVEL=INFO): an adapter that was not written shows here and there.
    grep -h "LoRA adapter\|LoRA Adapter" "$OUT/$name-train.log" | tail -n 3
  } >>"$summary" 2>&1 || true
  # The run report users get (train.sh --report), on this log, against the peak of the card it ran on:
  # fp32 67 TFLOP/s for an H100 SXM and an H200 (NVIDIA's datasheets); another card's is not known here
  # (0: the report leaves the share of the peak out).
  local plot=() card peak
  [ "$MEMORY_PLOT" = 1 ] && plot=(--plot "$OUT/$name-report.png")
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
  case $card in "NVIDIA H200" | "NVIDIA H100 80GB HBM3") peak=67 ;; *) peak=0 ;; esac
  {
    echo "== roles/train/files/train_report.py (what train.sh --report prints), $card, fp32 peak $peak TFLOP/s"
    python3 roles/train/files/train_report.py --model-config "$model/config.json" --card "$card" --peak-tflops "$peak" \
      --precision float32 ${plot[@]+"${plot[@]}"} "$OUT/$name-train.log"
  } >>"$summary" 2>&1 || true
  cat "$summary"
}

setup
stand_ins
case $mode in
  smoke) recipe; smoke ;;
  recipe) recipe ;;
  memory) memory ;;
  all) recipe; smoke; memory ;;
  # Two GPUs (issue: the two-GPU proof): the launcher rendered for two P40s, NCCL's choice logged.
  two-gpu)
    export NCCL_DEBUG=INFO
    SMOKE_NAME=two-gpu-smoke GPU_SAMPLE=$TWO_P40 smoke
    MEMORY_NAME=two-gpu-memory GPU_SAMPLE=$TWO_P40 memory
    SMOKE_NAME=two-gpu-no-p2p SMOKE_STEPS=3 GPU_SAMPLE=$TWO_P40 GPU_TOPO=$TWO_P40_NO_P2P smoke ;;
  two-gpu-dry) two_gpu_dry ;;
  *) echo "usage: run_ppo.sh smoke|recipe|memory|all|two-gpu|two-gpu-dry" >&2; exit 2 ;;
esac
