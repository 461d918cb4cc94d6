"""The pieces of the scripted OpenAI server (``tests/support/scripted_server.py`` is the entry point and the overview).

Invariant: nothing here imports SGLang at module level (upstream loads inside functions, in the server process).
Cost: none to import.
"""
