#!/usr/bin/env bash
# Regenerates extproc/chattemplate/testdata/golden_chat.jsonl from
# testdata/chat_cases.json with the reference renderer (Python jinja2 with
# transformers' settings; see scripts/oracle/render_chat.py). Run by `make golden`.
# Needs: Debian's python3-jinja2 (apt-get install -y python3-jinja2) and the
# model files from `make models` (.cache/models/{qwen3,llama3_1}/tokenizer_config.json).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
models="${KVGATE_MODELS_DIR:-$root/.cache/models}"
# Debian's interpreter, not a pyenv python3 on PATH: that is where apt puts jinja2.
py=/usr/bin/python3
if ! "$py" -c 'import jinja2' 2>/dev/null; then
	echo "golden-chat: $py has no jinja2; run: apt-get install -y python3-jinja2" >&2
	exit 1
fi
for m in qwen3 llama3_1; do
	if [ ! -f "$models/$m/tokenizer_config.json" ]; then
		echo "golden-chat: missing $models/$m/tokenizer_config.json; run \`make models\`" >&2
		exit 1
	fi
done
td="$root/extproc/chattemplate/testdata"
"$py" "$root/scripts/oracle/render_chat.py" "$td/chat_cases.json" "$models" "$td/golden_chat.jsonl.tmp"
mv "$td/golden_chat.jsonl.tmp" "$td/golden_chat.jsonl"
echo "golden-chat: jinja2 $("$py" -c 'import jinja2; print(jinja2.__version__)'), $(wc -l <"$td/golden_chat.jsonl") cases"

# Token ids of every golden render, from Hugging Face's binding (installed by
# scripts/golden-tokenizer.sh): the whole chat path, request → ids, has an oracle.
oracle=$root/.cache/oracle
if [ ! -d "$oracle/node_modules/tokenizers" ]; then
	(mkdir -p "$oracle" && cd "$oracle" && { [ -f package.json ] || npm init -y >/dev/null; } && npm install --no-audit --no-fund tokenizers@0.23.2 >/dev/null)
fi
node "$root/scripts/oracle/chat_ids.js" "$root" "$oracle"
