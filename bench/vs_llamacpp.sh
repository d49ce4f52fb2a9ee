#!/usr/bin/env bash
# Saturn's saturn-bench-engine beside a local llama.cpp build, on the same CPU, same preset shape
# and thread count, interleaved for N rounds (Saturn first in odd rounds, llama.cpp first in even
# ones), with per-round figures and Saturn / llama.cpp ratios, then median, min and max ratio per
# figure. Builds nothing: it takes a llama.cpp bin dir (llama-bench; llama-batched-bench if there)
# and a GGUF of the same shape as the Saturn preset (e.g. written by bench/make_gguf.py, docs/BENCH_LLAMACPP.md).
#
# Figures (output tokens/s, higher is better; ratio = Saturn / llama.cpp):
#   decode_b1          Saturn batch-1 decode      vs llama-bench tg (-n DECODE_TOKENS, mean of reps)
#   decode_b1_batched  Saturn batch-1 decode      vs llama-batched-bench pl=1 (same prompt, same tokens)
#   decode_bN          Saturn batch-N decode      vs llama-batched-bench pl=N speed_tg (each --batches N)
#   prefill_P          Saturn prefill, prompt P   vs llama-bench pp (-p P), both best of --prefill_repeats
# Without llama-batched-bench in the bin dir the batched figures are skipped with a note.
#
#   bench/vs_llamacpp.sh --llama_bin /tmp/llama.cpp/build/bin --gguf /tmp/models/small-f32.gguf \
#       --model small --dtype f32 --rounds 5 --json out.json [-- extra saturn-bench-engine flags]
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROG=$(basename "$0")

usage() {
  cat <<EOF
usage: $PROG --llama_bin DIR --gguf FILE [options] [-- extra saturn-bench-engine flags]

Interleaves saturn-bench-engine with llama.cpp's llama-bench (and llama-batched-bench when the
bin dir has it) for N rounds on the same machine and threads; prints each round's figures and
Saturn / llama.cpp ratios, then the median, min and max ratio per figure. Builds nothing.

required:
  --llama_bin DIR        a local llama.cpp build's bin dir holding llama-bench
                         (and optionally llama-batched-bench, for batched decode)
  --gguf FILE            a GGUF of the same shape as the Saturn preset (--model), type matching --dtype

options:
  --model small|tiny|1b  Saturn preset (default: small)
  --dtype f32|bf16|q8_0|q4_0
                         Saturn's --dtype (default: f32; q8_0 and q4_0 quantize the preset at
                         load as llama-quantize does); warns when the GGUF's type disagrees
  --rounds N             interleaved rounds (default: 5)
  --saturn_bin DIR       dir holding saturn-bench-engine (default: $ROOT/build/bench)
  --threads N            threads for both engines (default: nproc = $(nproc 2>/dev/null || echo '?'))
  --json OUT             write every round's figures, the medians and the run's context as JSON
  --batches LIST         batched decode sizes, comma-separated (default: 8,64; batch 1 always runs)
  --prompt_len N         prompt tokens before decode, Saturn and llama-batched-bench -npp (default: 64)
  --decode_tokens N      tokens decoded per sequence: Saturn --decode_tokens, llama-bench -n,
                         llama-batched-bench -ntg (default: 64)
  --prefill_lens LIST    prompt lengths timed for prefill: Saturn --prefill_lens, llama-bench -p
                         (default: 64,512)
  --prefill_repeats N    Saturn --prefill_repeats and llama-bench -r (default: 3)
  --llama_args "ARGS"    extra flags for both llama.cpp tools, word-split (e.g. "-fa 1")
  --timeout S            per engine call, seconds (default: 1800)
  --invariance_ab        also run Saturn with --batch_invariant=off in every round, beside its
                         default run (after it in rounds 1, 2, 5, 6, ..., before it in the others,
                         so each follows llama.cpp and leads its round equally often), and report
                         default / off per figure (what the batch-invariant default costs against
                         the fastest path, same rounds)
  --ab_env VAR=VALUE     as --invariance_ab, but the second Saturn run has the environment
                         variable VAR=VALUE instead of --batch_invariant=off (e.g.
                         SATURN_CPU_PACKED_WEIGHTS=0: default / row-major weights); with
                         --invariance_ab too, it has both (default / the fastest row-major path)
  -h, --help             this text

Everything after -- goes to saturn-bench-engine unchanged, after the script's own flags, so it
can override them (e.g. -- --kv_cache_dtype=bf16 --batch_invariant=off).
Saturn runs with --backend=cpu unless a --backend flag follows --.
Exit status: 0 on success, 2 on a bad flag or a missing binary/GGUF, 1 when an engine run fails.
EOF
}

die() { echo "$PROG: error: $*" >&2; exit 2; }
fail() { echo "$PROG: error: $*" >&2; exit 1; }
note() { echo "$PROG: $*" >&2; }

LLAMA_BIN="" GGUF="" MODEL=small DTYPE=f32 ROUNDS=5 SATURN_BIN="$ROOT/build/bench"
THREADS=$(nproc 2>/dev/null || echo 1) JSON_OUT="" BATCHES="8,64" PROMPT_LEN=64 DECODE_TOKENS=64
PREFILL_LENS="64,512" REPEATS=3 LLAMA_ARGS="" TIMEOUT=1800 AB="" AB_ENV="" AB_OFF=""
EXTRA=()

need_val() { [ "$2" -ge 2 ] || die "$1 needs a value (see --help)"; }
while [ $# -gt 0 ]; do
  arg=$1
  case $arg in
    --) shift; EXTRA=("$@"); break ;;
    --invariance_ab) AB=1; AB_OFF=1; shift; continue ;;
    --ab_env) need_val "$arg" $#; AB=1; AB_ENV=$2; shift 2; continue ;;
    --ab_env=*) AB=1; AB_ENV=${arg#*=}; shift; continue ;;
    -h|--help) usage; exit 0 ;;
    --*=*) key=${arg%%=*}; val=${arg#*=}; shift ;;
    --*) key=$arg; need_val "$arg" $#; val=$2; shift 2 ;;
    *) die "unexpected argument \"$arg\" (flags start with --; saturn-bench-engine flags go after --)" ;;
  esac
  case $key in
    --llama_bin) LLAMA_BIN=$val ;;
    --gguf) GGUF=$val ;;
    --model) MODEL=$val ;;
    --dtype) DTYPE=$val ;;
    --rounds) ROUNDS=$val ;;
    --saturn_bin) SATURN_BIN=$val ;;
    --threads) THREADS=$val ;;
    --json) JSON_OUT=$val ;;
    --batches) BATCHES=$val ;;
    --prompt_len) PROMPT_LEN=$val ;;
    --decode_tokens) DECODE_TOKENS=$val ;;
    --prefill_lens) PREFILL_LENS=$val ;;
    --prefill_repeats) REPEATS=$val ;;
    --llama_args) LLAMA_ARGS=$val ;;
    --timeout) TIMEOUT=$val ;;
    *) die "unknown flag \"$key\" (see --help)" ;;
  esac
done

is_pos_int() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
is_int_list() { [[ $1 =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; }
[ -n "$LLAMA_BIN" ] || die "--llama_bin DIR is required (see --help)"
[ -n "$GGUF" ] || die "--gguf FILE is required (see --help)"
case $MODEL in small|tiny|1b) ;; *) die "--model must be small, tiny or 1b (got \"$MODEL\")" ;; esac
case $DTYPE in f32|bf16|q8_0|q4_0) ;; *) die "--dtype must be f32, bf16, q8_0 or q4_0 (got \"$DTYPE\")" ;; esac
for v in rounds:ROUNDS threads:THREADS prompt_len:PROMPT_LEN decode_tokens:DECODE_TOKENS \
         prefill_repeats:REPEATS timeout:TIMEOUT; do
  var=${v#*:}; is_pos_int "${!var}" || die "--${v%%:*} must be a positive integer (got \"${!var}\")"
done
is_int_list "$BATCHES" || die "--batches must be comma-separated positive integers (got \"$BATCHES\")"
is_int_list "$PREFILL_LENS" || die "--prefill_lens must be comma-separated positive integers (got \"$PREFILL_LENS\")"

[ -d "$LLAMA_BIN" ] || die "--llama_bin: no such directory: $LLAMA_BIN"
LLAMA_BENCH=$LLAMA_BIN/llama-bench
[ -x "$LLAMA_BENCH" ] || die "no executable llama-bench in $LLAMA_BIN (build llama.cpp's llama-bench target; this script builds nothing)"
BATCHED=$LLAMA_BIN/llama-batched-bench
if [ ! -x "$BATCHED" ]; then
  note "no llama-batched-bench in $LLAMA_BIN: batched decode (batch ${BATCHES}) is skipped for llama.cpp; only batch 1 and prefill are compared"
  BATCHED=""
fi
[ -f "$GGUF" ] || die "--gguf: no such file: $GGUF"
[ -r "$GGUF" ] || die "--gguf: cannot read $GGUF"
SATURN=$SATURN_BIN/saturn-bench-engine
[ -x "$SATURN" ] || die "no executable saturn-bench-engine in $SATURN_BIN (build the saturn-bench-engine target or pass --saturn_bin; this script builds nothing)"
command -v python3 >/dev/null || die "python3 is needed to read the engines' JSON"
if [ -n "$JSON_OUT" ]; then
  jdir=$(dirname "$JSON_OUT"); [ -d "$jdir" ] || die "--json: no such directory: $jdir"
fi
TO=(); command -v timeout >/dev/null && TO=(timeout --kill-after=10 "$TIMEOUT")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vs_llamacpp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PY=$WORK/vs.py
cat > "$PY" <<'PYEOF'
import json, os, re, statistics, struct, sys

PRESETS = {  # engine/model/model_config.cc: vocab, hidden, ffn, layers, heads, kv_heads
    "tiny": (4096, 256, 688, 4, 8, 2),
    "small": (32000, 768, 2048, 12, 12, 4),
    "1b": (128256, 2048, 8192, 16, 32, 8),
}
FILE_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 7: "q8_0", 32: "bf16"}  # llama_ftype; else other

def gguf_kv(path):
    """The GGUF header's key/values (arrays: their length only), stdlib only."""
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError("not a GGUF file (bad magic)")
        ver, = struct.unpack("<I", f.read(4))
        if ver < 2:
            raise ValueError(f"GGUF version {ver} is too old to read here")
        _, n_kv = struct.unpack("<QQ", f.read(16))
        scal = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                10: "<Q", 11: "<q", 12: "<d"}
        def rstr():
            n, = struct.unpack("<Q", f.read(8)); return f.read(n).decode("utf-8", "replace")
        def rval(t):
            if t in scal:
                fmt = scal[t]; return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
            if t == 8:
                return rstr()
            if t == 9:
                et, n = struct.unpack("<IQ", f.read(12))
                if et in scal:
                    f.seek(n * struct.calcsize(scal[et]), 1)
                else:
                    for _ in range(n): rval(et)
                return {"array_len": n}
            raise ValueError(f"unknown GGUF value type {t}")
        kv = {}
        for _ in range(n_kv):
            k = rstr(); t, = struct.unpack("<I", f.read(4)); kv[k] = rval(t)
        return kv

def cmd_gguf(path, model, dtype, out):
    warn = []
    info = {"path": os.path.abspath(path), "bytes": os.path.getsize(path)}
    try:
        kv = gguf_kv(path)
    except Exception as e:  # a reader's limit, not the run's: llama.cpp will say if it cannot load it
        warn.append(f"could not read the GGUF header ({e}); shape and type not checked")
        kv = {}
    if kv:
        arch = kv.get("general.architecture", "?")
        g = lambda k: kv.get(f"{arch}.{k}")
        vocab = g("vocab_size") or (kv.get("tokenizer.ggml.tokens") or {}).get("array_len")
        shape = (vocab, g("embedding_length"), g("feed_forward_length"), g("block_count"),
                 g("attention.head_count"), g("attention.head_count_kv"))
        ft = kv.get("general.file_type")
        info.update({"architecture": arch, "name": kv.get("general.name"),
                     "shape": dict(zip(["vocab", "hidden", "ffn", "layers", "heads", "kv_heads"], shape)),
                     "file_type": ft, "file_type_name": FILE_TYPES.get(ft, "other")})
        if tuple(shape) != PRESETS[model]:
            want = dict(zip(["vocab", "hidden", "ffn", "layers", "heads", "kv_heads"], PRESETS[model]))
            warn.append(f"GGUF shape {info['shape']} is not Saturn's {model} preset {want}")
        if ft is not None and FILE_TYPES.get(ft) != dtype:
            warn.append(f"GGUF general.file_type is {FILE_TYPES.get(ft, ft)}, Saturn runs --dtype={dtype}")
    base = os.path.basename(path).lower()
    named = "bf16" if "bf16" in base else "f32" if "f32" in base else "f16" if "f16" in base else \
        "q8_0" if "q8_0" in base else "q4_0" if "q4_0" in base else \
        "quantized" if re.search(r"q[2-8]_|iq[1-4]", base) else None
    if named and named != dtype:
        warn.append(f"GGUF file name says {named}, Saturn runs --dtype={dtype}")
    info["warnings"] = warn
    json.dump(info, open(out, "w"))
    for w in warn:
        print(f"vs_llamacpp.sh: WARNING: {w}", file=sys.stderr)

def load_json_lines(path):
    """llama-batched-bench --output-format jsonl: one object a line, among other log lines."""
    rows = []
    for line in open(path, errors="replace"):
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            try: rows.append(json.loads(line))
            except ValueError: pass
    return rows

def saturn_figures(sat):
    """Decode tok/s per batch and prefill tok/s per prompt length from saturn-bench-engine's JSON."""
    # Decode per batch: the median over its rows (one per --rounds), CUDA graphs on where a row
    # has them (a -- --graphs=both run), else the graphs-off rows.
    rows_by = {}
    for r in sat.get("rows", []):
        rows_by.setdefault((int(r["batch"]), bool(r.get("graphs", False))), []).append(float(r["tokens_per_s"]))
    srow = {}
    for (b, g), v in sorted(rows_by.items(), key=lambda kv: kv[0][1]):
        srow[b] = statistics.median(v)  # graphs-on sorts last, so it wins where present
    return srow, {int(p["prompt_len"]): float(p["tokens_per_s"]) for p in sat.get("prefill", [])}

def cmd_round(a):
    sat = json.load(open(a["saturn_json"]))
    ab_run = bool(a.get("saturn_off_json"))
    lb = json.load(open(a["llama_bench_json"]))
    bb = load_json_lines(a["batched_out"]) if a["batched_out"] else None
    batches = [int(x) for x in a["batches"].split(",")]
    plens = [int(x) for x in a["prefill_lens"].split(",")]
    n, pp = int(a["decode_tokens"]), int(a["prompt_len"])
    warn = []
    srow, spre = saturn_figures(sat)
    sat_off = json.load(open(a["saturn_off_json"])) if a.get("saturn_off_json") else None
    orow, opre = saturn_figures(sat_off) if sat_off else ({}, {})
    lb_tg = {}; lb_pp = {}
    for e in lb:
        if e.get("n_prompt", 0) == 0 and e.get("n_gen", 0) > 0:
            lb_tg[int(e["n_gen"])] = float(e["avg_ts"])
        elif e.get("n_gen", 0) == 0 and e.get("n_prompt", 0) > 0:
            s = e.get("samples_ts") or [e["avg_ts"]]
            lb_pp[int(e["n_prompt"])] = float(max(s))
    bbd = {int(r["pl"]): float(r["speed_tg"]) for r in (bb or [])}
    figs = {}
    def add(key, label, s, l, off=None):
        figs[key] = {"label": label, "saturn": s, "llama": l,
                     "ratio": (s / l) if (s is not None and l) else None}
        if sat_off is not None:  # --invariance_ab: the same figure with --batch_invariant=off
            figs[key]["saturn_invariant_off"] = off
            figs[key]["invariance_ratio"] = (s / off) if (s is not None and off) else None
    add("decode_b1", f"decode b1 (llama-bench tg{n})", srow.get(1), lb_tg.get(n), orow.get(1))
    if bb is not None:
        add("decode_b1_batched", f"decode b1 (batched-bench pp{pp}+tg{n})", srow.get(1), bbd.get(1),
            orow.get(1))
        for b in batches:
            if b != 1:
                add(f"decode_b{b}", f"decode b{b} (batched-bench pp{pp}+tg{n})", srow.get(b), bbd.get(b),
                    orow.get(b))
    for p in plens:
        add(f"prefill_{p}", f"prefill {p} (llama-bench pp{p})", spre.get(p), lb_pp.get(p), opre.get(p))
    for k, f in figs.items():
        if f["saturn"] is None: warn.append(f"{k}: no Saturn figure in its JSON")
        if f["llama"] is None: warn.append(f"{k}: no llama.cpp figure in its output")
    # Batch 1 reads every weight once per token, so the read stream measured just before Saturn's
    # run bounds both engines alike (same shape): each one's share of that bound, and the largest
    # Saturn / llama.cpp ratio the bound leaves (bound / llama.cpp's rate). Over 100 %: the
    # machine's bandwidth moved between the calibration and the run.
    # The batch-1 rows saturn_figures takes (graphs on where there are such rows), median bound.
    b1 = [r for r in sat.get("rows", []) if int(r.get("batch", 0)) == 1]
    if any(r.get("graphs") for r in b1): b1 = [r for r in b1 if r.get("graphs")]
    rbs = [float(r["read_bound_tokens_per_s"]) for r in b1 if r.get("read_bound_tokens_per_s")]
    rb = statistics.median(rbs) if rbs else None
    bound = None
    if rb:
        bound = {"read_bound_tokens_per_s": rb,
                 "saturn_share": srow[1] / rb if srow.get(1) else None,
                 "llama_share": lb_tg[n] / rb if lb_tg.get(n) else None,
                 "llama_batched_share": bbd[1] / rb if bbd.get(1) else None,
                 "max_ratio_vs_llama_bench": rb / lb_tg[n] if lb_tg.get(n) else None}
    lb0 = lb[0] if lb else {}
    rec = {"round": int(a["round"]), "first": a["first"], "figures": figs, "warnings": warn,
           "decode_b1_read_bound": bound,
           "saturn_invariant_off_rows": [{k: r.get(k) for k in ("batch", "tokens_per_s", "step_ms")}
                                         for r in (sat_off or {}).get("rows", [])] if ab_run else None,
           "loadavg_start": a["load0"], "loadavg_end": open("/proc/loadavg").read().split()[:3]
           if os.path.exists("/proc/loadavg") else None,
           "wall_s": {"saturn": float(a["sat_s"]), "llama_bench": float(a["lb_s"]),
                      "llama_batched_bench": float(a["bb_s"]) if a["bb_s"] else None},
           "saturn": {k: sat.get(k) for k in ("model", "backend", "device", "weight_dtype",
                                               "kv_cache_dtype", "weight_bytes", "kernel_plan")},
           "saturn_rows": [{k: r.get(k) for k in ("batch", "graphs", "tokens_per_s", "step_ms",
                                                  "roofline_share", "mbu", "mfu", "steps", "mean_context",
                                                  "read_bound_tokens_per_s", "read_bound_share")}
                           for r in sat.get("rows", [])],
           "saturn_prefill": sat.get("prefill", []),
           "saturn_calibration_bandwidth_bytes_per_s": (sat.get("calibration") or {}).get("bandwidth_bytes_per_s"),
           "llama_bench": lb, "llama_batched_bench": bb,
           "llama_build": {"commit": lb0.get("build_commit"), "number": lb0.get("build_number"),
                           "model_type": lb0.get("model_type"), "cpu_info": lb0.get("cpu_info")}}
    if sat.get("weight_dtype") and sat["weight_dtype"] != a["dtype"]:
        warn.append(f"Saturn ran with {sat['weight_dtype']} weights, not --dtype={a['dtype']}")
    mt = (lb0.get("model_type") or "")
    want = {"f32": "F32", "bf16": "BF16", "q8_0": "Q8_0", "q4_0": "Q4_0"}[a["dtype"]]
    if mt and not re.search(r"(^|\s)(all\s+)?" + want + r"\b", mt):
        warn.append(f"llama-bench reports the model as \"{mt}\", Saturn runs --dtype={a['dtype']}")
    rec["ab_label"] = a.get("ab_label") or None  # what the second Saturn run changed
    json.dump(rec, open(a["out"], "w"))
    print(f"\n== round {rec['round']} ({a['first']} first; load avg {' '.join(a['load0'])} at start)")
    ab = sat_off is not None
    print(f"{'figure':42s} {'saturn t/s':>12s} {'llama.cpp t/s':>14s} {'saturn/llama':>13s}"
          + ((f" {'inv. off t/s':>13s} {'on/off':>7s}" if rec["ab_label"] == "--batch_invariant=off"
              else f" {'B t/s':>13s} {'A/B':>7s}") if ab else ""))
    fmt = lambda v: f"{v:12.1f}" if v is not None else f"{'-':>12s}"
    for k, f in figs.items():
        r = f"{f['ratio']:12.2f}x" if f["ratio"] is not None else f"{'-':>13s}"
        extra = ""
        if ab:
            ir = f.get("invariance_ratio")
            extra = f" {fmt(f.get('saturn_invariant_off')):>13s} " + (f"{ir:7.3f}" if ir is not None else f"{'-':>7s}")
        print(f"{f['label']:42s} {fmt(f['saturn'])} {fmt(f['llama']):>14s} {r}{extra}")
    if bound:
        pct = lambda v: f"{100 * v:.0f} %" if v is not None else "-"
        mr = bound["max_ratio_vs_llama_bench"]
        print(f"decode b1 read bound {bound['read_bound_tokens_per_s']:.1f} t/s (the read stream measured "
              f"before Saturn's run): Saturn at {pct(bound['saturn_share'])}, llama-bench at "
              f"{pct(bound['llama_share'])}, batched-bench at {pct(bound['llama_batched_share'])};"
              + (f" the bound allows at most {mr:.2f}x llama-bench" if mr else ""))
    for w in warn:
        print(f"  warning: {w}")
    sys.stdout.flush()

def cmd_summary(a):
    rounds = [json.load(open(p)) for p in a["rounds"].split(",")]
    ctx = json.load(open(a["context"]))
    keys = list(rounds[0]["figures"].keys())
    summ = {}
    print(f"\n== summary over {len(rounds)} rounds (ratio = Saturn / llama.cpp, output tokens/s)")
    print(f"{'figure':42s} {'median':>8s} {'min':>8s} {'max':>8s}   {'saturn med':>11s} {'llama med':>11s}")
    for k in keys:
        rs = [r["figures"][k]["ratio"] for r in rounds if r["figures"].get(k, {}).get("ratio") is not None]
        ss = [r["figures"][k]["saturn"] for r in rounds if r["figures"].get(k, {}).get("saturn") is not None]
        ls = [r["figures"][k]["llama"] for r in rounds if r["figures"].get(k, {}).get("llama") is not None]
        med = lambda v: statistics.median(v) if v else None
        summ[k] = {"label": rounds[0]["figures"][k]["label"], "rounds": len(rs),
                   "ratio": {"median": med(rs), "min": min(rs) if rs else None, "max": max(rs) if rs else None,
                             "per_round": [r["figures"].get(k, {}).get("ratio") for r in rounds]},
                   "saturn_tokens_per_s": {"median": med(ss), "min": min(ss) if ss else None, "max": max(ss) if ss else None},
                   "llama_tokens_per_s": {"median": med(ls), "min": min(ls) if ls else None, "max": max(ls) if ls else None}}
        inv = [r["figures"][k].get("invariance_ratio") for r in rounds
               if r["figures"].get(k, {}).get("invariance_ratio") is not None]
        if inv:
            summ[k]["invariance_ratio"] = {"median": med(inv), "min": min(inv), "max": max(inv),
                                           "per_round": [r["figures"].get(k, {}).get("invariance_ratio") for r in rounds]}
        s = summ[k]; f2 = lambda v, w=8: f"{v:{w}.2f}" if v is not None else f"{'-':>{w}s}"
        f1 = lambda v: f"{v:11.1f}" if v is not None else f"{'-':>11s}"
        print(f"{s['label']:42s} {f2(s['ratio']['median'])}x {f2(s['ratio']['min'])}x {f2(s['ratio']['max'])}x  "
              f"{f1(s['saturn_tokens_per_s']['median'])} {f1(s['llama_tokens_per_s']['median'])}")
    if any("invariance_ratio" in v for v in summ.values()):
        lab = rounds[0].get("ab_label") or "--batch_invariant=off"
        if lab == "--batch_invariant=off":
            print(f"\n== what the batch-invariant default costs (default / --batch_invariant=off, same rounds; under 1 is its cost)")
        else:
            print(f"\n== A/B: default / {lab} (B: the same saturn-bench-engine run with {lab}), same rounds")
        ctx["ab_label"] = lab
        print(f"{'figure':42s} {'median':>8s} {'min':>8s} {'max':>8s}")
        for k, v in summ.items():
            if "invariance_ratio" in v:
                ir = v["invariance_ratio"]
                print(f"{v['label']:42s} {ir['median']:8.3f} {ir['min']:8.3f} {ir['max']:8.3f}")
    bounds = [r["decode_b1_read_bound"] for r in rounds if r.get("decode_b1_read_bound")]
    if bounds:
        col = lambda key: [b[key] for b in bounds if b.get(key) is not None]
        bsum = {key: {"median": statistics.median(col(key)), "min": min(col(key)), "max": max(col(key))}
                for key in ("read_bound_tokens_per_s", "saturn_share", "llama_share", "llama_batched_share",
                            "max_ratio_vs_llama_bench") if col(key)}
        ctx["decode_b1_read_bound_summary"] = bsum
        print(f"\n== decode b1 against the read bound (the read stream measured before each Saturn run;"
              f" both engines read the same weights a token)")
        print(f"{'':42s} {'median':>8s} {'min':>8s} {'max':>8s}")
        for key, label, scale in (("read_bound_tokens_per_s", "bound, tokens/s", 1),
                                  ("saturn_share", "Saturn, % of the bound", 100),
                                  ("llama_share", "llama-bench tg, % of the bound", 100),
                                  ("llama_batched_share", "batched-bench pl=1, % of the bound", 100),
                                  ("max_ratio_vs_llama_bench", "largest Saturn / llama-bench it allows", 1)):
            if key in bsum:
                v = bsum[key]
                print(f"{label:42s} {scale * v['median']:8.2f} {scale * v['min']:8.2f} {scale * v['max']:8.2f}")
    lbuild = next((r["llama_build"] for r in rounds if r["llama_build"].get("commit")), {})
    ctx["llama_cpp"]["commit"] = ctx["llama_cpp"].get("commit") or lbuild.get("commit")
    ctx["llama_cpp"]["build_number"] = ctx["llama_cpp"].get("build_number") or lbuild.get("number")
    ctx["llama_cpp"]["model_type"] = lbuild.get("model_type")
    ctx["llama_cpp"]["cpu_info"] = lbuild.get("cpu_info")
    ctx["summary"] = summ
    ctx["rounds"] = rounds
    ctx["warnings"] = ctx.get("warnings", []) + [f"round {r['round']}: {w}" for r in rounds for w in r["warnings"]]
    print(f"\nllama.cpp: commit {ctx['llama_cpp']['commit'] or 'unknown'} (build {ctx['llama_cpp']['build_number'] or '?'}),"
          f" model type {ctx['llama_cpp']['model_type'] or '?'}")
    if a["json_out"]:
        json.dump(ctx, open(a["json_out"], "w"), indent=1)
        print(f"JSON: {a['json_out']}")

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "gguf":
        cmd_gguf(*sys.argv[2:6])
    else:
        args = dict(x.split("=", 1) for x in sys.argv[2:])
        if "load0" in args: args["load0"] = args["load0"].split()
        {"round": cmd_round, "summary": cmd_summary}[cmd](args)
PYEOF

# --- the run's context --------------------------------------------------------------------
python3 "$PY" gguf "$GGUF" "$MODEL" "$DTYPE" "$WORK/gguf.json"
CPU_MODEL=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | sed 's/^model name[[:space:]]*:[[:space:]]*//' || true)
CPU_NUM=$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo 2>/dev/null | sed 's/^model[[:space:]]*:[[:space:]]*//' || true)
LLAMA_VERSION=""
for b in "$BATCHED" "$LLAMA_BENCH"; do
  [ -n "$b" ] || continue
  v=$(timeout 20 "$b" --version 2>&1 | grep -m1 -E '^version: ' || true)
  [ -n "$v" ] && { LLAMA_VERSION=$v; break; }
done
SATURN_GIT=""
if git -C "$ROOT" rev-parse --short HEAD >/dev/null 2>&1; then
  SATURN_GIT=$(git -C "$ROOT" rev-parse --short HEAD)
  [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] && SATURN_GIT="$SATURN_GIT (+ uncommitted changes in the work tree)"
fi
SAT_BATCHES="1,$BATCHES"; [ -n "$BATCHED" ] || SAT_BATCHES=1  # nothing to set Saturn's batched rows against
SAT_BATCHES=$(echo "$SAT_BATCHES" | tr ',' '\n' | awk '!s[$0]++' | paste -sd, -)
MAXB=$(echo "$SAT_BATCHES" | tr ',' '\n' | sort -n | tail -1)
BB_CTX=$(( MAXB * (PROMPT_LEN + DECODE_TOKENS) ))
BACKEND_FLAG=(--backend=cpu)
for x in "${EXTRA[@]+"${EXTRA[@]}"}"; do case $x in --backend|--backend=*) BACKEND_FLAG=() ;; esac; done
read -r -a LARGS <<< "$LLAMA_ARGS"
SAT_CMD=("$SATURN" "${BACKEND_FLAG[@]+"${BACKEND_FLAG[@]}"}" --model="$MODEL" --dtype="$DTYPE" --threads="$THREADS"
  --batches="$SAT_BATCHES" --prompt_len="$PROMPT_LEN" --decode_tokens="$DECODE_TOKENS"
  --prefill_lens="$PREFILL_LENS" --prefill_repeats="$REPEATS" --rounds=1 "${EXTRA[@]+"${EXTRA[@]}"}")
LB_CMD=("$LLAMA_BENCH" -m "$GGUF" -t "$THREADS" -p "$PREFILL_LENS" -n "$DECODE_TOKENS" -r "$REPEATS" -o json
  "${LARGS[@]+"${LARGS[@]}"}")
BB_CMD=()
[ -n "$BATCHED" ] && BB_CMD=("$BATCHED" -m "$GGUF" -t "$THREADS" -tb "$THREADS" -c "$BB_CTX" -b 2048 -ub 512
  -npp "$PROMPT_LEN" -ntg "$DECODE_TOKENS" -npl "$SAT_BATCHES" --output-format jsonl "${LARGS[@]+"${LARGS[@]}"}")

echo "# vs_llamacpp.sh: Saturn saturn-bench-engine vs llama.cpp, $ROUNDS interleaved round(s)"
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'); CPU: ${CPU_MODEL:-unknown} (cpuinfo model ${CPU_NUM:-?}), $(nproc) cores; threads $THREADS"
echo "# Saturn: model $MODEL, dtype $DTYPE, at ${SATURN_GIT:-unknown commit}; llama.cpp: ${LLAMA_VERSION:-version not reported by --version} in $LLAMA_BIN"
echo "# GGUF: $GGUF"
echo "# saturn:  ${SAT_CMD[*]} --json=F"
echo "# llama:   ${LB_CMD[*]}"
[ -n "$BATCHED" ] && echo "# batched: ${BB_CMD[*]}" || echo "# batched: skipped (no llama-batched-bench in $LLAMA_BIN)"
if [ -n "$AB_ENV" ]; then
  case $AB_ENV in [A-Za-z_]*=*) ;; *) die "--ab_env: expected VAR=VALUE, got \"$AB_ENV\"" ;; esac
  AB_B=(env "$AB_ENV") AB_ARGS=() AB_LABEL=$AB_ENV
  if [ -n "$AB_OFF" ]; then AB_ARGS=(--batch_invariant=off) AB_LABEL="$AB_ENV --batch_invariant=off"; fi
else
  AB_B=() AB_ARGS=(--batch_invariant=off) AB_LABEL=--batch_invariant=off
fi
[ -n "$AB" ] && echo "# A/B: saturn again with $AB_LABEL beside each default run (after it in rounds 1, 2, 5, 6, ..., before it in the others)"

SAT_S=0 LB_S=0 BB_S=""
secs_since() { local d=$(( $(date +%s%N) - $1 )); printf '%d.%03d' $((d / 1000000000)) $(((d / 1000000) % 1000)); }
run_saturn() {
  local r=$1 t0; t0=$(date +%s%N)
  if ! "${TO[@]+"${TO[@]}"}" "${SAT_CMD[@]}" --json="$WORK/sat-$r.json" > "$WORK/sat-$r.log" 2>&1; then
    tail -20 "$WORK/sat-$r.log" >&2; fail "round $r: saturn-bench-engine failed (log tail above)"
  fi
  SAT_S=$(secs_since "$t0")
}
run_saturn_off() {
  local r=$1
  if ! "${TO[@]+"${TO[@]}"}" "${AB_B[@]+"${AB_B[@]}"}" "${SAT_CMD[@]}" "${AB_ARGS[@]+"${AB_ARGS[@]}"}" \
      --json="$WORK/sat-off-$r.json" > "$WORK/sat-off-$r.log" 2>&1; then
    tail -20 "$WORK/sat-off-$r.log" >&2; fail "round $r: saturn-bench-engine with $AB_LABEL failed (log tail above)"
  fi
}
run_llama() {
  local r=$1 t0; t0=$(date +%s%N)
  if ! "${TO[@]+"${TO[@]}"}" "${LB_CMD[@]}" > "$WORK/lb-$r.json" 2> "$WORK/lb-$r.err"; then
    tail -20 "$WORK/lb-$r.err" >&2; fail "round $r: llama-bench failed (stderr tail above)"
  fi
  LB_S=$(secs_since "$t0")
  if [ -n "$BATCHED" ]; then
    t0=$(date +%s%N)
    if ! "${TO[@]+"${TO[@]}"}" "${BB_CMD[@]}" > "$WORK/bb-$r.out" 2> "$WORK/bb-$r.err"; then
      tail -20 "$WORK/bb-$r.err" >&2; fail "round $r: llama-batched-bench failed (stderr tail above)"
    fi
    cat "$WORK/bb-$r.err" >> "$WORK/bb-$r.out"  # where a build logs its JSON lines to stderr
    BB_S=$(secs_since "$t0")
  fi
}

ROUND_FILES=()
for r in $(seq 1 "$ROUNDS"); do
  load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "? ? ?")
  # With --invariance_ab the default goes first in rounds 1, 2, 5, 6, ... and off in the others,
  # so each follows llama.cpp (in the even rounds) and each leads its round equally often.
  run_saturns() {
    if [ -z "$AB" ]; then run_saturn "$r"
    elif [ $(((r - 1) % 4)) -lt 2 ]; then run_saturn "$r"; run_saturn_off "$r"
    else run_saturn_off "$r"; run_saturn "$r"; fi
  }
  if [ $((r % 2)) -eq 1 ]; then first=saturn; run_saturns; run_llama "$r"
  else first=llama.cpp; run_llama "$r"; run_saturns; fi
  python3 "$PY" round round="$r" first="$first" saturn_json="$WORK/sat-$r.json" \
    llama_bench_json="$WORK/lb-$r.json" saturn_off_json="${AB:+$WORK/sat-off-$r.json}" ab_label="${AB:+$AB_LABEL}" batched_out="${BATCHED:+$WORK/bb-$r.out}" \
    batches="$SAT_BATCHES" prefill_lens="$PREFILL_LENS" decode_tokens="$DECODE_TOKENS" \
    prompt_len="$PROMPT_LEN" dtype="$DTYPE" load0="$load0" sat_s="$SAT_S" lb_s="$LB_S" bb_s="$BB_S" \
    out="$WORK/round-$r.json" || fail "round $r: could not read the engines' output (see above)"
  ROUND_FILES+=("$WORK/round-$r.json")
done

VS_DATE=$(date -u '+%Y-%m-%dT%H:%M:%SZ'); VS_NPROC=$(nproc)
export VS_DATE VS_NPROC VS_CPU="$CPU_MODEL" VS_CPU_NUM="$CPU_NUM"
export VS_THREADS=$THREADS VS_MODEL=$MODEL VS_DTYPE=$DTYPE VS_ROUNDS=$ROUNDS VS_SATURN_GIT="$SATURN_GIT"
export VS_LLAMA_BIN="$LLAMA_BIN" VS_LLAMA_VERSION="$LLAMA_VERSION" VS_BATCHED="${BATCHED:+yes}"
export VS_SAT_CMD="${SAT_CMD[*]} --json=F" VS_LB_CMD="${LB_CMD[*]}" VS_BB_CMD="${BB_CMD[*]+"${BB_CMD[*]}"}"
export VS_SETTINGS="batches=$SAT_BATCHES prompt_len=$PROMPT_LEN decode_tokens=$DECODE_TOKENS prefill_lens=$PREFILL_LENS prefill_repeats=$REPEATS"
python3 - "$WORK/gguf.json" "$WORK/context.json" <<'PYEOF'
import json, os, re, sys
e = os.environ
v = e.get("VS_LLAMA_VERSION", "")
m = re.match(r"version:\s*(\d+)\s*\(([0-9a-f]+)\)", v)
ctx = {"what": "saturn-bench-engine vs llama.cpp (bench/vs_llamacpp.sh), interleaved rounds; ratio = Saturn / llama.cpp output tokens/s",
       "date": e["VS_DATE"], "cpu_model": e["VS_CPU"], "cpuinfo_model": e["VS_CPU_NUM"], "nproc": int(e["VS_NPROC"]),
       "threads": int(e["VS_THREADS"]), "model": e["VS_MODEL"], "dtype": e["VS_DTYPE"], "rounds_requested": int(e["VS_ROUNDS"]),
       "settings": dict(x.split("=", 1) for x in e["VS_SETTINGS"].split()),
       "saturn": {"git": e["VS_SATURN_GIT"] or None, "command": e["VS_SAT_CMD"]},
       "llama_cpp": {"bin_dir": os.path.abspath(e["VS_LLAMA_BIN"]), "version_line": v or None,
                     "commit": m.group(2) if m else None, "build_number": int(m.group(1)) if m else None,
                     "llama_bench_command": e["VS_LB_CMD"],
                     "batched_bench_command": e["VS_BB_CMD"] or None,
                     "batched_decode": bool(e["VS_BATCHED"])},
       "gguf": json.load(open(sys.argv[1]))}
ctx["warnings"] = list(ctx["gguf"].get("warnings", []))
if not ctx["llama_cpp"]["batched_decode"]:
  ctx["warnings"].append("no llama-batched-bench: batched decode not compared")
json.dump(ctx, open(sys.argv[2], "w"))
PYEOF
IFS=, ; RF="${ROUND_FILES[*]}"; unset IFS
python3 "$PY" summary rounds="$RF" context="$WORK/context.json" json_out="$JSON_OUT"
