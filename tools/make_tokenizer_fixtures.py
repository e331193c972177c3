#!/usr/bin/env python3
"""Expected tokenizer outputs from Hugging Face (the oracle for tests/text/tokenizer*_test.cpp).

Usage (on a machine with transformers + tokenizers):
  TOKENIZERS_PARALLELISM=false python3 tools/make_tokenizer_fixtures.py OUTDIR TOKDIR [TOKDIR...]
TOKDIR holds tokenizer.json (+ tokenizer_config.json); its name is the folder name without a
"tokenizer-" prefix (a trailing "models" folder is skipped: .../tokenizer-qwen3/models -> qwen3).

Writes OUTDIR/<name>.jsonl per tokenizer:
  line 1: header {name, versions, class, bos/eos ids, vocab size, bench figures}
  then one line per corpus string (tests/fixtures/text/tokenizer/corpus.jsonl), fields omitted when
  equal to their default:  i; ids = tok(text)["input_ids"]; ns = tok(text, add_special_tokens=False)
  (default ids); lit = raw tokenizer with encode_special_tokens=True, no special tokens added
  (default ns); d0 = tok.decode(ids) (default text); d1 = tok.decode(ids, skip_special_tokens=True)
  (default text); raw*/rd* = the tokenizers-library result where it differs from transformers.
  then lines {"r": ids, "d0", "d1"}: decodes of random / byte-token / sliced id sequences.
and OUTDIR/synth.json: small tokenizers trained here with the pieces the three real files do not
use (Metaspace, Prepend, Strip decoder, added-token lstrip/rstrip/single_word/normalized), with
their tokenizer.json and expected encodes/decodes from the tokenizers library.
"""
import json
import os
import random
import sys
import time
import traceback

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(os.path.dirname(HERE), "tests", "fixtures", "text", "tokenizer")


def load_corpus():
    with open(os.path.join(FIX, "corpus.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def tok_name(path):
    p = os.path.abspath(path).rstrip("/")
    if os.path.basename(p) == "models":
        p = os.path.dirname(p)
    n = os.path.basename(p)
    return n[len("tokenizer-"):] if n.startswith("tokenizer-") else n


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bench(fn, texts, min_s=1.5):
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    for t in texts[:50]:
        fn(t)  # warm-up
    reps, t0 = 0, time.perf_counter()
    while True:
        for t in texts:
            fn(t)
        reps += 1
        el = time.perf_counter() - t0
        if el >= min_s:
            return round(nbytes * reps / el / 1e6, 3)


def chunks(text):
    return [p for p in text.split("\n\n") if p]


def safe(fn, *a, **k):
    try:
        return fn(*a, **k)
    except Exception as e:  # recorded, never hidden
        return {"error": f"{type(e).__name__}: {e}"}


def run_tokenizer(tokdir, outdir, corpus):
    name = tok_name(tokdir)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(tokdir)
    raw = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    raw_lit = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    raw_lit.encode_special_tokens = True
    print(f"[{name}] loaded {type(tok).__name__} in {time.time() - t0:.1f}s, len={len(tok)}", flush=True)

    bench_texts = {}
    for kind in ["prose", "code"]:
        with open(os.path.join(FIX, f"bench_{kind}.txt"), encoding="utf-8") as f:
            bench_texts[kind] = f.read()
    figures = {}
    for kind, text in bench_texts.items():
        figures[f"{kind}_raw_chunks_MBps"] = bench(lambda t: raw.encode(t, add_special_tokens=False), chunks(text))
        figures[f"{kind}_raw_whole_MBps"] = bench(lambda t: raw.encode(t, add_special_tokens=False), [text])
        figures[f"{kind}_transformers_chunks_MBps"] = bench(lambda t: tok(t, add_special_tokens=False)["input_ids"],
                                                            chunks(text))
    print(f"[{name}] bench {figures}", flush=True)

    header = {
        "name": name, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
        "python": sys.version.split()[0], "class": type(tok).__name__, "len": len(tok),
        "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
        "bos_token": tok.bos_token, "eos_token": tok.eos_token,
        "all_special_ids": sorted(set(tok.all_special_ids)), "bench": figures,
        "pipeline": safe(lambda: {k: v for k, v in json.loads(tok.backend_tokenizer.to_str()).items()
                                  if k not in ("model", "added_tokens")}),
        "bench_note": "MB/s of UTF-8 input, one thread (TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1); "
                      "chunks = each paragraph of bench_*.txt encoded separately, whole = the file as one string",
    }
    stats = {"lines": 0, "raw_diff": 0, "errors": 0}
    out_path = os.path.join(outdir, f"{name}.jsonl")
    with open(out_path, "w", encoding="utf-8", newline="\n") as out:
        out.write(json.dumps(header, ensure_ascii=False) + "\n")
        for i, text in enumerate(corpus):
            rec = {"i": i}
            try:
                ids = tok(text)["input_ids"]
                ns = tok(text, add_special_tokens=False)["input_ids"]
                rec["ids"] = ids
                if ns != ids:
                    rec["ns"] = ns
                enc = tok.encode(text)
                if enc != ids:
                    rec["enc"] = enc
                lit = raw_lit.encode(text, add_special_tokens=False).ids
                if lit != ns:
                    rec["lit"] = lit
                r_ids = raw.encode(text).ids
                r_ns = raw.encode(text, add_special_tokens=False).ids
                if r_ids != ids:
                    rec["raw"] = r_ids
                if r_ns != ns:
                    rec["raw_ns"] = r_ns
                d0 = tok.decode(ids, skip_special_tokens=False)
                d1 = tok.decode(ids, skip_special_tokens=True)
                if d0 != text:
                    rec["d0"] = d0
                if d1 != text:
                    rec["d1"] = d1
                rd0 = raw.decode(ids, skip_special_tokens=False)
                rd1 = raw.decode(ids, skip_special_tokens=True)
                if rd0 != d0:
                    rec["rd0"] = rd0
                if rd1 != d1:
                    rec["rd1"] = rd1
                if "raw" in rec or "raw_ns" in rec or "rd0" in rec or "rd1" in rec:
                    stats["raw_diff"] += 1
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {e}"
                stats["errors"] += 1
            out.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
            stats["lines"] += 1

        # Decode-only sequences: random ids, runs of single-byte tokens (split UTF-8), slices of encodings.
        r = random.Random(1234)
        n = len(tok)
        vocab = tok.get_vocab()
        b2u = bytes_to_unicode()
        byte_ids = [vocab[f"<0x{b:02X}>"] for b in range(256) if f"<0x{b:02X}>" in vocab]
        if len(byte_ids) < 256:
            byte_ids = [vocab[b2u[b]] for b in range(256) if b2u[b] in vocab]
        special = sorted(set(tok.all_special_ids))
        seqs = []
        for _ in range(150):
            seqs.append([r.randrange(n) for _ in range(r.randint(1, 16))])
        for _ in range(250):
            s = []
            for _ in range(r.randint(1, 16)):
                x = r.random()
                s.append(r.choice(byte_ids) if x < 0.6 else r.choice(special) if x < 0.7 else r.randrange(n))
            seqs.append(s)
        for _ in range(300):
            ids = tok(r.choice(corpus), add_special_tokens=r.random() < 0.5)["input_ids"]
            if ids:
                a = r.randrange(len(ids))
                b = min(len(ids), a + r.randint(1, 12))
                seqs.append(ids[a:b])
        for s in seqs:
            rec = {"r": s, "d0": safe(tok.decode, s, skip_special_tokens=False),
                   "d1": safe(tok.decode, s, skip_special_tokens=True)}
            rd0 = safe(raw.decode, s, skip_special_tokens=False)
            if rd0 != rec["d0"]:
                rec["rd0"] = rd0
            out.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"[{name}] wrote {out_path} ({os.path.getsize(out_path)} bytes) {stats} in {time.time() - t0:.1f}s",
          flush=True)


def synth_tokenizers(outdir, corpus):
    from tokenizers import AddedToken, decoders, models, normalizers, pre_tokenizers, processors, trainers

    train = corpus[:1200]
    probe = [
        "Hello world", " Hello  world ", "hello<ls> x", "a <ls>b", "a<rs> b", "a <rs>  b", "say hello there",
        "sayhello there", "hello", " hello ", "xhello", "hello!", "<n>", " <n> ", "<sp>", "x <sp> y", "x<sp>y",
        "<s> a </s>", "<s>", "</s>x", "\u00e9\u0301 \u212b", "日本語", "😀 🦀", "\x00\x01", "  ", "", " ", "▁",
        "▁▁x", "a▁b", "\n\n", "\t x", "x  ", "ﬁ ①", "HELLO", "hello-world", "<ls><rs><sp>", "é",
    ]
    cases_src = probe + corpus[::7]
    result = {"tokenizers": tokenizers.__version__, "tokenizers_list": []}

    def add_byte_tokens(tk):
        d = json.loads(tk.to_str())
        vocab = d["model"]["vocab"]
        nxt = max(vocab.values()) + 1
        for b in range(256):
            k = f"<0x{b:02X}>"
            if k not in vocab:
                vocab[k] = nxt
                nxt += 1
        return Tokenizer.from_str(json.dumps(d))

    def finish(name, tk):
        tk.add_special_tokens([AddedToken("<sp>", lstrip=True, rstrip=True, special=True, normalized=False)])
        tk.add_tokens([AddedToken("<ls>", lstrip=True, normalized=False), AddedToken("<rs>", rstrip=True, normalized=False),
                       AddedToken("hello", single_word=True, normalized=False), AddedToken("<n>", normalized=True)])
        lit = Tokenizer.from_str(tk.to_str())
        lit.encode_special_tokens = True
        cases = []
        for text in cases_src:
            c = {"text": text, "ids": tk.encode(text).ids}
            ns = tk.encode(text, add_special_tokens=False).ids
            if ns != c["ids"]:
                c["ns"] = ns
            lt = lit.encode(text, add_special_tokens=False).ids
            if lt != ns:
                c["lit"] = lt
            c["d0"] = tk.decode(c["ids"], skip_special_tokens=False)
            c["d1"] = tk.decode(c["ids"], skip_special_tokens=True)
            cases.append(c)
        r = random.Random(99)
        n = tk.get_vocab_size(with_added_tokens=True)
        for _ in range(150):
            s = [r.randrange(n) for _ in range(r.randint(1, 12))]
            cases.append({"r": s, "d0": safe(tk.decode, s, skip_special_tokens=False),
                          "d1": safe(tk.decode, s, skip_special_tokens=True)})
        result["tokenizers_list"].append({"name": name, "tokenizer": json.loads(tk.to_str()), "cases": cases})
        print(f"[synth {name}] {len(cases)} cases, vocab {n}", flush=True)

    specials = ["<unk>", "<s>", "</s>"]

    def post(tk):
        s, e = tk.token_to_id("<s>"), tk.token_to_id("</s>")
        return processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                             special_tokens=[("<s>", s), ("</s>", e)])

    builders = {}

    def metaspace(scheme):
        def build():
            tk = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
            tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=True)
            tk.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme, split=True)
            tk.train_from_iterator(train, trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                                               show_progress=False))
            tk = add_byte_tokens(tk)
            tk.post_processor = post(tk)
            return tk
        return build

    builders["metaspace_first"] = metaspace("first")
    builders["metaspace_always"] = metaspace("always")

    def spm_legacy():
        tk = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tk.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tk.pre_tokenizer = pre_tokenizers.Split(pattern="▁", behavior="merged_with_next")
        tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                        decoders.Strip(" ", 1, 0)])
        tk.train_from_iterator(train, trainers.BpeTrainer(vocab_size=700, special_tokens=specials, show_progress=False))
        tk = add_byte_tokens(tk)
        tk.post_processor = post(tk)
        return tk

    builders["spm_legacy"] = spm_legacy

    def gpt2():
        tk = Tokenizer(models.BPE())
        tk.normalizer = normalizers.NFD()
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
        tk.decoder = decoders.ByteLevel()
        tk.train_from_iterator(train, trainers.BpeTrainer(vocab_size=800, special_tokens=specials, show_progress=False,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tk.post_processor = processors.ByteLevel(trim_offsets=True)
        return tk

    builders["gpt2_prefix"] = gpt2

    for name, build in builders.items():
        try:
            finish(name, build())
        except Exception:
            print(f"[synth {name}] FAILED", flush=True)
            traceback.print_exc()
    path = os.path.join(outdir, "synth.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(result, f, ensure_ascii=False, separators=(",", ":"))
    print(f"[synth] wrote {path} ({os.path.getsize(path)} bytes)", flush=True)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, python {sys.version}",
          flush=True)
    corpus = load_corpus()
    print(f"corpus: {len(corpus)} strings", flush=True)
    failed = 0
    try:
        synth_tokenizers(outdir, corpus)
    except Exception:
        failed += 1
        traceback.print_exc()
    for d in sys.argv[2:]:
        try:
            run_tokenizer(d, outdir, corpus)
        except Exception:
            failed += 1
            print(f"FAILED on {d}", flush=True)
            traceback.print_exc()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
