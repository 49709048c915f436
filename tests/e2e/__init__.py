"""End-to-end tests against the real ``opencode serve``, offline on 127.0.0.1.

The fixtures (``conftest.py``) install the pinned ``opencode-ai`` releases
(1.18.33 and 1.15.4) with npm on first use, into ``<repo>/.cache/opencode/``
or ``$PIGEOND_TEST_CACHE/opencode/``, and run them with isolated HOME/XDG
folders against a scripted fake OpenAI-compatible model (``testkit/fake_llm.py``),
which can also call tools (``testkit/tool_script.py``), such as pigeond's plugin's.
Without npm these tests fail with a message saying so; they never skip.

    .venv/bin/python -m pytest -m e2e          # only these
    .venv/bin/python -m pytest -m "not slow"   # everything but these
"""
