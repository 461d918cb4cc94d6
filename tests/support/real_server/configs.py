"""The server configurations the real-server tier launches (``tests/e2e/``), each at most once per session
when modules run in file order: the pool (``tests/e2e/conftest.py``) starts a configuration the first time a
module asks for it and keeps it for the next.

Invariant: a configuration is a frozen ``ServerConfig``, so equal ones are one server. Cost: none.
"""

from tests.support.real_server.server import ServerConfig

# The configurations the tier launches (each at most once per session when modules run in file order).
OVERLAY_PICKLE_CLI = ServerConfig(overlay=True, launcher="overlay", ipc="pickle", abort_triggers=True)
OVERLAY_MSGPACK = ServerConfig(overlay=True, launcher="sglang", ipc="msgpack", abort_triggers=True)
# --enable-metrics: /metrics carries sglang_overlay_info (test_02; upstream's absence in test_03)
_METRICS = ("--enable-metrics",)
OVERLAY_PICKLE_W2 = ServerConfig(
    overlay=True, ipc="pickle", tokenizer_workers=2, abort_triggers=True, extra_args=_METRICS
)
OVERLAY_MSGPACK_W2 = ServerConfig(
    overlay=True, ipc="msgpack", tokenizer_workers=2, abort_triggers=True, extra_args=_METRICS
)
OVERLAY_API_KEY = ServerConfig(overlay=True, api_key="overlay-e2e-key")  # upstream's --api-key middleware
UPSTREAM_PICKLE = ServerConfig(overlay=False, ipc="pickle", abort_triggers=True)
UPSTREAM_MSGPACK = ServerConfig(overlay=False, ipc="msgpack", abort_triggers=True, extra_args=_METRICS)
OVERLAY_PLAIN = ServerConfig(overlay=True)  # no abort triggers: long runs (GSM8K) must not meet the running timeout
UPSTREAM_PLAIN = ServerConfig(overlay=False)  # the fuzz's reference: no queue limit, so its 5xx do not depend on timing
# A device pool of 1,024 tokens: the HiCache tests' prefixes (8 x ~250 tokens) spill to the host tier.
# write_through: every inserted prefix is backed up at once (the default policy waits for repeated hits).
_HICACHE_ARGS = ("--max-total-tokens", "1024", "--hicache-write-policy", "write_through")
OVERLAY_HICACHE = ServerConfig(overlay=True, hicache=True, extra_args=_HICACHE_ARGS)
UPSTREAM_HICACHE = ServerConfig(overlay=False, hicache=True, extra_args=_HICACHE_ARGS)
