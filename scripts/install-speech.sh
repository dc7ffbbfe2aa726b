#!/usr/bin/env bash
# What the `asr` workload and the speech tests need beyond pip: Debian's espeak-ng speech synthesizer.
# Python needs nothing more (WAV is read with the standard library, features by Transformers).
set -euo pipefail
if command -v espeak-ng >/dev/null; then exit 0; fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq && $SUDO apt-get install -y -qq espeak-ng
