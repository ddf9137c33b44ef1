#!/usr/bin/env bash
# Regenerates kv/blockhash/testdata/golden_hash.jsonl from an independent
# XXH3 implementation (npm hash-wasm, the reference C code built to WASM).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
oracle=$root/.cache/oracle-hash
mkdir -p "$oracle"
if [ ! -d "$oracle/node_modules/hash-wasm" ]; then
	(cd "$oracle" && npm init -y >/dev/null && npm install --no-audit --no-fund hash-wasm@4.12.0 >/dev/null)
fi
cp "$root/scripts/oracle/hash_vectors.mjs" "$oracle/"
node "$oracle/hash_vectors.mjs" "$root/kv/blockhash/testdata/golden_hash.jsonl"
