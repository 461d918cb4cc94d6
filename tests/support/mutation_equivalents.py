"""Surviving mutants judged equivalent, each with the reason no test can tell it from the original.

Used by ``scripts/mutation_test.py``: a survivor listed here does not count against the mutation
score. Keys are mutmut 3 mutant names (``<module>.x_<function>__mutmut_<n>``, stable while the
mutated function is unchanged); a listed name that no longer exists is simply not found, and a
listed mutant that a test kills counts as killed.
"""

_ABORT = "sglang_overlay.patches.openai_abort_status.hooks"

_BYTES_DECODE = (
    "bytes need no decoding in _as_int: bytes.strip/isascii/isdigit and int(bytes) give the same "
    "answer as on the decoded text, and a non-ASCII byte fails isascii() either way; a decode error "
    "(strict or an unknown error handler) is caught by normalize_abort_status and also ends as 500"
)
_HTTPSTATUS_FAST_PATH = (
    "the HTTPStatus branch is a fast path: HTTPStatus(400) taken through _as_int instead "
    "(operator.index of the member, then HTTPStatus(400)) is the same member"
)

_UNUSED_ARGUMENT = (
    "upstream 0.5.20's _handle_abort_finish_reason never reads that argument on this path: a non-abort "
    "finish reason returns None at once, a graceful abort (None) too, and a 400 reads only out and "
    "is_stream; the mutant passes None where upstream does not look"
)

EQUIVALENT: dict[str, str] = {
    f"{_ABORT}.x__as_int__mutmut_2": _BYTES_DECODE,  # decode skipped: bytes handled as bytes
    f"{_ABORT}.x__as_int__mutmut_7": _BYTES_DECODE,  # decode("ascii") strict
    f"{_ABORT}.x__as_int__mutmut_9": _BYTES_DECODE,  # "ASCII": the same codec
    f"{_ABORT}.x__as_int__mutmut_10": _BYTES_DECODE,  # unknown error handler, only looked up on an error
    f"{_ABORT}.x__as_int__mutmut_11": _BYTES_DECODE,  # "REPLACE": likewise
    f"{_ABORT}.x_normalize_abort_status__mutmut_3": _HTTPSTATUS_FAST_PATH,  # value > 400
    f"{_ABORT}.x_normalize_abort_status__mutmut_4": _HTTPSTATUS_FAST_PATH,  # value >= 401
    f"{_ABORT}.x_handle_abort_finish_reason__mutmut_12": _UNUSED_ARGUMENT,  # non-abort: self=None
    f"{_ABORT}.x_handle_abort_finish_reason__mutmut_14": _UNUSED_ARGUMENT,  # non-abort: state=None
    f"{_ABORT}.x_handle_abort_finish_reason__mutmut_15": _UNUSED_ARGUMENT,  # non-abort: is_stream=None
    f"{_ABORT}.x_handle_abort_finish_reason__mutmut_32": _UNUSED_ARGUMENT,  # graceful/400: self=None
    f"{_ABORT}.x_handle_abort_finish_reason__mutmut_34": _UNUSED_ARGUMENT,  # graceful/400: state=None
}
