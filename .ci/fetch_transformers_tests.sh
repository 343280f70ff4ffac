#!/usr/bin/env bash
# Fetch transformers' common model tests for the INSTALLED transformers version, for
# tests/model/test_transformers_common.py.
#
# The wheel has no tests; the source distribution on PyPI ships tests/test_modeling_common.py (ModelTesterMixin).
# Nothing of it is committed here: it is extracted into .transformers_tests/<version>/ (git-ignored) and imported
# from there at test time. Idempotent: a version already fetched is left alone.
#
# test_modeling_common.py imports `.exporters.test_export` (ExportTesterMixin) and `.generation.test_utils`
# (GenerationTesterMixin), which the sdist does not ship (checked for 5.23.0). Where they are missing, this script
# writes empty stand-in classes so that the module imports; the marker file MISSING lists them, and the test module
# reads it to say which tests are therefore not run (a stand-in never counts as a pass).
set -euo pipefail
cd "$(dirname "$0")/.."

# test_modeling_common.py imports `parameterized` (a test dependency of transformers, not of this package).
python -m pip install --quiet parameterized

version="$(python -c 'import transformers; print(transformers.__version__)')"
dest=".transformers_tests/${version}"
if [[ -f "${dest}/COMPLETE" ]]; then
    echo "transformers ${version} common tests already in ${dest}"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
# --no-deps --no-binary: only the source archive of this exact version, nothing installed.
python -m pip download --quiet --no-deps --no-binary :all: "transformers==${version}" -d "${work}"
sdist="$(ls "${work}"/transformers-*.tar.gz)"
top="transformers-${version}"

rm -rf "${dest}"
package="${dest}/transformers_tests"
mkdir -p "${package}"
tar -xzf "${sdist}" -C "${work}" "${top}/tests/test_modeling_common.py"
cp "${work}/${top}/tests/test_modeling_common.py" "${package}/"
touch "${package}/__init__.py"
: >"${dest}/MISSING"

# The two sibling modules test_modeling_common.py imports: the real ones if this sdist has them, else stand-ins.
for spec in "exporters/test_export.py:ExportTesterMixin" "generation/test_utils.py:GenerationTesterMixin"; do
    path="${spec%%:*}"
    class="${spec##*:}"
    mkdir -p "${package}/$(dirname "${path}")"
    touch "${package}/$(dirname "${path}")/__init__.py"
    if tar -xzf "${sdist}" -C "${work}" "${top}/tests/${path}" 2>/dev/null; then
        cp "${work}/${top}/tests/${path}" "${package}/${path}"
    else
        printf '# Stand-in written by .ci/fetch_transformers_tests.sh: the sdist has no tests/%s.\nclass %s:\n    pass\n' \
            "${path}" "${class}" >"${package}/${path}"
        echo "tests/${path}" >>"${dest}/MISSING"
    fi
done

printf 'transformers %s\nsdist sha256 %s\n' "${version}" "$(sha256sum "${sdist}" | cut -d' ' -f1)" >"${dest}/SOURCE"
touch "${dest}/COMPLETE"
echo "transformers ${version} common tests extracted to ${dest} (not shipped: $(tr '\n' ' ' <"${dest}/MISSING"))"
