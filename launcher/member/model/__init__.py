"""A member that is a model: the ``transport: http`` driver (docs/llm.md).

The driver runs in the member's agent process, confined like any agent code, as the
agent's ``run(task)``; the runtime drives its turns as it drives a ``python`` agent's.
In the order a task meets them: ``settings.py`` (what the runtime tells the driver at
start), ``prompt.py`` (the system prompt: the ``[Capsule]`` block, then the session's
``MURMUR.md``), ``tools.py`` (what the model may call: ``call_member``, ``delegate``,
the declared ``command`` tools), ``endpoint.py`` (one request to an OpenAI-compatible
chat-completions endpoint: streaming, retries, errors with their codes), ``driver.py``
(the turns of one task: requests, tools, the token budget, the trace records).
"""
