"""A tool-call round trip through a rocmforge server with the official
`openai` client: tools, then the model's `tool_calls` (required), then a
`tool` message with the result, then the answer; and the same call
streamed. Prints what arrived as one JSON line.

Usage: python3 openai_tools.py BASE_URL MODEL
Exit 3 when the `openai` package is not installed (see openai_stream.py).
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
tools = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 20}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]
messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
first = client.chat.completions.create(
    model=model, messages=messages, tools=tools, tool_choice="required",
    max_tokens=64, temperature=0,
)
choice = first.choices[0]
call = choice.message.tool_calls[0]
arguments = json.loads(call.function.arguments)
messages.append(choice.message)
messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"celsius": 21})})
answer = client.chat.completions.create(
    model=model, messages=messages, tools=tools, max_tokens=16, temperature=0,
)
streamed = client.chat.completions.create(
    model=model, messages=messages[:1], tools=tools, tool_choice="required",
    max_tokens=64, temperature=0, stream=True,
)
stream_calls = []
stream_finish = None
for chunk in streamed:
    for c in chunk.choices:
        for d in c.delta.tool_calls or []:
            stream_calls.append({"name": d.function.name, "arguments": d.function.arguments})
        if c.finish_reason:
            stream_finish = c.finish_reason
print(
    json.dumps(
        {
            "finish_reason": choice.finish_reason,
            "content": choice.message.content,
            "name": call.function.name,
            "arguments": arguments,
            "answer_finish": answer.choices[0].finish_reason,
            "answer": answer.choices[0].message.content,
            "answer_calls": len(answer.choices[0].message.tool_calls or []),
            "stream_calls": stream_calls,
            "stream_finish": stream_finish,
            "first_arguments": call.function.arguments,
        }
    )
)
