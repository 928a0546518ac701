#!/usr/bin/env python3
"""make_tokenizer_goldens.py: expected token ids and decodes for quill's tokenizer golden test.

Writes, under --out (normally tests/fixtures/tokenizer/):
  corpus.json   the texts, as base64 of their raw bytes (some are invalid UTF-8 on purpose)
  goldens.json  for the Qwen3 and Qwen3.5 tokenizers: the ids of every text, with and without
                special-token parsing, and decode results for some id lists

References (see shared/data/qwen35-tokenizer/SOURCE.md):
  Qwen3:   tokenizers.Tokenizer.from_file(tokenizer.json) AND transformers AutoTokenizer on the dir;
           the two must agree (disagreements are recorded under "disagree" and printed).
  Qwen3.5: transformers AutoTokenizer.from_pretrained(qwen35 dir) is THE reference; the tokenizers
           library on its tokenizer.json is recorded too where it differs.
Invalid UTF-8: HF takes Python str, so a byte string is given to it as
  bytes.decode('utf-8', errors='replace')  (each maximal invalid subpart -> U+FFFD)
and quill's tok_encode applies the same rule to raw bytes.
"Without special-token parsing" is HF's split_special_tokens=True: special added tokens are plain
text, non-special added tokens (<think>, <tool_call>) still match; quill's parse_special = 0.

Usage (needs tokenizers 0.23 and transformers 5.x, no network):
  python3 tools/goldens/make_tokenizer_goldens.py --shared ../shared --out tests/fixtures/tokenizer
  python3 tools/goldens/make_tokenizer_goldens.py --corpus-only --out tests/fixtures/tokenizer
"""
import argparse
import base64
import json
import os
import random
import sys


# Random texts: fragments that stress the split regex, NFC, added-token matching and invalid bytes.
POOLS = [
    ["the", "The", "HELLO", "world", "It", "dOn", "x", "abc", "Zebra", "naïve", "café", "über", "straße", "ſ", "\u212a"],
    ["'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'m", "'M", "'ll", "'LL", "'d", "'D", "'", "''"],
    ["0", "7", "42", "2026", "3.14", "1,000", "٣", "४", "①", "Ⅻ", "½"],
    [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\u00a0", "\u3000", "\u0085", "\u2028", "\u180e", "\u200b", "\u2003", "\x0b", "\x0c"],
    list("!?.,;:-_()[]{}<>/\\\"`~@#$%^&*+=|") + ["...", "--", "->", "!=", "**", "//"],
    ["你", "好", "世界", "中文", "の", "カタ", "한국", "مرحبا", "ب", "שלום", "Привет", "Γειά", "สวัสดี", "ខ្មែរ", "नमस्ते", "क्ष", "ắ", "ế"],
    ["e\u0301", "a\u0300\u0301", "\u0301", "\u0308", "A\u030a", "\u1100\u1161\u11a8", "o\u0308\u0304", "\u0915\u094d", "\u0e31"],
    ["🤗", "😀", "👍🏽", "👨\u200d👩\u200d👧", "🏳\ufe0f\u200d🌈", "\u2764\ufe0f", "🇯🇵", "#\ufe0f\u20e3", "\ufe0f", "\u200d"],
    ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|im_start|", "<think", "<|", "|>", "<|audio_pad|>", "<|fim_prefix|>"],
]

def rand_text(r):
    """Pieces drawn from POOLS; 15% of texts get 1-3 random bytes >= 0x80 (mostly invalid UTF-8)."""
    parts = []
    for _ in range(r.randint(1, 40)):
        p = r.choice(POOLS)
        parts.append(r.choice(p))
    b = "".join(parts).encode("utf-8")
    if r.random() < 0.15:
        b = bytearray(b)
        for _ in range(r.randint(1, 3)):
            b.insert(r.randint(0, len(b)), r.randint(0x80, 0xFF))
        b = bytes(b)
    return b


def corpus():
    """(name, bytes) pairs: 67 chosen texts and 150 seeded random ones (from POOLS above)."""
    t = []

    def add(name, text):
        t.append((name, text if isinstance(text, bytes) else text.encode("utf-8")))

    add("empty", "")
    add("english", "The quick brown fox jumps over the lazy dog.")
    add("english_para", "It was the best of times, it was the worst of times; it was the age of wisdom, "
        "it was the age of foolishness... Hello, how are you? I'm fine -- thanks!\n")
    add("contractions", "I'm sure you're right, they've said it'll be what we'd do; it's John's.")
    add("contractions_upper", "DON'T STOP. I'M HERE. YOU'RE LATE. WE'VE GOT IT. SHE'LL GO. HE'D KNOW. IT'S")
    add("contractions_mixed", "It'S dOn'T I'm We'Ve they'LL you'D")
    add("contraction_long_s", "it'\u017f the \u212aelvin")
    add("code_c", "int main(int argc, char **argv) {\n    printf(\"%d\\n\", argc);\n    return 0;\n}\n")
    add("code_python", "def f(x):\n\tif x > 0:\n\t\treturn [i ** 2 for i in range(x)]  # squares\n\treturn None\n")
    add("json", '{"key": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}')
    add("url_email", "See https://example.com/path?q=1&r=two#frag or mail me@example.org.")
    add("digits", "1234567890 3.14159 1,000,000 2026-11-30 0x1F 007")
    add("digits_long", "9" * 64)
    add("chinese", "你好，世界！今天天气很好，我们去公园散步吧。")
    add("japanese", "こんにちは、世界。カタカナとひらがなと漢字が混ざった文です。")
    add("korean", "안녕하세요 세계! 한국어 문장입니다.")
    add("arabic", "مرحبا بالعالم! هذه جملة باللغة العربية.")
    add("hebrew", "שלום עולם, זה משפט בעברית.")
    add("russian", "Привет, мир! Это предложение на русском языке.")
    add("greek", "Γειά σου Κόσμε! ΑΒΓ αβγ ς")
    add("khmer", "សួស្តី​ពិភពលោក ភាសាខ្មែរ")
    add("thai", "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง")
    add("hindi_devanagari", "नमस्ते दुनिया, यह हिन्दी वाक्य है। क्षत्रिय")
    add("vietnamese", "Xin chào thế giới! Tiếng Việt có dấu: ắ ằ ẳ ẵ ặ")
    add("combining_e_acute", "e\u0301 cafe\u0301 re\u0301sume\u0301")
    add("combining_stack", "a\u0300\u0301\u0302 Z\u0351\u0352\u0353 o\u0308\u0304")
    add("nfc_precomposed_vs_not", "\u00e9 e\u0301 \u212b A\u030a \u1e9b\u0323")
    add("hangul_jamo", "\u1100\u1161\u11a8 \u1112\u1161\u11ab")
    add("emoji_simple", "I love 🤗 and 😀😃😄!")
    add("emoji_zwj", "family: 👨\u200d👩\u200d👧\u200d👦 and 🏳\ufe0f\u200d🌈")
    add("emoji_skin_tones", "👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 🧑🏿\u200d🚀")
    add("emoji_variation", "\u2764\ufe0f \u2764\ufe0e \u263a\ufe0f #\ufe0f\u20e3 🇺🇸🇯🇵")
    add("spaces_runs", "a  b   c    d     e")
    add("spaces_trailing", "trailing spaces   ")
    add("spaces_only", "     ")
    add("tabs", "\tindented\t\ttabs\t")
    add("mixed_whitespace", " \t \n \t\n\n  x \r\n\t y")
    add("crlf", "line one\r\nline two\r\n\r\nline four\r\n")
    add("newlines_many", "end\n\n\n\n\nstart")
    add("unicode_spaces", "a\u00a0b\u2003c\u3000d\u202fe\u2028f\u0085g")
    add("space_edge_cases", "x!\u0085y \u0085\u0085! ,\u180e. a\u180e\u180e b!\u2028 \u200b!\u00a0?")
    add("nul_and_controls", "a\x00b\x01c\x7fd\x1b[0m")
    add("special_chat", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    add("special_think", "<think>\nreasoning here\n</think>\n\nanswer")
    add("special_adjacent", "<|im_end|><|im_end|>x<|endoftext|>")
    add("special_partial", "<|im_start| <|im_end <think <|endoftext|")
    add("special_in_word", "abc<|im_start|>def<tool_call>ghi</tool_call>")
    add("qwen35_prompt", "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n"
        "<think>\n\n</think>\n\n")
    add("tool_call_xml", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>")
    add("punctuation", "!!! ??? ... --- *** ((())) [[]] {{}} <<>> ''' \"\"\" ``` ~~~")
    add("punct_newlines", "foo.\n\nbar!\r\n\r\nbaz?\n")
    add("math_symbols", "∀x∈ℝ: x² ≥ 0 ⇒ √(x²) = |x| ≠ ∞ ∑∫∂")
    add("long_word", "a" * 1500)
    add("long_repeated_words", "hello world " * 150)
    add("long_spaces", " " * 300 + "x")
    add("long_emoji", "😀" * 80)
    add("mixed_scripts", "English中文العربيةРусский日本語한국어ไทย")
    add("invalid_lone_continuation", b"abc\x80def")
    add("invalid_truncated_emoji", b"cut \xf0\x9f\x98 here")
    add("invalid_overlong", b"\xc0\x80 \xe0\x80\x80 \xf0\x80\x80\x80")
    add("invalid_surrogate", b"\xed\xa0\x80\xed\xbf\xbf")
    add("invalid_high", b"\xf5\xff\xfe x \xf4\x90\x80\x80")
    add("invalid_end", b"ends with \xe4\xbd")
    add("invalid_mixed", b"ok \xe4\xbd\xa0\xe5 \xff<|im_end|>\xc3")
    add("replacement_char", "already \ufffd here")
    add("bom_and_zw", "\ufeffstart\u200bzero\u200cwidth\u200d")
    add("private_use_and_astral", "\ue000\U0010fffd \U0001d11e \U00020000")
    r = random.Random(1234)  # fixed seed: the corpus is the same on every run
    for i in range(150):
        add("random%03d" % i, rand_text(r))
    return t


def b64(b):
    return base64.b64encode(b).decode("ascii")


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, separators=(",", ":"), ensure_ascii=True)
        f.write("\n")


def encode_nospecial(at, tk, s):
    """ids with split_special_tokens=True; transformers if it accepts the argument, else tokenizers."""
    try:
        return at.encode(s, add_special_tokens=False, split_special_tokens=True), "transformers"
    except TypeError:
        pass
    tk.encode_special_tokens = True
    try:
        return tk.encode(s, add_special_tokens=False).ids, "tokenizers"
    finally:
        tk.encode_special_tokens = False


def goldens_for(name, d, texts, problems):
    import tokenizers
    import transformers

    tk = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    at = transformers.AutoTokenizer.from_pretrained(d)
    out = {"dir": os.path.basename(d), "autotokenizer_class": type(at).__name__, "encode": [], "decode": []}
    for tname, raw in texts:
        s = raw.decode("utf-8", errors="replace")
        ids = list(at.encode(s, add_special_tokens=False))
        ids_tk = tk.encode(s, add_special_tokens=False).ids
        nos, nos_src = encode_nospecial(at, tk, s)
        e = {"name": tname, "ids": ids, "ids_nospecial": list(nos)}
        if ids_tk != ids:
            e["ids_tokenizers"] = ids_tk
            problems.append("%s/%s: tokenizers and AutoTokenizer disagree" % (name, tname))
        out["encode"].append(e)
    out["nospecial_source"] = nos_src
    # Decode cases: ids of some texts, and lists that cut a character or mix special tokens.
    lists = []
    by_name = {e["name"]: e["ids"] for e in out["encode"]}
    for tname in ("english", "chinese", "emoji_zwj", "special_chat", "special_think", "qwen35_prompt",
                  "invalid_mixed", "crlf", "combining_e_acute", "tool_call_xml"):
        lists.append(by_name[tname])
    hug = list(at.encode("🤗", add_special_tokens=False))
    lists.append(hug[:1])
    lists.append(hug[:-1] + at.encode(" ok", add_special_tokens=False))
    im_start = at.convert_tokens_to_ids("<|im_start|>")
    think = at.convert_tokens_to_ids("<think>")
    lists.append([im_start] + list(at.encode("x", add_special_tokens=False)) + [think] + hug)
    lists.append([])
    for ids in lists:
        for skip in (False, True):
            text = at.decode(ids, skip_special_tokens=skip)
            text_tk = tk.decode(ids, skip_special_tokens=skip)
            c = {"ids": ids, "skip_special": skip, "text_b64": b64(text.encode("utf-8"))}
            if text_tk != text:
                c["text_tokenizers_b64"] = b64(text_tk.encode("utf-8"))
                problems.append("%s: decode of %s disagree" % (name, ids[:8]))
            out["decode"].append(c)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", help="the shared/ directory (holds data/qwen3-tokenizer, data/qwen35-tokenizer)")
    ap.add_argument("--out", required=True, help="output directory, normally tests/fixtures/tokenizer")
    ap.add_argument("--corpus-only", action="store_true", help="write corpus.json only (no HF needed)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    texts = corpus()
    names = [n for n, _ in texts]
    assert len(set(names)) == len(names), "duplicate corpus names"
    write_json(os.path.join(a.out, "corpus.json"),
               {"note": "texts as base64 of raw bytes; made by tools/goldens/make_tokenizer_goldens.py",
                "texts": [{"name": n, "b64": b64(b)} for n, b in texts]})
    if a.corpus_only:
        print("wrote %d texts" % len(texts))
        return 0
    if not a.shared:
        ap.error("--shared is required unless --corpus-only")
    import tokenizers
    import transformers

    problems = []
    result = {
        "note": "made by tools/goldens/make_tokenizer_goldens.py; ids = AutoTokenizer.encode(text, "
                "add_special_tokens=False) of bytes.decode('utf-8', errors='replace')",
        "versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
                     "python": sys.version.split()[0]},
        "tokenizers": {},
    }
    for name, sub in (("qwen3", "qwen3-tokenizer"), ("qwen35", "qwen35-tokenizer")):
        d = os.path.join(a.shared, "data", sub)
        result["tokenizers"][name] = goldens_for(name, d, texts, problems)
    result["problems"] = problems
    write_json(os.path.join(a.out, "goldens.json"), result)
    for p in problems:
        print("WARNING:", p, file=sys.stderr)
    print("wrote %d texts x 2 tokenizers to %s (%d disagreements)" % (len(texts), a.out, len(problems)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
