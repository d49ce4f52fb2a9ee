#!/usr/bin/env python3
"""Trains two small byte-level BPE tokenizers with Hugging Face `tokenizers` (GPT-2 style and
Llama 3 style), saves their tokenizer.json files, and writes the ids that `tokenizers` gives
for a set of texts: the reference tokenizer_bpe_test.cc compares Saturn's reader against.

    python3 make_hf_tokenizers.py OUT_DIR

Exit code 3 when the `tokenizers` package is not installed (the test then skips).
"""
import json
import os
import sys

try:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:  # the test skips with this message
    print(f"Hugging Face tokenizers is not installed ({e}); pip install tokenizers", file=sys.stderr)
    sys.exit(3)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 12:45 and we're late!",
    "Saturn serves a Llama-style decoder over gRPC with continuous batching on a paged KV cache.",
    "I'm sure they'll say they've done it; don't you think we'd know?",
    "Numbers: 0 1 2 3 42 123 4567 89012 3.14159 -7 1,000,000 2026-12-01",
    "Code: for (int i = 0; i < n; ++i) { sum += x[i] * w[i]; }  // dot\n\treturn sum;",
    "Français: déjà vu, naïve café, où est la gare? Deutsch: Straße, Größe, Übermaß.",
    "日本語のテキストと東京タワー。中文文本：你好，世界！한국어 문장도 있습니다.",
    "Emoji 😀🚀 and symbols © ® ™ € £ ¥ — “quotes” ‘single’ … ±×÷",
    "Whitespace   runs\n\n\nand\r\nline breaks\t\ttabs   end   ",
] * 20

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say they've done it; DON'T you think WE'D know?",
    "12345 678 9 3.14159 1,000,000",
    "  leading spaces and trailing   ",
    "a  b\n\n  c\t\td\r\n",
    "naïve café déjà vu Straße",
    "東京タワー 你好，世界！ 한국어",
    "Emoji 😀🚀 ±×÷ “quotes”",
    "unseen: Ωmega Привет мир ﷽",
    "vertical\x0btab, next\x85line, no\xa0break, thin\u2009space",
    "<|endoftext|>tail",
    "head<|eot_id|><|begin_of_text|>body<|eot_id|>",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    "",
    "\n",
    "   ",
    # Long texts: three of one pre-tokenizer piece each (letters, accented letters, emoji) and
    # one of 2,000 words. BPE's merges must not cost the square of a piece's length, or one
    # such prompt holds a server thread for minutes.
    "a" * 30000,
    " quickbrownfoxjumps" * 2000,
    "déjà" * 5000,
    "😀🚀" * 4000,
]


def train(pre_tokenizer, specials, ignore_merges):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok


def make_all():
    """The three tokenizers by name (make_gguf_tokenizers.py converts two of them to GGUF)."""
    return {
        "gpt2": train(pre_tokenizers.ByteLevel(add_prefix_space=False), ["<|endoftext|>"], False),
        "gpt2_prefix": train(pre_tokenizers.ByteLevel(add_prefix_space=True), ["<|endoftext|>"],
                             False),
        "llama3": train(pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
            ["<|begin_of_text|>", "<|eot_id|>"], True),
    }


def main():
    out = sys.argv[1]
    made = make_all()
    cases = []
    for name, tok in made.items():
        os.makedirs(os.path.join(out, name), exist_ok=True)
        tok.save(os.path.join(out, name, "tokenizer.json"))
        for text in TEXTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append({"tokenizer": name, "text": text, "ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=False)})
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
