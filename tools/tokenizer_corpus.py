#!/usr/bin/env python3
"""Deterministic tokenizer test corpus and benchmark texts.

Writes, into OUTDIR (default tests/fixtures/text/tokenizer):
  corpus.jsonl      one JSON string per line (>= 2,000 strings, all valid Unicode scalar values)
  bench_prose.txt   ~256 KB of generated English prose (encode-speed benchmark)
  bench_code.txt    ~128 KB of code (this repository's own C++ sources, plus generated Python)
Everything is generated from a fixed seed, so re-running reproduces the files byte for byte.
"""
import json
import os
import random
import sys

SEED = 20240601

WORDS = """the of and to in is was he for it with as his on be at by had are but from or have an they
which one you were her all she there would their we him been has when who will more no if out so said
what up its about into than them can only other new some could time these two may then do first any my
now such like our over man me even most made after also did many before must through back years where
much your way well down should because each just those people how too little state good very make world
still own see men work long get here between both life being under never day same another know while
last might us great old year off come since against go came right used take three states himself few
house use during without again place american around however home small found thought went say part
once general high upon school every don does got united left number course war until always away
something fact though water less public put think almost hand enough far took head yet government
system better set told nothing night end why called didn eyes find going look asked later knew point
next program city business give group toward young days let room president side social given present
several order national possible rather second face per among form important often things looked early
white case john become large big need four within felt children along saw best church ever least power
development light thing seemed family interest want members mind country area others done turned
although open god service certain kind problem began different door thus help sense means whole matter
perhaps itself york times law human line above name example action company hands local show whether
five history gave today either act feet across taken past quite anything seen having death week
experience body word half really field am car words already themselves information tell together
college shall money period held keep sure probably free seems real behind cannot miss political air
question making office brought whose special major heard problems federal became study ago moment
available known result street economic boy position reason change south board individual job areas
society west close turn love community true court force full seem art am model kernel tensor token
engine server memory cache latency throughput streaming request response batch sequence attention
""".split()

NAMES = ["Alice", "Bob", "Carol", "Dave", "Eve", "Mallory", "Trent", "Zoë", "José", "Ångström", "McDonald",
         "O'Brien", "D'Angelo", "Nguyễn", "Müller", "Łukasz", "Søren", "Renée", "François", "Björk"]

CONTRACTIONS = ["don't", "can't", "won't", "it's", "I'm", "you're", "they've", "we'll", "she'd", "he's",
                "DON'T", "IT'S", "I'M", "YOU'RE", "THEY'VE", "WE'LL", "SHE'D", "isn't", "wasn't", "Let's",
                "o'clock", "rock'n'roll", "'tis", "y'all", "ma'am", "Bob's", "JAMES'S", "The '90s"]


def sentence(r, n_min=4, n_max=24):
    n = r.randint(n_min, n_max)
    words = []
    for i in range(n):
        x = r.random()
        if x < 0.05:
            w = r.choice(NAMES)
        elif x < 0.09:
            w = r.choice(CONTRACTIONS)
        elif x < 0.11:
            w = str(r.choice([r.randint(0, 100), r.randint(1900, 2030), r.randint(0, 10**6)]))
        else:
            w = r.choice(WORDS[: r.choice([80, 300, len(WORDS)])])
            y = r.random()
            if y < 0.06:
                w += "s"
            elif y < 0.09:
                w += "ing"
            elif y < 0.11:
                w += "ed"
            elif y < 0.12:
                w += "ly"
        if i == 0:
            w = w[:1].upper() + w[1:]
        words.append(w)
        if i < n - 1 and r.random() < 0.08:
            words[-1] += r.choice([",", ",", ";", ":", " —", " -"])
    s = " ".join(words)
    if r.random() < 0.08:
        s = '"' + s + '"'
    if r.random() < 0.05:
        s = "(" + s + ")"
    return s + r.choice([".", ".", ".", ".", "?", "!", "...", "?!", "…"])


def paragraph(r, n_min=2, n_max=8):
    return " ".join(sentence(r) for _ in range(r.randint(n_min, n_max)))


def ident(r):
    parts = [r.choice(WORDS[:200]) for _ in range(r.randint(1, 3))]
    style = r.randrange(4)
    if style == 0:
        return "_".join(parts)
    if style == 1:
        return parts[0] + "".join(p.capitalize() for p in parts[1:])
    if style == 2:
        return "".join(p.capitalize() for p in parts)
    return "_".join(parts).upper()


def code_python(r):
    f, a, b = ident(r), ident(r), ident(r)
    ind = r.choice(["    ", "  ", "\t"])
    return (f"def {f}({a}, {b}=None):\n{ind}\"\"\"{sentence(r, 3, 10)}\"\"\"\n"
            f"{ind}if {b} is None:\n{ind}{ind}{b} = [{r.randint(0, 99)}, {r.random():.4f}, 0x{r.randrange(1 << 32):08x}]\n"
            f"{ind}for i, x in enumerate({a}):\n{ind}{ind}{b}.append(x ** 2 + i)  # {sentence(r, 2, 6)}\n"
            f"{ind}return {{'{a}': {a}, \"n\": len({b})}}\n")


def code_cpp(r):
    f, a, t = ident(r), ident(r), r.choice(["int", "float", "std::string", "std::vector<int32_t>", "auto"])
    return (f"// {sentence(r, 3, 10)}\ntemplate <typename T>\nstatic {t} {f}(const T& {a}, size_t n) {{\n"
            f"  for (size_t i = 0; i < n; ++i) {{\n    if ({a}[i] != {r.randint(0, 9)}) return {a}[i] << 2;\n  }}\n"
            f"  return {t}{{}};  /* {r.choice(WORDS)} */\n}}\n")


def code_js(r):
    f, a = ident(r), ident(r)
    return (f"export async function {f}({a}) {{\n  const res = await fetch(`/api/${{{a}}}?q=${r.randint(1, 999)}`);\n"
            f"  if (!res.ok) throw new Error('{sentence(r, 2, 6)}');\n  return (await res.json()).map((x) => x?.id ?? null);\n}}\n")


def code_rust(r):
    f, a = ident(r).lower(), ident(r).lower()
    return (f"fn {f}<'a>({a}: &'a [u8]) -> Result<Vec<u32>, Box<dyn std::error::Error>> {{\n"
            f"    let mut out = Vec::with_capacity({a}.len());\n    for &b in {a}.iter() {{ out.push(b as u32 * {r.randint(2, 9)}); }}\n"
            f"    println!(\"{{:?}} {sentence(r, 2, 5)}\", out);\n    Ok(out)\n}}\n")


def code_go(r):
    f, a = ident(r).capitalize(), ident(r).lower()
    return (f"func {f}({a} []string) (map[string]int, error) {{\n\tm := make(map[string]int)\n"
            f"\tfor _, s := range {a} {{\n\t\tm[s]++\n\t}}\n\tif len(m) == 0 {{\n\t\treturn nil, fmt.Errorf(\"empty: %d\", {r.randint(0, 99)})\n\t}}\n\treturn m, nil\n}}\n")


def code_sql(r):
    t, c = ident(r).lower(), ident(r).lower()
    return (f"SELECT {c}, COUNT(*) AS n FROM {t}\nWHERE {c} LIKE '%{r.choice(WORDS)}%' AND id > {r.randint(0, 10**5)}\n"
            f"GROUP BY {c}\r\nORDER BY n DESC LIMIT {r.randint(1, 100)};")


def code_shell(r):
    return (f"#!/usr/bin/env bash\nset -euo pipefail\nfor f in \"$@\"; do\n  grep -n '{r.choice(WORDS)}' \"$f\" | awk -F: '{{print $1}}' >> /tmp/{ident(r)}.log\ndone\n"
            f"echo \"done: ${{#}} files\" && exit {r.randint(0, 3)}\n")


def code_html(r):
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>{sentence(r, 2, 5)}</title></head>\n"
            f"<body>\n  <div class=\"{ident(r)}\" id='{ident(r)}'>&nbsp;&lt;{r.choice(WORDS)}&gt; &amp; {paragraph(r, 1, 2)}</div>\n</body>\n</html>")


CODE = [code_python, code_cpp, code_js, code_rust, code_go, code_sql, code_shell, code_html]


def json_value(r, depth=0):
    x = r.random()
    if depth > 3 or x < 0.3:
        return r.choice([r.randint(-10**9, 10**9), round(r.uniform(-1e3, 1e3), r.randint(0, 8)), True, False, None,
                         r.choice(WORDS), sentence(r, 1, 5), "ünïcødé ✓", "中文", "\t\n"])
    if x < 0.65:
        return {ident(r): json_value(r, depth + 1) for _ in range(r.randint(0, 5))}
    return [json_value(r, depth + 1) for _ in range(r.randint(0, 5))]


CJK_ZH = ["我们今天去公园散步，天气非常好。", "人工智能正在改变世界的许多方面。", "这个模型的推理速度很快，但是内存占用较大。",
          "请问您需要什么帮助？", "《红楼梦》是中国古典小说的巅峰之作。", "数据：１２３４５，温度３７.５℃。"]
CJK_JA = ["今日はいい天気ですね。散歩に行きましょう！", "トークナイザーのテストを書いています。", "ひらがなとカタカナと漢字が混ざった文章。",
          "ｶﾀｶﾅ半角とカタカナ全角。", "東京タワーは３３３メートルです。"]
CJK_KO = ["안녕하세요, 만나서 반갑습니다.", "한국어 텍스트 토큰화 테스트입니다.", "오늘 날씨가 정말 좋네요!"]
OTHER = ["مرحبا بالعالم، كيف حالك اليوم؟", "اللغة العربية جميلة جداً ١٢٣٤٥٦٧٨٩٠", "नमस्ते दुनिया, आप कैसे हैं?",
         "हिन्दी भाषा में परीक्षण: क्षत्रिय, ज्ञान, श्री", "Привет, мир! Как дела?", "Γειά σου Κόσμε! Αλφάβητο: αβγδεζηθ",
         "שלום עולם, מה שלומך?", "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ", "Xin chào thế giới! Tiếng Việt có dấu.",
         "Здравствуйте! Ёлка, щука, объём.", "ქართული ენა", "Հայերեն", "አማርኛ ቋንቋ", "தமிழ் மொழி", "বাংলা ভাষা",
         "Türkçe: ığüşöçİ", "Polski: zażółć gęślą jaźń", "Deutsch: Straße, Größe, Fuß — ẞ", "Español: ¿Qué tal? ¡Hola!"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "❤️", "1️⃣", "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "🫠", "🦀", "✨", "☕", "🐍",
         "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👁️‍🗨️", "🤷‍♀️", "©️", "™", "🔥🔥🔥", "🙏🏻"]
COMBINING = ["e\u0301", "a\u0308\u0304", "n\u0303", "A\u030a", "\u212b", "\u2126", "\u1100\u1161\u11a8",
             "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034d",
             "\uf900\uf901\ufa10", "\u0041\u030a\u0301", "\u00c5\u0301", "o\u0328\u0304", "\u0915\u093c", "\u30ab\u3099",
             "\u1e9b\u0323", "q\u0307\u0323", "\ufb01", "\u2460", "\u00bd", "\u2075", "\u01c4", "\u0130", "\u03d3"]
SPECIAL_TEXT = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
                "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_5|>",
                "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<unused0>",
                "<unused42>", "<start_of_image>", "<image_soft_token>", "<|vision_start|>", "<|image_pad|>",
                "<tool_call>", "</tool_call>", "<think>", "</think>", "<|fim_prefix|>", "<|im_start", "im_end|>",
                "<|im_start|", "< |im_end|>", "<<|im_end|>>", "<0x41>", "<0xE3>", "[multimodal]"]
WS = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \t \n",
      "\u00a0", "\u3000", "\u2009", "\u200b", "\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u180e", "\u202f",
      "\u205f", "\u1680", "\ufeff"]
ODD = ["\ufffd", "\ufffe", "\uffff", "\ufdd0", "\U0010ffff", "\U0010fffd", "\x00", "\ufeff", "\x01\x02\x1f", "\x7f",
       "\x80\x85\x9f", "\ue000", "\U000f0000", "\U0001d11e", "\U0001f600", "\u0000\u0000", "\U000e0041", "\u00ad",
       "\u200d", "\u200c", "\u2060", "\U00020000", "\U0002a6d6", "\U0001fbf9", "\u0378", "\U000e01ef"]
NUMBERS = ["0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159265358979", "-0.000001", "1e-10", "6.022e23",
           "1,234,567.89", "1 000 000", "+1 (555) 123-4567", "192.168.0.1", "2024-06-01T12:34:56Z", "0xDEADBEEF",
           "٣٤٥", "१२३", "１２３", "²³", "Ⅻ", "½", "00000000000000000000", "99999999999999999999999999999999999"]
CASEFOLD = ["'S", "'T", "'RE", "'Ve", "'mM", "'LL", "'D", "'ſ", "'K", "'K", "I'D", "ʼs", "’s", "it’s", "'s'", "''s", "'''"]


def rand_from_ranges(r, ranges, n):
    out = []
    for _ in range(n):
        lo, hi = r.choice(ranges)
        c = r.randint(lo, hi)
        if 0xD800 <= c <= 0xDFFF:
            c = 0x41
        out.append(chr(c))
    return "".join(out)


RANGES = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f),
          (0x1100, 0x11ff), (0x3040, 0x30ff), (0x4e00, 0x9fff), (0xac00, 0xd7a3), (0x1f300, 0x1faff), (0x2000, 0x206f),
          (0x300, 0x36f), (0xff00, 0xffef), (0x10000, 0x1007f), (0x20000, 0x2a6df), (0xe000, 0xf8ff), (0x9, 0xd)]


def make_corpus():
    r = random.Random(SEED)
    c = ["", " ", "  ", "\n", "a", "A", "Hello", " Hello", "Hello ", " Hello ", "Hello world", "hello, world!",
         "The quick brown fox jumps over the lazy dog.", "  leading", "trailing  ", "\t tab then text",
         "▁already▁has▁metaspace", "Ġalready Ċbyte-level", "<s>", "</s>", "word", " word", "word ", "wordy words"]
    for _ in range(500):
        c.append(r.choice([sentence, paragraph])(r))
    for _ in range(320):
        c.append(r.choice(CODE)(r))
    for _ in range(120):
        v = json_value(r)
        c.append(json.dumps(v, ensure_ascii=r.random() < 0.3, indent=r.choice([None, 2, 4, "\t"])))
    for _ in range(100):
        c.append("".join(r.choice(CJK_ZH + CJK_JA + CJK_KO) for _ in range(r.randint(1, 3))))
    for _ in range(100):
        c.append(" ".join(r.choice(OTHER) for _ in range(r.randint(1, 3))))
    for _ in range(100):
        c.append("".join(r.choice(EMOJI + [" ", "a", "!", "\n"]) for _ in range(r.randint(1, 12))))
    for _ in range(100):
        c.append("".join(r.choice(COMBINING + [" ", "x", "é"]) for _ in range(r.randint(1, 8))))
    for _ in range(150):
        parts = []
        for _ in range(r.randint(1, 8)):
            parts.append(r.choice(WS) * r.choice([1, 1, 2, 3, 7, 20]))
            if r.random() < 0.7:
                parts.append(r.choice(WORDS + ["x", "(", "):", "!!", "-", "123", "é"]))
        c.append("".join(parts))
    for _ in range(100):
        c.append(" ".join(r.choice(NUMBERS) for _ in range(r.randint(1, 5))) + r.choice(["", ".", " apples", "%"]))
    for _ in range(150):
        parts = []
        for _ in range(r.randint(1, 6)):
            parts.append(r.choice(SPECIAL_TEXT))
            parts.append(r.choice(["", " ", "\n", "user\n", " hello ", "assistant", "Hi!", "  ", "x"]))
        c.append("".join(parts))
    c.append("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n")
    c.append("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>")
    c.append("<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n")
    for _ in range(80):
        c.append("".join(r.choice(ODD + [" ", "a", "\n", "é"]) for _ in range(r.randint(1, 8))))
    for _ in range(60):
        c.append(" ".join(r.choice(CASEFOLD) + r.choice(["", "x", " "]) for _ in range(r.randint(1, 5))))
    for _ in range(150):
        c.append(rand_from_ranges(r, RANGES, r.randint(1, 40)))
    for _ in range(60):
        c.append(r.choice([" ", "", "  ", "\n"]) + sentence(r) + r.choice([" ", "", "  ", "\n", " \n "]))
    # Long inputs: BPE worst cases, long whitespace runs, a long document.
    c += ["a" * 3000, "ab" * 1000, " " * 1000, "\n" * 500, "\t" * 300, "9" * 1000, "é" * 700, "中" * 500,
          "😀" * 200, "▁" * 300, "<|im_end|>" * 50, ("\r\n" * 10 + " " * 10) * 20,
          "\n\n".join(paragraph(r, 5, 10) for _ in range(8)), "".join(code_python(r) for _ in range(10))]
    return c


def make_bench_prose():
    r = random.Random(SEED + 1)
    out, size = [], 0
    while size < 256 * 1024:
        p = paragraph(r, 3, 9)
        out.append(p)
        size += len(p.encode()) + 2
    return "\n\n".join(out) + "\n"


def make_bench_code(repo):
    r = random.Random(SEED + 2)
    out = []
    for sub in ["src/core", "src/model", "src/text", "src/kernels"]:
        d = os.path.join(repo, sub)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            if name.endswith((".h", ".cpp")) and not name.startswith(("tokenizer", "bpe", "normalizer", "pre_tokenizer",
                                                                       "decoder", "detokenizer")):
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    out.append(f.read())
    text = "\n".join(out)
    while len(text.encode()) < 128 * 1024:
        text += r.choice(CODE)(r) + "\n"
    return text


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(repo, "tests/fixtures/text/tokenizer")
    os.makedirs(outdir, exist_ok=True)
    corpus = make_corpus()
    for s in corpus:
        s.encode("utf-8")  # raises on a surrogate: every string must be valid Unicode
    assert len(corpus) >= 2000, len(corpus)
    with open(os.path.join(outdir, "corpus.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        for s in corpus:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    with open(os.path.join(outdir, "bench_prose.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(make_bench_prose())
    bench_code_path = os.path.join(outdir, "bench_code.txt")
    if not os.path.exists(bench_code_path):  # a snapshot: the sources it is made from change over time
        with open(bench_code_path, "w", encoding="utf-8", newline="\n") as f:
            f.write(make_bench_code(repo))
    print(f"{len(corpus)} strings, {sum(len(s.encode()) for s in corpus)} bytes of text")


if __name__ == "__main__":
    main()
