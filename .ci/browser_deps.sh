#!/usr/bin/env bash
# What tests/serving/test_explore_browser.py needs: Debian's chromium (Playwright's own browser download is not used: it
# fetches from a CDN that offline and mirrored machines cannot reach) and Playwright's Python driver. Under CI=true
# the browser test fails instead of skipping when these are missing, so this step must run before the tests.
set -euo pipefail

if [ ! -x /usr/bin/chromium ]; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo -n"; fi  # -n: no password prompt in CI
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null
fi
python -m pip install --quiet "playwright>=1.40" "gradio>=6,<7"
/usr/bin/chromium --version 2>/dev/null  # (Debian's wrapper script prints a harmless shell warning on some machines)
