#!/usr/bin/env bash
# The one command that pins everything: creates the environment (default .venv/ at the repository
# root), installs the pinned upstream (patches/pins/<version>/upstream.lock) and this overlay into it, and
# finishes with `sglang-overlay check`. The default pin is named in patches/pins/default.
#
#   scripts/apply_patches.sh                 CPU hosts and CI: torch+torchvision pair from the registry,
#                                            sglang --no-deps (sha256-verified wheel), pure-Python lock
#   scripts/apply_patches.sh --gpu           GPU hosts: upstream's full dependency set at its own pins
#   scripts/apply_patches.sh --upstream VER  another supported pin (patches/pins/VER/upstream.lock,
#                                            scripts/requirements-cpu-VER.lock; environment .venv-VER/)
#   scripts/apply_patches.sh --python PY     the interpreter to build the environment with (python3.11,
#                                            python3.12, ...: any CPython the pin's lock has a wheel for)
#   scripts/apply_patches.sh --venv DIR      use/create another environment
#   scripts/apply_patches.sh --editable      install the overlay editable (development) instead of as a wheel
#   scripts/apply_patches.sh --print-pin     print the pin read from the lock and exit
#
# Idempotent: a run that stopped part-way is finished by running it again. It ends with `sglang-overlay check`
# and fails (exit 1) when the environment does not verify.
# The overlay is installed as users install it: a wheel built from this checkout (it carries the
# process-start hook); --editable installs it editable and writes the hook with `process-hook --install`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE=cpu
EDITABLE=0
VENV=""
UPSTREAM=""
PYTHON="${PYTHON:-python3}"
PRINT_PIN=0
WHEEL_CACHE="${SGLANG_OVERLAY_WHEEL_CACHE:-$HOME/.cache/sglang-overlay/wheels}"

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) MODE=gpu ;;
    --cpu) MODE=cpu ;;
    --venv) VENV="$2"; shift ;;
    --upstream) [ $# -ge 2 ] || { echo "apply_patches.sh: --upstream needs a version" >&2; exit 2; }
                UPSTREAM="$2"; shift ;;
    --python) [ $# -ge 2 ] || { echo "apply_patches.sh: --python needs an interpreter" >&2; exit 2; }
              PYTHON="$2"; shift ;;
    --editable) EDITABLE=1 ;;
    --print-pin) PRINT_PIN=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "apply_patches.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

step() { echo "==> $*"; }
die() { echo "apply_patches.sh: ERROR: $*" >&2; exit 1; }

# --- the pin, read from the one place it lives ---------------------------------------------
HAVE_PY="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || die "no Python at '$PYTHON' (pass --python)"
PINS="$REPO/patches/pins"
[ -f "$PINS/default" ] || die "missing $PINS/default (the default pin's version)"
DEFAULT_VERSION="$(tr -d '[:space:]' < "$PINS/default")"
SGLANG_VERSION="${UPSTREAM:-$DEFAULT_VERSION}"
PIN_DIR="$PINS/$SGLANG_VERSION"
LOCK="$PIN_DIR/upstream.lock"
SUPPORTED="$(cd "$PINS" && for d in */; do [ -f "$d/upstream.lock" ] && printf '%s ' "${d%/}"; done)"
[ -f "$LOCK" ] || die "sglang==$SGLANG_VERSION is not a supported pin (supported: $SUPPORTED)"
REQS="$REPO/scripts/requirements-cpu-$SGLANG_VERSION.lock"
if [ "$SGLANG_VERSION" = "$DEFAULT_VERSION" ]; then VENV="${VENV:-$REPO/.venv}"; else VENV="${VENV:-$REPO/.venv-$SGLANG_VERSION}"; fi
# pin FIELD: a field of the lock's "upstream"; wheel FIELD: this Python's wheel entry ("" when none)
pin() { "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["upstream"].get(sys.argv[2], sys.argv[3]))' "$LOCK" "$1" "${2:-}"; }
wheel() { "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["upstream"]["wheels"].get(sys.argv[2], {}).get(sys.argv[3], ""))' "$LOCK" "$HAVE_PY" "$1"; }
PYTHONS="$("$PYTHON" -c 'import json,sys; print(" ".join(sorted(json.load(open(sys.argv[1]))["upstream"]["wheels"])))' "$LOCK")"
WHEEL="$(wheel file)"; WHEEL_SHA="$(wheel sha256)"
TORCH_VERSION="$(pin torch)"; TORCHVISION_VERSION="$(pin torchvision)"
TORCH_PIP="$(pin torch_pip isolated)"
if [ "$PRINT_PIN" = 1 ]; then
  echo "sglang==$SGLANG_VERSION torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION python $HAVE_PY (locked: $PYTHONS)"
  echo "wheel ${WHEEL:-none for Python $HAVE_PY} sha256 ${WHEEL_SHA:-none}"
  exit 0
fi

step "[1/7] pin: sglang==$SGLANG_VERSION, torch==$TORCH_VERSION, torchvision==$TORCHVISION_VERSION ($MODE mode, environment $VENV)"
[ -n "$WHEEL" ] || die "Python $HAVE_PY ($PYTHON) is not supported: the lock of sglang==$SGLANG_VERSION records wheels for Python $PYTHONS (pass --python)"

step "[2/7] environment"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
else
  VENV_PY="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [ "$VENV_PY" = "$HAVE_PY" ] || die "$VENV has Python $VENV_PY, not $HAVE_PY ($PYTHON); remove it or pass --venv"
  PRESENT="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null || true)"
  if [ -n "$PRESENT" ] && [ "$PRESENT" != "$SGLANG_VERSION" ]; then
    die "a conflicting sglang $PRESENT is already installed in $VENV (pin: $SGLANG_VERSION); remove $VENV or pass --venv DIR"
  fi
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

step "[3/7] sglang wheel: $WHEEL (sha256 verified against the lock)"
mkdir -p "$WHEEL_CACHE"
if [ ! -f "$WHEEL_CACHE/$WHEEL" ]; then
  "${PIP[@]}" download --no-deps --only-binary=:all: -d "$WHEEL_CACHE" "sglang==$SGLANG_VERSION"
fi
[ -f "$WHEEL_CACHE/$WHEEL" ] || die "pip download did not produce $WHEEL (wrong platform or Python?)"
GOT_SHA="$(sha256sum "$WHEEL_CACHE/$WHEEL" | cut -d' ' -f1)"
if [ "$GOT_SHA" != "$WHEEL_SHA" ]; then
  rm -f "$WHEEL_CACHE/$WHEEL"
  die "sha256 of $WHEEL is $GOT_SHA, the lock says $WHEEL_SHA: refusing to install it"
fi

if [ "$MODE" = gpu ]; then
  step "[4/7] GPU mode: sglang==$SGLANG_VERSION with upstream's full dependency set at its own pins"
  "${PIP[@]}" install "$WHEEL_CACHE/$WHEEL" "torch==$TORCH_VERSION"
  step "[5/7] (GPU mode: no CPU lock file)"
else
  step "[4/7] torch==$TORCH_VERSION + torchvision==$TORCHVISION_VERSION from the registry, as a pair"
  # torch.__version__ carries the build's local label (2.13.0+cu130): compare the public version.
  if ! "$VENV/bin/python" -c "import sys, torch, torchvision; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION' or torchvision.__version__.split('+')[0] != '$TORCHVISION_VERSION')" 2>/dev/null; then
    # torch_pip "isolated" (the lock's default): a local-version build (e.g. 2.13.0+cpu) offered by this host's pip
    # config does not pair with the registry's torchvision ("operator torchvision::nms does not exist").
    # "config" (0.5.23's lock): the host's configured index serves the pair itself; --isolated would skip it.
    if [ "$TORCH_PIP" = config ]; then
      "${PIP[@]}" install "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
    else
      "${PIP[@]}" install --isolated "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
    fi
  fi
  "$VENV/bin/python" -c "import sys, torch, torchvision; v = torch.__version__; sys.exit(0 if v.split('+')[0] == '$TORCH_VERSION' else 'torch ' + v + ' installed, the pin is $TORCH_VERSION')" \
    || die "torch/torchvision do not import as the pinned pair"
  step "[5/7] sglang==$SGLANG_VERSION --no-deps, and the pure-Python lock ($(basename "$REQS"))"
  "${PIP[@]}" install --no-deps "$WHEEL_CACHE/$WHEEL"
  "${PIP[@]}" install -r "$REQS" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
fi

if [ "$EDITABLE" = 1 ]; then
  step "[6/7] sglang-overlay (editable, from $REPO) and its process-start hook"
  "${PIP[@]}" install --no-deps -e "$REPO"
  # an editable install carries no .pth: write it (tokenizer workers are started without load_plugins())
  "$VENV/bin/sglang-overlay" process-hook --install
else
  step "[6/7] sglang-overlay: a wheel built from $REPO, installed as users install it (it carries its process-start hook)"
  DIST="$(mktemp -d)"
  rm -rf "$REPO/build"  # setuptools' own output: a stale copy there would travel into the wheel
  "${PIP[@]}" wheel --quiet --no-deps -w "$DIST" "$REPO"
  "${PIP[@]}" install --no-deps --force-reinstall "$DIST"/sglang_overlay-*.whl
  rm -rf "$DIST"
fi

step "[7/7] verify: sglang-overlay check"
if ! "$VENV/bin/sglang-overlay" check; then
  die "the overlay does not verify against this environment (see the table above)"
fi
echo "==> done: $VENV is pinned (sglang==$SGLANG_VERSION, Python $HAVE_PY) and verified. Tests: $VENV/bin/python -m pytest"
