#!/usr/bin/env python3
"""Converts make_hf_tokenizers.py's GPT-2 and Llama 3 style tokenizers to GGUF metadata as
llama.cpp's convert_hf_to_gguf.py does (its get_vocab_base, with three padding ids past the
tokenizer as UNUSED, and gguf.SpecialVocab for merges and special token ids; llama.cpp's `gguf`
package writes the file), and records the ids Hugging Face `tokenizers` gives for the same texts:
the reference tokenizer_gguf_test.cc compares Saturn's GGUF tokenizer against.

    python3 make_gguf_tokenizers.py OUT_DIR

writes OUT_DIR/gpt2.gguf, OUT_DIR/llama3.gguf and OUT_DIR/cases.json. Exit code 3 when the
`tokenizers` or `gguf` package is not installed (the test then skips).
"""
import json
import os
import sys

try:
    import gguf
except ImportError as e:  # the test skips with this message
    print(f"llama.cpp's gguf is not installed ({e}); pip install gguf", file=sys.stderr)
    sys.exit(3)
from make_hf_tokenizers import TEXTS, make_all  # exits 3 without `tokenizers`

# name -> (tokenizer.ggml.pre as convert_hf_to_gguf.py names the model, bos_token, eos_token)
CONVERTED = {
    "gpt2": ("gpt-2", "<|endoftext|>", "<|endoftext|>"),
    "llama3": ("llama-bpe", "<|begin_of_text|>", "<|eot_id|>"),
}
PADDING = 3  # a model's vocab_size past its tokenizer's ids, as llama.cpp writes [PADn]


def convert(tok, dir_path, pre, gguf_path):
    vocab = tok.get_vocab(with_added_tokens=True)
    reverse = {i: t for t, i in vocab.items()}
    added = tok.get_added_tokens_decoder()
    tokens, types = [], []
    for i in range(len(vocab) + PADDING):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            tokens.append(reverse[i])
            types.append(gguf.TokenType.CONTROL if added[i].special else
                         gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(reverse[i])
            types.append(gguf.TokenType.NORMAL)
    w = gguf.GGUFWriter(gguf_path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(dir_path, load_merges=True, n_vocab=len(tokens)).add_to_gguf(w, quiet=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    out = sys.argv[1]
    made = make_all()
    cases = []
    for name, (pre, bos, eos) in CONVERTED.items():
        tok = made[name]
        dir_path = os.path.join(out, name)
        os.makedirs(dir_path, exist_ok=True)
        tok.save(os.path.join(dir_path, "tokenizer.json"))
        with open(os.path.join(dir_path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"bos_token": bos, "eos_token": eos}, f)
        convert(tok, dir_path, pre, os.path.join(out, name + ".gguf"))
        for text in TEXTS:
            cases.append({"gguf": name + ".gguf", "text": text,
                          "ids": tok.encode(text, add_special_tokens=False).ids,
                          "bos": tok.token_to_id(bos), "eos": tok.token_to_id(eos),
                          "n_tokens": tok.get_vocab_size(with_added_tokens=True) + PADDING})
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
