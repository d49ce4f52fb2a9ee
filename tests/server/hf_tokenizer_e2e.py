#!/usr/bin/env python3
"""Reference side of hf_tokenizer_test.cc, with Hugging Face `tokenizers`.

    python3 hf_tokenizer_e2e.py train DIR   # DIR/tokenizer.json (Llama 3 style, BOS template)
                                            # and DIR/cases.json: the ids encode() gives
    python3 hf_tokenizer_e2e.py decode DIR ID...   # prints decode(ids) (special tokens skipped)

Exit code 3 when `tokenizers` is not installed (the test then skips).
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine",
                                "tokenizer"))
import make_hf_tokenizers as mk  # exits 3 without `tokenizers`
from tokenizers import Regex, Tokenizer, pre_tokenizers, processors

TEXTS = [
    "Hello world",
    "naïve café, 東京タワー 😀🚀 “quotes”",
    "I'm sure they'll say they've done it",
    "head<|eot_id|>body",
]


def train(out):
    tok = mk.train(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(mk.LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        ["<|begin_of_text|>", "<|eot_id|>"], True)
    bos = tok.token_to_id("<|begin_of_text|>")
    # As Llama 3's tokenizer.json: ByteLevel then a BOS template.
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    tok.save(os.path.join(out, "tokenizer.json"))
    cases = [{"text": t, "ids": tok.encode(t).ids,
              "ids_plain": tok.encode(t, add_special_tokens=False).ids} for t in TEXTS]
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump({"vocab_size": tok.get_vocab_size(), "bos": bos, "cases": cases}, f,
                  ensure_ascii=False)


def main():
    if sys.argv[1] == "train":
        train(sys.argv[2])
    else:
        tok = Tokenizer.from_file(os.path.join(sys.argv[2], "tokenizer.json"))
        sys.stdout.write(tok.decode([int(i) for i in sys.argv[3:]], skip_special_tokens=True))


if __name__ == "__main__":
    main()
