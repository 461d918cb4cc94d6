#!/usr/bin/env bash
# The one command that pins everything: creates the environment (default .venv/ at the repository
# root), installs the pinned upstream (patches/upstream.lock) and this overlay into it, and finishes
# with `sglang-overlay check`.
#
#   scripts/apply_patches.sh                 CPU hosts and CI: torch+torchvision pair from the registry,
#                                            sglang --no-deps (sha256-verified wheel), pure-Python lock
#   scripts/apply_patches.sh --gpu           GPU hosts: upstream's full dependency set at its own pins
#   scripts/apply_patches.sh --venv DIR      use/create another environment
#   scripts/apply_patches.sh --print-pin     print the pin read from patches/upstream.lock and exit
#
# Idempotent. While it runs, DIR/.sglang-overlay-incomplete marks the environment as unfinished
# (`sglang-overlay check` refuses such an environment); it is removed only after the check passes.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCK="$REPO/patches/upstream.lock"
REQS="$REPO/scripts/requirements-cpu.lock"
MODE=cpu
VENV="$REPO/.venv"
PYTHON="${PYTHON:-python3}"
PRINT_PIN=0
WHEEL_CACHE="${SGLANG_OVERLAY_WHEEL_CACHE:-$HOME/.cache/sglang-overlay/wheels}"

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) MODE=gpu ;;
    --cpu) MODE=cpu ;;
    --venv) VENV="$2"; shift ;;
    --python) PYTHON="$2"; shift ;;
    --print-pin) PRINT_PIN=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "apply_patches.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

step() { echo "==> $*"; }
die() { echo "apply_patches.sh: ERROR: $*" >&2; exit 1; }

# --- the pin, read from the one place it lives ---------------------------------------------
pin() { "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["upstream"][sys.argv[2]])' "$LOCK" "$1"; }
[ -f "$LOCK" ] || die "missing $LOCK"
SGLANG_VERSION="$(pin version)"; WHEEL="$(pin wheel)"; WHEEL_SHA="$(pin wheel_sha256)"
TORCH_VERSION="$(pin torch)"; TORCHVISION_VERSION="$(pin torchvision)"; PY_VERSION="$(pin python)"
if [ "$PRINT_PIN" = 1 ]; then
  echo "sglang==$SGLANG_VERSION torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION python==$PY_VERSION"
  echo "wheel $WHEEL sha256 $WHEEL_SHA"
  exit 0
fi

step "[1/7] pin: sglang==$SGLANG_VERSION, torch==$TORCH_VERSION, torchvision==$TORCHVISION_VERSION ($MODE mode, environment $VENV)"
HAVE_PY="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || die "no Python at '$PYTHON'"
[ "$HAVE_PY" = "$PY_VERSION" ] || die "Python $HAVE_PY is not supported: the pinned sglang wheel is for Python $PY_VERSION (pass --python)"

step "[2/7] environment"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
else
  VENV_PY="$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [ "$VENV_PY" = "$PY_VERSION" ] || die "$VENV has Python $VENV_PY, the pin needs $PY_VERSION; remove it or pass --venv"
  PRESENT="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null || true)"
  if [ -n "$PRESENT" ] && [ "$PRESENT" != "$SGLANG_VERSION" ]; then
    die "a conflicting sglang $PRESENT is already installed in $VENV (pin: $SGLANG_VERSION); remove $VENV or pass --venv DIR"
  fi
fi
touch "$VENV/.sglang-overlay-incomplete"
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
    # --isolated: a local-version build (e.g. 2.13.0+cpu) offered by this host's pip config does not pair
    # with the registry's torchvision ("operator torchvision::nms does not exist").
    "${PIP[@]}" install --isolated "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
  fi
  "$VENV/bin/python" -c "import sys, torch, torchvision; v = torch.__version__; sys.exit(0 if v.split('+')[0] == '$TORCH_VERSION' else 'torch ' + v + ' installed, the pin is $TORCH_VERSION')" \
    || die "torch/torchvision do not import as the pinned pair"
  step "[5/7] sglang==$SGLANG_VERSION --no-deps, and the pure-Python lock ($(basename "$REQS"))"
  "${PIP[@]}" install --no-deps "$WHEEL_CACHE/$WHEEL"
  "${PIP[@]}" install -r "$REQS" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
fi

step "[6/7] sglang-overlay (editable, from $REPO)"
"${PIP[@]}" install --no-deps -e "$REPO"

step "[7/7] verify: sglang-overlay check"
rm -f "$VENV/.sglang-overlay-incomplete"
if ! "$VENV/bin/sglang-overlay" check; then
  touch "$VENV/.sglang-overlay-incomplete"
  die "the overlay does not verify against this environment (see the table above)"
fi
echo "==> done: $VENV is pinned and verified. Tests: $VENV/bin/python -m pytest"
