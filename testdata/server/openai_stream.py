"""Streams one chat completion from a rocmforge server with the official
`openai` client and prints what arrived as one JSON line.

Usage: python3 openai_stream.py BASE_URL MODEL
Exit 3 when the `openai` package is not installed, so the calling test
can tell a missing client (skip, or fail in CI) from a failed request.
"""

import json
import sys

try:
    import openai
except ImportError:
    print("the openai package is not installed", file=sys.stderr)
    sys.exit(3)

base_url, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)
stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "Say hello."}],
    max_tokens=12,
    temperature=0,
    stream=True,
)
text = ""
chunks = 0
finish_reason = None
usage = None
roles = []
for chunk in stream:
    chunks += 1
    assert chunk.object == "chat.completion.chunk", chunk.object
    for choice in chunk.choices:
        if choice.delta.role:
            roles.append(choice.delta.role)
        if choice.delta.content:
            text += choice.delta.content
        if choice.finish_reason:
            finish_reason = choice.finish_reason
    if getattr(chunk, "usage", None):
        usage = {
            "prompt_tokens": chunk.usage.prompt_tokens,
            "completion_tokens": chunk.usage.completion_tokens,
            "total_tokens": chunk.usage.total_tokens,
        }
print(
    json.dumps(
        {
            "version": openai.__version__,
            "text": text,
            "chunks": chunks,
            "roles": roles,
            "finish_reason": finish_reason,
            "usage": usage,
        }
    )
)
