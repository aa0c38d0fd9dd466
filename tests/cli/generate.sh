#!/usr/bin/env bash
# lct generate (issue 41): greedy continuations are the argmax of lct eval's full forward
# at every new token (checked through eval's answer recall on the finished document, with
# the new tokens as the answers: causal, DCA, YaRN and a mask); the same from a Hugging
# Face export; --per-line equals one prompt at a time; --continuation-tokens scores a
# given continuation as eval's full forward does (argmax count, log-likelihood); seeded
# sampling repeats itself; tokens/s is reported; bad input is one line and exit 1.
set -euo pipefail
LCT=$1
PY=/usr/bin/python3
source "$(dirname "$0")/../script_common.sh"  # $work (the current directory), MPI's settings, MPIRUN, fail, model_keys
TINY=($(model_keys 32 48 2 4 2) --data.seq_len 256 --train.threads 1)
"$LCT" train "${TINY[@]}" --train.steps 20 --train.lr 0.01 --checkpoint.dir ck > /dev/null
CK=ck/step_00000020.h5
PROMPT="The pass key is 12345. Remember it. The pass key is "
# A model whose attention is sharp and position-sensitive, so that the kernel and the RoPE
# scaling decide the tokens (20 steps of training leave predictions that barely depend on
# attention): the checkpoint's export with every weight redrawn at scale 0.4 (norms
# 1 + 0.2 N(0, 1)), written as safetensors from the format's spec.
"$LCT" export --checkpoint "$CK" --out hf > /dev/null
mkdir sharp
cp hf/config.json sharp/
$PY - hf/model.safetensors sharp/model.safetensors <<'PY'
import json, struct, sys
import numpy as np
src, dst = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = bytearray(raw[8 + n:])
rng = np.random.default_rng(3)
for name, t in header.items():
    if name == "__metadata__":
        continue
    assert t["dtype"] == "F32"
    b, e = t["data_offsets"]
    shape = t["shape"]
    w = 1 + 0.2 * rng.standard_normal(shape) if name.endswith("norm.weight") else 0.4 * rng.standard_normal(shape)
    data[b:e] = w.astype("<f4").tobytes()
open(dst, "wb").write(raw[:8 + n] + bytes(data))
PY

# greedy: the new tokens as a batch file's answers, so eval's recall is the share of new
# tokens that are the full forward's argmax given the document before them (the prompt is
# prefix_lm's prefix and shared_question's question, the new tokens its one answer: eval
# then counts every new token but the first, whose target lies across the segments)
check_greedy() {  # name new-tokens overrides...
  local name=$1 n=$2 answers=$2
  shift 2
  [[ " $* " == *" shared_question "* ]] && answers=$((n - 1))
  "$LCT" generate --checkpoint sharp --prompt "$PROMPT" --max-new-tokens "$n" --json --threads 1 "$@" \
    > "gen_$name.json" 2> "gen_$name.err"
  grep -qE "generate: [0-9]+ prompt tokens in [0-9.]+ s \([0-9.]+ tokens/s\) \| $n new tokens in [0-9.]+ s \([0-9.]+ tokens/s\)" \
    "gen_$name.err" || { cat "gen_$name.err"; fail "$name: no tokens/s line"; }
  $PY - "gen_$name.json" "batch_$name.h5" "$PROMPT" "$n" <<'PY'
import json, sys, h5py, numpy as np
out, path, prompt, n = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
j = json.loads(open(out).read())
assert j["prompt_tokens"] == len(prompt) and j["new_tokens"] == n and len(j["tokens"]) == n, j
assert all(0 <= t < 256 for t in j["tokens"])
doc = list(prompt) + j["tokens"]
mask = np.zeros(len(doc), np.int32)
mask[len(prompt) - 1:len(doc) - 1] = 1  # rows whose next token is a new one
with h5py.File(path, "w") as f:
    f["tokens"] = np.array(doc, np.int32)
    f["cu_seqlens"] = np.array([0, len(doc)], np.int32)
    f["answer_mask"] = mask
    f["prefix_lens"] = np.array([len(prompt)], np.int32)
    f["segment_ids"] = np.array([0] * len(prompt) + [1] * n, np.int32)
PY
  local e
  e=$("$LCT" eval --checkpoint sharp --batch-file "batch_$name.h5" --threads 1 "$@")
  echo "$e" | grep -q "recall 1.0000 ($answers of $answers answers)" || fail "$name: greedy tokens are not eval's argmax: $e"
  echo "ok   $name: $n greedy tokens = the full forward's argmax ($(grep -oE '[0-9.]+ tokens/s\)' "gen_$name.err" | tail -1 | tr -d ')') new)"
}
check_greedy causal 40
check_greedy dca 60 --attention.kernel dca --attention.dca_chunk_size 24 --attention.dca_local_size 6
check_greedy yarn 40 --model.rope_scaling yarn --model.rope_scaling_factor 4 --model.rope_original_length 32
check_greedy prefix_lm 30 --attention.mask prefix_lm
check_greedy shared_question 30 --attention.mask shared_question
# --continuation-tokens (issue 53): beside the generation, each prompt's given
# continuation is scored by teacher forcing from the same prompt forward. The greedy
# tokens score as greedy (every token the argmax); the same with its 3rd token changed
# does not; each continuation's argmax count is lct eval's answer recall on the same
# document, and its log-likelihood minus the sum of eval's per-position losses over the
# continuation's rows (--position-bin 1), to 1e-3 nats a token (the arithmetic differs by
# fp32 summation order, ~1e-5 relative a row: generate_test's ScoresAContinuation bounds
# it; a row off by one would differ by nats), over the same targets: the rows eval
# trains (continuation_targets; under shared_question every token but the first, whose
# target lies across the question and the answer: issue 87, 340.43 against 327.21 nats)
check_continuation() {  # name overrides...
  local name=$1
  shift
  $PY - "gen_$name.json" "$PROMPT" <<'PY'
import json, sys, h5py, numpy as np
j, prompt = json.load(open(sys.argv[1])), list(sys.argv[2].encode())
greedy = j["tokens"]
changed = list(greedy)
changed[2] = (changed[2] + 1) % 256
open("cont.prompts", "w").write((" ".join(map(str, prompt)) + "\n") * 2)
open("cont.ids", "w").write(" ".join(map(str, greedy)) + "\n" + " ".join(map(str, changed)) + "\n")
for i, cont in enumerate((greedy, changed)):
    doc = prompt + cont
    mask = np.zeros(len(doc), np.int32)
    mask[len(prompt) - 1:len(doc) - 1] = 1
    with h5py.File(f"cont{i}.h5", "w") as f:
        f["tokens"] = np.array(doc, np.int32)
        f["cu_seqlens"] = np.array([0, len(doc)], np.int32)
        f["answer_mask"] = mask
        f["prefix_lens"] = np.array([len(prompt)], np.int32)
        f["segment_ids"] = np.array([0] * len(prompt) + [1] * len(cont), np.int32)
PY
  "$LCT" generate --checkpoint sharp --prompt-tokens cont.prompts --continuation-tokens cont.ids --per-line --json \
    --threads 1 "$@" > cont.json 2> cont.err || { cat cont.err; fail "$name: --continuation-tokens"; }
  grep -q "continuations: 1 of 2 the greedy choice" cont.err || { cat cont.err; fail "$name: the continuations' summary"; }
  for i in 0 1; do
    "$LCT" eval --checkpoint sharp --batch-file "cont$i.h5" --threads 1 --per-position-out "pos$i.csv" \
      --position-bin 1 "$@" > "eval$i.txt"
  done
  $PY - "gen_$name.json" "$PROMPT" <<'PY' || fail "$name: continuation scores"
import csv, json, re, sys
gen, prompt = json.load(open(sys.argv[1])), sys.argv[2].encode()
lines = [json.loads(l) for l in open("cont.json")]
n, P = len(gen["tokens"]), len(prompt)
assert len(lines) == 2 and all(l["tokens"] == gen["tokens"] for l in lines), "the generation changed"
targets = lines[0]["continuation_targets"]
assert lines[0]["continuation_greedy"] is True and lines[0]["continuation_argmax"] == targets, lines[0]
assert lines[1]["continuation_greedy"] is False and lines[1]["continuation_argmax"] < targets, lines[1]
for i, l in enumerate(lines):
    assert l["continuation_tokens"] == n
    text = open(f"eval{i}.txt").read()
    right, answers = map(int, re.search(r"recall \S+ \((\d+) of (\d+) answers\)", text).groups())
    assert right == l["continuation_argmax"], (i, right, l["continuation_argmax"])
    # eval's rows over the continuation: the positions it has targets at, their losses
    rows = [r for r in csv.DictReader(open(f"pos{i}.csv"))
            if P - 1 <= int(r["position_begin"]) < P - 1 + n and int(r["targets"]) > 0]
    assert answers == len(rows) == l["continuation_targets"], (i, answers, len(rows), l["continuation_targets"])
    loss = sum(float(r["mean_loss"]) for r in rows)
    assert abs(-l["continuation_log_likelihood"] - loss) <= 1e-3 * n, (i, l["continuation_log_likelihood"], loss)
print(f"ok   continuation scores = eval's argmax count and answer-row losses ({n} tokens, {targets} targets, "
      f"{lines[1]['continuation_argmax']} of them the argmax after a changed 3rd token)")
PY
}
check_continuation causal
# the same continuation as text (--continuation-file, one prompt) scores the same
$PY -c "import json,sys; sys.stdout.buffer.write(bytes(json.load(open('gen_causal.json'))['tokens']))" > cont.txt
"$LCT" generate --checkpoint sharp --prompt "$PROMPT" --continuation-file cont.txt --json --threads 1 > cont_text.json \
  2> /dev/null
$PY -c "import json,sys; a=json.load(open('cont_text.json')); b=json.loads(open('cont.json').readline()); \
sys.exit(a['continuation_log_likelihood'] != b['continuation_log_likelihood'] or not a['continuation_greedy'])" \
  || fail "--continuation-file scores otherwise than the same tokens given as ids"
check_continuation dca --attention.kernel dca --attention.dca_chunk_size 24 --attention.dca_local_size 6
check_continuation prefix_lm --attention.mask prefix_lm
check_continuation shared_question --attention.mask shared_question
# the overrides decide the tokens (DCA's chunks and YaRN's scaling are in force)
tokens_of() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))['tokens'][:40])" "gen_$1.json"; }
[[ $(tokens_of dca) != "$(tokens_of causal)" ]] || fail "DCA and causal attention wrote the same 40 tokens"
[[ $(tokens_of yarn) != "$(tokens_of causal)" ]] || fail "YaRN and plain RoPE wrote the same 40 tokens"

# the trained model from here on
"$LCT" generate --checkpoint "$CK" --prompt "$PROMPT" --max-new-tokens 40 --json 2> /dev/null > gen_ck.json

# text out: the continuation and a line break, nothing else on stdout
"$LCT" generate --checkpoint "$CK" --prompt "$PROMPT" --max-new-tokens 16 > text.out 2> /dev/null
[[ $(stat -c %s text.out) == 17 ]] || fail "text output is $(stat -c %s text.out) bytes, not 16 and a line break"
$PY -c "import json,sys; j=json.load(open('gen_ck.json')); sys.exit(0 if bytes(j['tokens'][:16]) + b'\n' == open('text.out','rb').read() else 1)" \
  || fail "the text output differs from the --json tokens"

# a Hugging Face export generates the same; --per-line is one prompt at a time; --ids
"$LCT" generate --checkpoint hf --prompt "$PROMPT" --max-new-tokens 40 --json 2> /dev/null > gen_hf.json
$PY -c "import json,sys; a=json.load(open('gen_hf.json')); b=json.load(open('gen_ck.json')); sys.exit(a['tokens'] != b['tokens'])" \
  || fail "the export generates other tokens than its checkpoint"
printf '%s\nabc\n' "$PROMPT" > prompts.txt
"$LCT" generate --checkpoint "$CK" --prompt-file prompts.txt --per-line --max-new-tokens 40 --ids > lines.out 2> lines.err
[[ $(wc -l < lines.out) == 2 ]] || fail "--per-line: $(wc -l < lines.out) output lines for 2 prompts"
grep -q "2 prompts, 55 prompt tokens" lines.err || { cat lines.err; fail "--per-line's summary"; }
first=$($PY -c "import json; print(' '.join(map(str, json.load(open('gen_ck.json'))['tokens'])))")
[[ $(head -1 lines.out) == "$first" ]] || fail "--per-line's first prompt differs from the same prompt alone"
printf 'abc' | od -An -tu1 | tr -s ' ' '\n' | grep -v '^$' > abc.ids
"$LCT" generate --checkpoint "$CK" --prompt-tokens abc.ids --max-new-tokens 40 --ids > abc.out 2> /dev/null
[[ $(cat abc.out) == "$(sed -n 2p lines.out)" ]] || fail "--prompt-tokens and the same bytes as text differ"

# seeded sampling repeats itself; another seed gives another continuation
sample() { "$LCT" generate --checkpoint "$CK" --prompt "$PROMPT" --max-new-tokens 48 --temperature 1.2 --top-k 40 --seed "$1" --ids 2> /dev/null; }
a=$(sample 5)
b=$(sample 5)
c=$(sample 6)
[[ $a == "$b" ]] || fail "the same seed gave two continuations"
[[ $a != "$c" ]] || fail "seeds 5 and 6 gave the same 48 tokens"
echo "ok   sampling: seed 5 twice alike, seed 6 another"

# bad input: one line on stderr, exit 1
expect_error() {  # expected-substring lct-args...
  local want=$1
  shift
  set +e
  "$LCT" "$@" > err.out 2> err.txt
  local rc=$?
  set -e
  [[ $rc == 1 ]] || { cat err.txt; fail "exit $rc, not 1: lct $*"; }
  [[ $(wc -l < err.txt) == 1 ]] || { cat err.txt; fail "not one line: lct $*"; }
  grep -qF -- "$want" err.txt || { cat err.txt; fail "'$want' not in the error of lct $*"; }
}
G=(generate --checkpoint "$CK")
printf '1 2 256\n' > oov.ids
expect_error "oov.ids: the 3rd token '256' is outside the model's vocabulary [0, 256)" "${G[@]}" --prompt-tokens oov.ids
printf '1 x2 3\n' > nan.ids
expect_error "nan.ids: the 2nd token 'x2' is not an integer" "${G[@]}" --prompt-tokens nan.ids
printf '1 -4\n' > neg.ids
expect_error "the 2nd token '-4' is outside the model's vocabulary" "${G[@]}" --prompt-tokens neg.ids
expect_error "--prompt: empty value" "${G[@]}" --prompt ""
: > empty.txt
expect_error "--prompt-file empty.txt: an empty prompt" "${G[@]}" --prompt-file empty.txt
printf 'a\n\nb\n' > gap.txt
expect_error "--prompt-file gap.txt: line 2: an empty prompt" "${G[@]}" --prompt-file gap.txt --per-line
expect_error "give exactly one of --prompt, --prompt-file and --prompt-tokens" "${G[@]}" --prompt a --prompt-tokens oov.ids
expect_error "give exactly one of" "${G[@]}"
expect_error "--temperature: must be >= 0, got -1" "${G[@]}" --prompt a --temperature -1
expect_error "--top-k: must be > 0, got 0" "${G[@]}" --prompt a --top-k 0
expect_error "--max-new-tokens: must be > 0, got 0" "${G[@]}" --prompt a --max-new-tokens 0
expect_error "not enough memory: lct generate of 1 prompt and 2000000000 new tokens needs about" \
  "${G[@]}" --prompt a --max-new-tokens 2000000000
expect_error "more than a document can hold" "${G[@]}" --prompt a --max-new-tokens 3000000000
# issue 54 cause 5: every integer read whole, its range checked, nothing wraps
printf '1 2\0003 4\n' > nul.ids  # a NUL inside the 2nd token: not an integer, printed escaped
expect_error "nul.ids: the 2nd token '2\\x003' is not an integer" "${G[@]}" --prompt-tokens nul.ids
printf '1 9223372036854775808\n' > big.ids
expect_error "the 2nd token '9223372036854775808' is outside the model's vocabulary [0, 256)" "${G[@]}" --prompt-tokens big.ids
printf '1 +5\n' > plus.ids
expect_error "the 2nd token '+5' is not an integer" "${G[@]}" --prompt-tokens plus.ids
expect_error "more than a document can hold" "${G[@]}" --prompt a --max-new-tokens 9223372036854775807
expect_error "--seed must be an integer in [0, 18446744073709551615], got '-1'" "${G[@]}" --prompt a --seed=-1
expect_error "--seed must be an integer in [0, 18446744073709551615], got '18446744073709551616'" \
  "${G[@]}" --prompt a --seed 18446744073709551616
expect_error "--seed must be an integer in [0, 18446744073709551615], got '7x'" "${G[@]}" --prompt a --seed 7x
expect_error "no_such.txt" "${G[@]}" --prompt-file no_such.txt
expect_error "attention.dca_local_size" "${G[@]}" --prompt a --attention.kernel dca --attention.dca_chunk_size 8 --attention.dca_local_size 8
printf '1 2\n' > two.ids
printf '3 4\n5\n' > cont2.ids
printf '3 4\n\n' > contgap.ids
expect_error "--continuation-tokens cont2.ids: the scores are fields of --json's lines (add --json)" \
  "${G[@]}" --prompt-tokens two.ids --continuation-tokens cont2.ids
expect_error "--continuation-tokens cont2.ids: each prompt generates as many tokens as its continuation has" \
  "${G[@]}" --prompt-tokens two.ids --continuation-tokens cont2.ids --json --max-new-tokens 4
expect_error "--continuation-tokens cont2.ids: 2 continuations for 1 prompt (one a prompt)" \
  "${G[@]}" --prompt-tokens two.ids --continuation-tokens cont2.ids --json --per-line
expect_error "--continuation-tokens contgap.ids: line 2: an empty continuation" \
  "${G[@]}" --prompt-tokens cont2.ids --continuation-tokens contgap.ids --json --per-line
expect_error "--continuation-tokens oov.ids: the 3rd token '256' is outside the model's vocabulary" \
  "${G[@]}" --prompt-tokens two.ids --continuation-tokens oov.ids --json
expect_error "give one of --continuation-file and --continuation-tokens" \
  "${G[@]}" --prompt-tokens two.ids --continuation-tokens two.ids --continuation-file empty.txt --json
expect_error "--continuation-file empty.txt: an empty continuation" \
  "${G[@]}" --prompt-tokens two.ids --continuation-file empty.txt --json
"$LCT" train "${TINY[@]}" --model.vocab_size 300 --train.steps 1 --checkpoint.dir ck300 > /dev/null
expect_error "--prompt: text is lct's byte-level vocabulary of 256 tokens, but ck300/step_00000001.h5 has a vocabulary of 300" \
  generate --checkpoint ck300/step_00000001.h5 --prompt a
expect_error "--continuation-file two.ids: text is lct's byte-level vocabulary of 256 tokens, but ck300/step_00000001.h5 has a vocabulary of 300 (give token ids with --continuation-tokens)" \
  generate --checkpoint ck300/step_00000001.h5 --prompt-tokens two.ids --continuation-file two.ids --json
printf '299 0 1' > v300.ids
"$LCT" generate --checkpoint ck300/step_00000001.h5 --prompt-tokens v300.ids --max-new-tokens 5 > v300.out 2> /dev/null
[[ $(wc -w < v300.out) == 5 ]] || fail "a 300-token vocabulary prints ids: $(cat v300.out)"
echo "ok   errors: one line and exit 1 each; a non-byte vocabulary reads and prints ids"
# fuzz of generate's inputs (issue 54): token files of random bytes, of random integers
# (negative, beyond the vocabulary and int64, with signs, NULs and separators), and random
# --seed and --max-new-tokens texts: each run exits 0 with tokens or 1 with one line,
# never another code (a crash, an abort, a wrapped value's bad_alloc)
fuzzed=0
for trial in $(seq 60); do
  case $((trial % 3)) in
    0) head -c $((1 + RANDOM % 48)) /dev/urandom > fz.ids ;;
    1) /usr/bin/python3 -c "
import random, sys
r = random.Random($trial)
items = [r.choice(['0', '255', '256', '-1', '+3', '9223372036854775808', '18446744073709551616', '1e3', '0x10',
                   '7' * r.randint(1, 30), '3\0' + '4', ' ', ',', '\n', '\t', str(r.randint(-300, 300))])
         for _ in range(r.randint(1, 12))]
sys.stdout.write(' '.join(items))" > fz.ids ;;
    *) printf '%s' "$((RANDOM % 256)) $((RANDOM % 256))" > fz.ids ;;
  esac
  seed=$(printf '%s' "$RANDOM$RANDOM" | head -c $((1 + RANDOM % 24)))
  [[ $((trial % 4)) -eq 0 ]] && seed="-$seed"
  new=$(( RANDOM % 3 == 0 ? RANDOM % 300 : 1 + RANDOM % 4 ))
  rc=0
  "$LCT" generate --checkpoint "$CK" --prompt-tokens fz.ids --max-new-tokens "$new" --seed="$seed" --temperature 1 \
    --threads 1 > fz.out 2> fz.err || rc=$?
  if [[ $rc -eq 1 ]]; then
    [[ $(grep -v '^lct: warning: OpenBLAS runs its' fz.err | grep -c .) == 1 ]] || { cat fz.err; fail "fuzz $trial: exit 1 without one line"; }
  elif [[ $rc -ne 0 ]]; then
    cat fz.err; od -c fz.ids | head -3; fail "fuzz $trial: exit $rc (seed '$seed', --max-new-tokens $new)"
  fi
  fuzzed=$((fuzzed + 1))
done
echo "ok   fuzz: $fuzzed runs of random token files, seeds and lengths, each exit 0 or one line and exit 1"
# a long generation's heartbeat (--heartbeat-s, issue 57): progress lines on stderr,
# stdout (the tokens) as without them; none with 0
"$LCT" generate --checkpoint "$CK" --prompt "$PROMPT" --max-new-tokens 3000 --ids --heartbeat-s 0.01 --threads 1 \
  > beat.out 2> beat.err || { cat beat.err; fail "generate with a heartbeat"; }
"$LCT" generate --checkpoint "$CK" --prompt "$PROMPT" --max-new-tokens 3000 --ids --heartbeat-s 0 --threads 1 \
  > quiet.out 2> quiet.err || { cat quiet.err; fail "generate without a heartbeat"; }
cmp -s beat.out quiet.out || fail "the heartbeat changed the generated tokens"
line='^generate: (decoding|the prompt.s forward) \| [0-9]+ of 3000 new tokens \([0-9]+%\) \| [0-9.]+ (s|min|h) in(, about [0-9.]+ (s|min|h) to go)?$'
[[ $(grep -cE "$line" beat.err) -ge 1 && $(grep -c '^generate: .* new tokens (' quiet.err) -eq 0 ]] \
  || { cat beat.err quiet.err; fail "generate heartbeat lines"; }
echo "ok   generate heartbeat: $(grep -cE "$line" beat.err) lines on stderr, the same tokens as without"
# issue 87 finding 8: generate's memory estimate counts what scoring a continuation holds:
# the teacher-forced append's rows (the residual stream, queries, attention output, LSE
# and positions: 6 KiB a token at width 512, 12 KiB at 1024) and a row of logits each,
# where only the prompt's rows were counted (9,771 bytes a token at width 1024, 22,100
# used). The estimate on stderr (what the process will hold, checked before anything is
# allocated) bounds the peak RSS /usr/bin/time measures, at a 2,000- and a 10,000-token
# continuation, and grows with the continuation as the peak does (within 3 % below, 25 %
# above). One layer of width 512 with a 64-key sliding window decodes 10,000 tokens in
# seconds. (AddressSanitizer's shadow memory changes the RSS: not in the sanitizer build.)
if [[ -z ${LCT_SANITIZED:-} ]]; then
  "$LCT" train $(model_keys 512 32 1 8 1) --data.seq_len 64 --train.steps 1 --train.threads 1 --checkpoint.dir wide \
    > /dev/null || fail "train a 512-wide model"
  for n in 2000 10000; do
    $PY -c "import random; r = random.Random($n); print(' '.join(str(r.randrange(256)) for _ in range($n)))" > "wide$n.ids"
    /usr/bin/time -f "peak %M" -o "wide$n.peak" "$LCT" generate --checkpoint wide/step_00000001.h5 --prompt "$PROMPT" \
      --continuation-tokens "wide$n.ids" --json --threads 1 --attention.mask sliding_window --attention.window 64 \
      > "wide$n.json" 2> "wide$n.err" || { cat "wide$n.err"; fail "generate with a $n-token continuation"; }
  done
  $PY - <<'PY' || fail "generate's memory estimate of a scored continuation"
import re
def figures(n):
    err = open(f"wide{n}.err").read()
    m = re.search(r"\| memory ([0-9.]+) (MiB|GiB) estimated, ", err)
    assert m, f"no memory estimate on stderr: {err}"
    estimate = float(m[1]) * (1024 if m[2] == "GiB" else 1)
    peak = int(re.search(r"^peak ([0-9]+)$", open(f"wide{n}.peak").read(), re.M)[1]) / 1024
    return estimate, peak
(e1, p1), (e2, p2) = figures(2000), figures(10000)
per_e, per_p = (e2 - e1) * 1024 / 8000, (p2 - p1) * 1024 / 8000  # KiB a token of the continuation
ok = e1 >= p1 and e2 >= p2 and 0.97 * per_p <= per_e <= 1.25 * per_p
print(f"{'ok  ' if ok else 'FAIL'} generate's estimate of a scored continuation: {e1:.1f} and {e2:.1f} MiB estimated, "
      f"{p1:.1f} and {p2:.1f} MiB peak (2,000 and 10,000 tokens): {per_e:.2f} KiB a token estimated, {per_p:.2f} used")
assert ok
PY
fi
echo "generate: all checks passed"
