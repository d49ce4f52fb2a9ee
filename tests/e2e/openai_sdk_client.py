#!/usr/bin/env python3
"""The real client side of tests/e2e/openai_sdk.sh: the OpenAI Python SDK (PyPI `openai`)
against saturn-server's HTTP API, as a user's code would call it.

    python3 openai_sdk_client.py BASE_URL TOKEN

Exit code 3 when the `openai` package cannot be imported; 1 with a message on any mismatch.
"""
import sys

try:
    import openai
except ImportError:
    sys.exit(3)


def check(cond, what):
    if not cond:
        print(f"openai_sdk_client: FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def main(base_url, token):
    client = openai.OpenAI(base_url=base_url, api_key=token, max_retries=0, timeout=60)
    models = client.models.list()
    ids = [m.id for m in models.data]
    check(ids == ["tiny"], f"models.list() gave {ids}")
    model = ids[0]

    # Not streamed: greedy, fixed length (vLLM's ignore_eos, passed as an extra field).
    extra = {"ignore_eos": True, "return_token_ids": True}
    c = client.completions.create(model=model, prompt=[1, 5, 9, 13], max_tokens=8,
                                  temperature=0, extra_body=extra)
    check(c.object == "text_completion", f"object {c.object}")
    check(c.choices[0].finish_reason == "length", f"finish_reason {c.choices[0].finish_reason}")
    check(c.usage.prompt_tokens == 4 and c.usage.completion_tokens == 8, f"usage {c.usage}")
    tokens = c.choices[0].model_extra["token_ids"]
    check(len(tokens) == 8, f"token_ids {tokens}")

    # Streamed: the same tokens, chunk by chunk, usage in the last chunk.
    stream = client.completions.create(model=model, prompt=[1, 5, 9, 13], max_tokens=8,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True}, extra_body=extra)
    streamed, finish, usage, chunks = [], None, None, 0
    for chunk in stream:
        chunks += 1
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            streamed += choice.model_extra.get("token_ids", [])
            finish = choice.finish_reason or finish
    check(chunks >= 2, f"{chunks} chunks")
    check(streamed == tokens, f"streamed {streamed} != not streamed {tokens}")
    check(finish == "length", f"stream finish_reason {finish}")
    check(usage is not None and usage.completion_tokens == 8, f"stream usage {usage}")

    # A list of prompts: one choice per prompt, by index, usage summed; streamed, each chunk
    # names its choice.
    many = client.completions.create(model=model, prompt=[[9, 13, 2], [1, 5, 9, 13]],
                                     max_tokens=8, temperature=0, extra_body=extra)
    check([x.index for x in many.choices] == [0, 1], f"choices {many.choices}")
    check(many.choices[1].model_extra["token_ids"] == tokens, f"prompt[1] gave {many.choices[1]}")
    check(many.usage.prompt_tokens == 7 and many.usage.completion_tokens == 16,
          f"usage of two prompts {many.usage}")
    stream = client.completions.create(model=model, prompt=["Hello", "World", "!"], max_tokens=4,
                                       stream=True, extra_body=extra)
    per_choice = {}
    for chunk in stream:
        for choice in chunk.choices:
            per_choice.setdefault(choice.index, []).extend(choice.model_extra.get("token_ids", []))
    check(sorted(per_choice) == [0, 1, 2] and all(len(t) == 4 for t in per_choice.values()),
          f"streamed choices {per_choice}")

    # Text in, text out (the built-in byte tokenizer), sampled with a seed: repeatable.
    a = client.completions.create(model=model, prompt="Hello", max_tokens=16, seed=5)
    b = client.completions.create(model=model, prompt="Hello", max_tokens=16, seed=5)
    check(a.choices[0].text == b.choices[0].text, "the same seed gave different text")

    # Errors come back as the SDK's typed exceptions, naming the field.
    try:
        client.completions.create(model=model, prompt=[1], max_tokens=0)
        check(False, "max_tokens=0 was accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "max_tokens" in str(e), f"max_tokens=0: {e}")
    # Chat (the server runs with --chat_template): an assistant message, the same text streamed
    # as deltas after a first chunk that names the role, and the template's own refusal a 400.
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=12,
                                          temperature=0, extra_body={"ignore_eos": True})
    check(chat.object == "chat.completion", f"chat object {chat.object}")
    message = chat.choices[0].message
    check(message.role == "assistant", f"chat role {message.role}")
    check(chat.usage.completion_tokens == 12, f"chat usage {chat.usage}")
    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=12,
                                            temperature=0, stream=True,
                                            extra_body={"ignore_eos": True})
    roles, text, finish = [], "", None
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    check(roles == ["assistant"], f"chat stream roles {roles}")
    check(text == message.content, f"chat streamed {text!r} != {message.content!r}")
    check(finish == "length", f"chat stream finish_reason {finish}")
    try:
        client.chat.completions.create(model=model, messages=[{"role": "tool", "content": "x"}])
        check(False, "a role the template refuses was accepted")
    except openai.BadRequestError as e:
        check("roles must be system, user or assistant" in str(e), f"chat refusal: {e}")
    try:
        client.completions.create(model="no-such-model", prompt=[1], max_tokens=1)
        check(False, "an unknown model was accepted")
    except openai.NotFoundError:
        pass
    wrong = openai.OpenAI(base_url=base_url, api_key="wrong-" + token, max_retries=0)
    try:
        wrong.completions.create(model=model, prompt=[1], max_tokens=1)
        check(False, "a wrong token was accepted")
    except openai.AuthenticationError:
        pass
    print(f"openai_sdk_client: ok (openai {openai.__version__}; {chunks} chunks streamed)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
